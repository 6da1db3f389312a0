"""The gate catches a broken pass: `harness bench` with one pass of the pipeline switched off
or replaced by a broken version (suites/harness/perturbations.py) exits non-zero and names
what went wrong. The tests assert on the gate's `Change` objects (kind, metric, baseline
and current values), not on console text.

    dropped barriers      --disable thread_sync, or one barrier removed     -> race finding
    no vectorization      --disable vectorize                               -> device_load_ops
                                                                              /store_ops rise
    reduction width - 1   T.reduce butterfly one XOR step short             -> oracle mismatch

The baseline is recorded once per module in a temporary folder from the unperturbed
pipeline, so these tests do not depend on the committed baseline being current.
"""

import pytest

from harness.bench.cases import CASES
from harness.bench.workflow import BenchOptions, BenchUsageError, execute, prepare
from harness.cli import main

TRANSPOSE = "copy/k-transpose-f16"       # threadgroup tile, one barrier per group, float4 I/O
REDUCE = "reduce/row-sum-f16"             # T.reduce_sum across simdgroups (simd_sum, red_buf)

# Every test reads the module's baseline (`folder`): one xdist worker records it once.
pytestmark = pytest.mark.xdist_group("gate-baseline")


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A baseline of the cases used here, from the unperturbed pipeline."""
    path = tmp_path_factory.mktemp("gate")
    outcome = gate_run(path, f"{TRANSPOSE},{REDUCE}", update_baseline=True)
    assert not outcome.failed and outcome.left_out == []
    assert set(outcome.baseline.cases) == {TRANSPOSE, REDUCE}
    return path


def gate_run(folder, cases, **options):
    """One `harness bench` run through its workflow (what the CLI prints comes from this)."""
    plan = prepare(BenchOptions(cases=cases, rounds=1,
                                            baseline=folder / "baseline.json",
                                            out=folder / "out", **options))
    return execute(plan)


def changes_of(outcome, case, kind):
    return {c.metric: c for c in outcome.changes if c.case == case and c.kind == kind}


def test_unperturbed_pipeline_passes(folder, capsys):
    # through the command line: no changes, exit 0, the report's path last
    assert main(["bench", "--rounds", "1", "--baseline", str(folder / "baseline.json"),
                 "--out", str(folder / "out"), "--cases", TRANSPOSE]) == 0
    out = capsys.readouterr().out
    assert "no changes against the baseline" in out
    assert "report: " in out.strip().splitlines()[-1]


def test_disabled_vectorizer_fails_on_access_counters(folder):
    outcome = gate_run(folder, TRANSPOSE, disable=("vectorize",))
    assert outcome.failed
    regressions = changes_of(outcome, TRANSPOSE, "regression")
    load = regressions["device_load_ops"]
    assert load.current > load.baseline and load.gates
    assert "device_bytes_read" not in regressions      # the same bytes, in more operations
    assert not changes_of(outcome, TRANSPOSE, "failure")      # the numbers are still right


def test_disabled_thread_sync_fails_with_a_race(folder):
    outcome = gate_run(folder, TRANSPOSE, disable=("thread_sync",))
    assert outcome.failed
    failure = changes_of(outcome, TRANSPOSE, "failure")["status"]
    # a race (the numbers may be wrong too: then the status is "mismatch", with the race)
    assert failure.current in ("finding", "mismatch") and ": race in kernel" in failure.detail
    # and the counters say why: no barriers any more
    barriers = changes_of(outcome, TRANSPOSE, "improvement")["barriers"]
    assert barriers.current == 0 < barriers.baseline


def test_one_dropped_barrier_fails_with_a_race(folder):
    import perturbations

    outcome = gate_run(folder, TRANSPOSE,
                       replace={"thread_sync": perturbations.drop_one_barrier})
    failure = changes_of(outcome, TRANSPOSE, "failure")["status"]
    assert outcome.failed and failure.current in ("finding", "mismatch")
    assert ": race in kernel" in failure.detail


def test_reduction_width_off_by_one_fails_the_oracle(folder):
    import perturbations

    assert REDUCE in {c.name for c in CASES}
    outcome = gate_run(folder, REDUCE,
                       replace={"lower_tile_ops": perturbations.reduce_butterfly_one_short})
    failure = changes_of(outcome, REDUCE, "failure")["status"]
    assert outcome.failed and failure.current == "mismatch"


def test_a_perturbed_run_never_becomes_the_baseline(folder, capsys):
    with pytest.raises(BenchUsageError, match="never becomes the baseline"):
        prepare(BenchOptions(cases=TRANSPOSE, disable=("vectorize",),
                                         update_baseline=True,
                                         baseline=folder / "baseline.json"))
    assert main(["bench", "--rounds", "1", "--baseline", str(folder / "baseline.json"),
                 "--out", str(folder / "out"), "--cases", TRANSPOSE, "--disable",
                 "vectorize", "--update-baseline"]) == 2
    assert "never becomes the baseline" in capsys.readouterr().err

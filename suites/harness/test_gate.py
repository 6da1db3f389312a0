"""The gate catches a broken pass: `harness bench` with one pass of the pipeline switched off
or replaced by a broken version (suites/harness/perturbations.py) exits non-zero and names
what went wrong.

    dropped barriers      --disable thread_sync, or one barrier removed     -> race finding
    no vectorization      --disable vectorize                               -> device_load_ops
                                                                              /store_ops rise
    reduction width - 1   T.reduce butterfly one XOR step short             -> oracle mismatch

The baseline is recorded once per module in a temporary folder from the unperturbed
pipeline, so these tests do not depend on the committed baseline being current.
"""

import pytest

from harness import bench
from harness.cli import main

TRANSPOSE = "copy/k-transpose-f16"       # threadgroup tile, one barrier per group, float4 I/O
REDUCE = "reduce/row-sum-f16"             # T.reduce_sum across simdgroups (simd_shuffle_xor)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A baseline of the cases used here, from the unperturbed pipeline."""
    path = tmp_path_factory.mktemp("gate")
    cases = f"{TRANSPOSE},{REDUCE}"
    assert main(["bench", "--cases", cases, "--rounds", "1", "--update-baseline",
                 "--baseline", str(path / "baseline.json"), "--out", str(path / "out")]) == 0
    return path


def bench_cli(folder, *args):
    return main(["bench", "--rounds", "1", "--baseline", str(folder / "baseline.json"),
                 "--out", str(folder / "out"), *args])


def test_unperturbed_pipeline_passes(folder, capsys):
    assert bench_cli(folder, "--cases", TRANSPOSE) == 0
    out = capsys.readouterr().out
    assert "no changes against the baseline" in out
    assert "report: " in out.strip().splitlines()[-1]


def test_disabled_vectorizer_fails_on_access_counters(folder, capsys):
    assert bench_cli(folder, "--cases", TRANSPOSE, "--disable", "vectorize") == 1
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if "regression" in line]
    assert any("device_load_ops" in r and TRANSPOSE in r for r in rows), out
    assert "FAIL" in out


def test_disabled_thread_sync_fails_with_a_race(folder, capsys):
    assert bench_cli(folder, "--cases", TRANSPOSE, "--disable", "thread_sync") == 1
    out = capsys.readouterr().out
    failure = [line for line in out.splitlines() if "failure" in line and TRANSPOSE in line]
    assert failure and "race" in failure[0], out
    # and the counters say why: no barriers any more
    assert any("barriers" in line and "improvement" in line for line in out.splitlines())


def test_one_dropped_barrier_fails_with_a_race(folder, capsys):
    assert bench_cli(folder, "--cases", TRANSPOSE,
                     "--replace", "thread_sync=perturbations:drop_one_barrier") == 1
    out = capsys.readouterr().out
    failure = [line for line in out.splitlines() if "failure" in line and TRANSPOSE in line]
    assert failure and "race" in failure[0], out


def test_reduction_width_off_by_one_fails_the_oracle(folder, capsys):
    assert REDUCE in {c.name for c in bench.CASES}
    assert bench_cli(folder, "--cases", REDUCE,
                     "--replace", "lower_tile_ops=perturbations:reduce_butterfly_one_short") == 1
    out = capsys.readouterr().out
    failure = [line for line in out.splitlines() if "failure" in line and REDUCE in line]
    assert failure and "mismatch" in failure[0], out


def test_a_perturbed_run_never_becomes_the_baseline(folder, capsys):
    assert bench_cli(folder, "--cases", TRANSPOSE, "--disable", "vectorize",
                     "--update-baseline") == 2
    assert "never becomes the baseline" in capsys.readouterr().err

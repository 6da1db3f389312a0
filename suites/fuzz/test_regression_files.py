"""Regression case files (harness/check/regressions.py) and the suite that replays them
(suites/regressions/test_regressions.py), on files written into tmp_path.

The failing case is real: the staged transpose of fuzzfamilies.py compiled with the
thread_sync pass disabled (the file's "disable" pipeline option) races.
"""

from pathlib import Path

import pytest

from harness.check import regressions
from harness.check.case import failure_signature, run_case
from harness.check.regressions import RegressionCase

SUITE = Path(__file__).resolve().parents[1] / "regressions" / "test_regressions.py"
PARAMS = {"n": 8, "threads": 32, "dtype": "float32"}


def _case(state, disable, module):
    result = run_case("staged_transpose", PARAMS, disable=("thread_sync",))
    return RegressionCase("staged_transpose", dict(PARAMS), disable=list(disable),
                          imports=[module.__name__], status=result.status,
                          signature=result.signature, state=state, message=result.message,
                          msl=result.msl)


class _Outcomes:
    """Collects each test's outcome from a nested pytest session."""

    def __init__(self):
        self.by_id = {}

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped \
                else report.outcome
            self.by_id[report.nodeid.split("[", 1)[1].rstrip("]")] = outcome


def test_the_suite_replays_open_and_fixed_cases(tmp_path, monkeypatch, test_families):
    broken = ["thread_sync"]
    cases = {
        "open-still-fails": _case("open", broken, test_families),            # xfail
        "fixed-passes": _case("fixed", [], test_families),                   # pass
        "open-now-passes": _case("open", [], test_families),                 # XPASS(strict)
        "fixed-fails-again": _case("fixed", broken, test_families),          # fail
    }
    for name, case in cases.items():
        (tmp_path / f"{name}.json").write_text(case.to_json())
    monkeypatch.setenv("METALTILE_REGRESSIONS", str(tmp_path))
    outcomes = _Outcomes()
    pytest.main([str(SUITE), "-q", "-p", "no:cacheprovider"], plugins=[outcomes])
    assert outcomes.by_id == {"open-still-fails": "xfailed", "fixed-passes": "passed",
                              "open-now-passes": "failed", "fixed-fails-again": "failed"}


def test_an_open_case_failing_differently_is_a_failure(test_families):
    case = _case("open", ["thread_sync"], test_families)
    case.signature = "finding:bounds"
    with pytest.raises(AssertionError, match="fails differently"):
        regressions.expect(case)


def test_save_and_load_round_trip(tmp_path, test_families):
    case = _case("open", ["thread_sync"], test_families)
    path = regressions.save(case, tmp_path)
    assert path.name == f"staged_transpose-{case.status}-{case.key}.json"
    again = regressions.load(path)
    assert again == case and again.path == path
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left
    assert regressions.load_all(tmp_path) == [case]


def test_load_rejects_other_json(tmp_path):
    (tmp_path / "x.json").write_text('{"family": "copy", "colour": "red"}')
    with pytest.raises(ValueError, match="not a regression case"):
        regressions.load(tmp_path / "x.json")


class _Finding:
    def __init__(self, kind):
        self.kind = kind


@pytest.mark.parametrize("status,message,kinds,signature", [
    ("pass", "", (), None),
    ("skip", "not yet", (), None),
    ("mismatch", "output 0: 3 of 64 differ", (), "mismatch"),
    ("mismatch", "...", ("uninit", "race", "race"), "mismatch+finding:race,uninit"),
    ("finding", "...", ("race",), "finding:race"),
    ("redundant_barrier", "k: 2 barrier(s)", (), "redundant_barrier"),
    ("unreached_barrier", "k: 2 barrier(s)", (), "unreached_barrier"),
    ("crash", "KernelCrashError: kernel 'k': segfault at MSL line 7", (), "crash:KernelCrashError"),
    ("rejected", "LoweringError: kernel 'k', T.reduce_max: cannot reduce fragment 'x' "
                 "(shape (8, 12), 64 threads) over dim 1: no layout", (),
     "rejected:LoweringError: cannot reduce fragment '*' (shape (#), # threads) over dim #: "
     "no layout"),
    ("internal_error", 'TypeError: bad\n  File "/a/core/transform/vectorize.py", line 9, in '
                       "_lanes\n", (), "internal_error:TypeError@vectorize.py:_lanes"),
    ("crash:worker", "the worker died", (), "crash:worker"),
])
def test_failure_signatures(status, message, kinds, signature):
    assert failure_signature(status, message, [_Finding(k) for k in kinds]) == signature


def test_signature_ignores_what_shrinking_changes():
    big = "LoweringError: kernel 'copy_shared', T.copy: tile (64, 32) over 256 threads: no"
    small = "LoweringError: kernel 'copy_fragment', T.copy: tile (4, 1) over 32 threads: no"
    assert failure_signature("rejected", big) == failure_signature("rejected", small)

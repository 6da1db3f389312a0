"""Every regression case in this folder, replayed (harness/check/regressions.py).

A case file is written by `harness fuzz` with "state": "open": the bug is not fixed, so
the case is an xfail(strict=True) that must still fail with its recorded signature
(failing differently is a real failure). When a fix makes it pass, the strict xfail
reports XPASS: flip the file to "state": "fixed", and from then on it must pass.
METALTILE_REGRESSIONS=DIR collects another folder (the suites' own tests use it).
"""

import os
from pathlib import Path

import pytest

from harness.check import regressions


def _directory() -> Path:
    return Path(os.environ.get("METALTILE_REGRESSIONS", regressions.DEFAULT_DIR))


def _param(case):
    marks = []
    if case.state == "open":
        marks.append(pytest.mark.xfail(
            strict=True, raises=regressions.StillFailing,
            reason=f"open: {case.signature}; once it passes set \"state\": \"fixed\" in "
                   f"{case.path.name}"))
    return pytest.param(case, id=case.path.stem, marks=marks)


def pytest_generate_tests(metafunc):
    # At collection, not import: the folder can change between sessions of one process.
    if "case" in metafunc.fixturenames:
        cases = [_param(c) for c in regressions.load_all(_directory())]
        none = pytest.param(None, id="none", marks=pytest.mark.skip(
            reason=f"no regression case in {_directory()}"))
        metafunc.parametrize("case", cases or [none])


def test_regression(case):
    regressions.expect(case)

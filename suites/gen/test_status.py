"""One status vocabulary: `run_case` returns a `Status` member for every outcome, and the
files that hold statuses (regression cases, bench results) keep their plain string values,
so files written before the enum existed read back as the same members."""

from __future__ import annotations

import json

import pytest

from harness.check import regressions
from harness.check.case import Status, failure_signature, run_case

SMALL_COPY = {"M": 37, "N": 45, "dtype": "float16", "mode": "transpose", "bM": 16,
              "bN": 16, "threads": 64, "vec": 1}


def test_run_case_returns_members_of_the_enum():
    passed = run_case("copy", SMALL_COPY)
    broken = run_case("copy", SMALL_COPY, disable=("thread_sync",))
    assert type(passed.status) is Status and passed.status is Status.PASS, passed.message
    assert type(broken.status) is Status and broken.status in (Status.FINDING,
                                                               Status.MISMATCH)
    assert passed.ok and not broken.ok


def test_a_status_reads_and_writes_as_its_value():
    assert json.dumps({"status": Status.REDUNDANT_BARRIER}) == '{"status": "redundant_barrier"}'
    assert f"{Status.MISMATCH}" == str(Status.MISMATCH) == "mismatch"
    assert Status("compile_error") is Status.COMPILE_ERROR
    assert failure_signature(Status.FINDING, "", ()) == failure_signature("finding", "", ())


def test_regression_files_load_statuses_as_members():
    for path in sorted(regressions.DEFAULT_DIR.glob("*.json")):
        assert type(regressions.load(path).status) is Status, path.name


def test_a_regression_file_with_an_unknown_status_is_refused(tmp_path):
    path = sorted(regressions.DEFAULT_DIR.glob("*.json"))[0]
    data = json.loads(path.read_text())
    data["status"] = "exploded"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"bad.json: status must be one of .*'exploded'"):
        regressions.load(bad)

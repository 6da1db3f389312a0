"""The gemm family catches a barrier planner with wrong matrix-tile footprints.

`matrix_store_as_one_element` (perturbations.py) is `thread_sync` treating a
simdgroup_store as touching only its tile's first element. The family's shared-accumulator
variant (`accum="shared"`, TileLang's Metal path) stores each simdgroup's 8x8 tiles with
simdgroup_store into threadgroup memory (padded row strides included), and its "window"
epilogue reads part of those tiles element-wise in the threads' layout: without a barrier
between them the emulator reports the race. The unperturbed planner passes the same cases.
"""

import pytest
from hypothesis import HealthCheck, given, settings

from harness.check.case import run_case
from harness.gen import gemm
from perturbations import matrix_store_as_one_element

BASE = {"M": 40, "N": 40, "K": 32, "bM": 16, "bN": 16, "bK": 16, "threads": 128,
        "dtype": "float16", "out_dtype": "float32", "trans_A": False, "trans_B": False,
        "num_stages": 2, "init": "clear", "a_operand": "shared", "accum": "shared"}
CASES = {
    "window inside a tile, padded rows": {**BASE, "epilogue": "window", "pad": 4,
                                          "window": [2, 3, 5, 4]},
    "window across tiles": {**BASE, "epilogue": "window", "pad": 0, "window": [3, 9, 12, 6],
                            "init": "clear_accum", "trans_B": True},
}


@pytest.mark.parametrize("name", CASES)
def test_shared_accumulator_window_passes_with_the_real_planner(name):
    res = run_case("gemm", CASES[name])
    assert res.status == "pass", (res.status, res.message)


@pytest.mark.parametrize("name", CASES)
def test_one_element_tile_footprint_is_caught_as_a_race(name):
    res = run_case("gemm", CASES[name], replace={"thread_sync": matrix_store_as_one_element})
    assert res.status != "pass"
    assert any(f.kind == "race" and f.address_space == "threadgroup" for f in res.findings), \
        (res.status, res.message)


def test_the_family_generates_cases_the_perturbation_breaks():
    """Drawn from the family's own strategy (not hand-picked): among shared-accumulator
    window cases, the broken planner fails some and the real one passes them all."""
    drawn = []

    @settings(max_examples=400, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(gemm.params())
    def collect(p):
        if p["accum"] == "shared" and p["epilogue"] == "window" and p["M"] * p["N"] <= 48 * 48 \
                and p["K"] <= 32 and len(drawn) < 12:
            drawn.append(p)

    collect()
    assert drawn, "the gemm family drew no shared-accumulator window case"
    caught = 0
    for p in drawn:
        assert run_case("gemm", p).status == "pass", p
        if not caught:  # one case the broken planner fails is the claim; the rest cost time
            res = run_case("gemm", p, replace={"thread_sync": matrix_store_as_one_element})
            caught += res.status != "pass"
    assert caught >= 1, drawn


def test_bench_gate_fails_on_the_window_case(tmp_path, capsys, monkeypatch):
    from harness.cli import main
    monkeypatch.setenv("COLUMNS", "200")
    args = ["bench", "--cases", "gemm/shared-acc-window-f16", "--rounds", "1",
            "--baseline", str(tmp_path / "baseline.json"), "--out", str(tmp_path / "out")]
    assert main(args) == 0
    capsys.readouterr()
    assert main(args + ["--replace",
                        "thread_sync=perturbations:matrix_store_as_one_element"]) == 1
    out = capsys.readouterr().out
    assert "race" in out and "FAIL" in out

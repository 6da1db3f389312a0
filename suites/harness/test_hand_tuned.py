"""The hand-tuned reference kernels (harness/bench/reference_kernels/) on the emulator: each one
computes its family's oracle with every check clean, also where the last round of a row is
masked and the threadgroup is no power of two; a reference with a barrier removed is caught
as a race; a row length the 4-wide kernels cannot read is a clear error; and every bench
case with a reference names a kernel that exists."""

from __future__ import annotations

import re

import pytest

from harness.bench import measure
from harness.bench.cases import CASES, BenchCase, HandTuned
from harness.gen import family as families


def _measured(name, family, params, hand):
    case = BenchCase(name, family, params, "test shape", "small", hand_tuned=hand)
    return measure.measure_case(case, rounds=1, chip_names=("M2",))


# Small shapes: ragged rows (N/4 not a multiple of the threads), 96 threads (3 simdgroups).
SMALL = [
    ("rmsnorm", {"M": 3, "N": 100, "dtype": "float16", "eps": 1e-6, "weight": "global",
                 "bM": 1, "threads": 32}, HandTuned("rmsnorm.metal", "rmsnorm_row", 96,
                                                    ("eps",))),
    ("rmsnorm", {"M": 2, "N": 1032, "dtype": "float32", "eps": 1e-5, "weight": "global",
                 "bM": 1, "threads": 64}, HandTuned("rmsnorm.metal", "rmsnorm_row", 64,
                                                    ("eps",))),
    ("softmax", {"M": 3, "N": 388, "dtype": "bfloat16", "scale": 0.5, "bM": 1,
                 "threads": 64}, HandTuned("softmax.metal", "softmax_row", 96, ("scale",))),
    ("softmax", {"M": 2, "N": 1000, "dtype": "float32", "scale": 1.0, "bM": 1,
                 "threads": 64}, HandTuned("softmax.metal", "softmax_looped", 96, ("scale",))),
    ("softmax", {"M": 2, "N": 64, "dtype": "float16", "scale": 0.125, "bM": 1,
                 "threads": 32}, HandTuned("softmax.metal", "softmax_looped", 64, ("scale",))),
    ("layernorm", {"M": 3, "N": 260, "dtype": "float16", "eps": 1e-5, "bM": 1,
                   "threads": 64}, HandTuned("layernorm.metal", "layernorm_row", 96,
                                             ("eps",))),
    # both sides at 896 threads (28 simdgroups), the bench's geometry for hidden size 3584
    ("rmsnorm", {"M": 2, "N": 3584, "dtype": "float16", "eps": 1e-6, "weight": "global",
                 "bM": 1, "threads": 896}, HandTuned("rmsnorm.metal", "rmsnorm_row", 896,
                                                     ("eps",))),
]


@pytest.mark.parametrize("family,params,hand", SMALL,
                         ids=[f"{h.kernel}-{p['N']}-{p['dtype']}" for _, p, h in SMALL])
def test_reference_matches_the_oracle_with_every_check(family, params, hand):
    m = _measured(f"{family}/t", family, params, hand)
    ref = m.hand_tuned
    assert m.status == "pass", m.message
    assert ref["status"] == "pass", ref["message"]
    assert ref["findings"] == []
    assert ref["counters"]["barriers"] > 0 and ref["counters"]["simd_ops"] > 0
    assert set(ref["ratios"]) == set(measure.RATIO_COUNTERS)
    assert set(ref["modeled_ratios"]) == {"M2"}


def test_a_reference_without_its_barrier_is_caught(tmp_path, monkeypatch):
    text = (measure.REFERENCE_KERNELS / "rmsnorm.metal").read_text()
    racy, n = re.subn(r"\n\s*threadgroup_barrier\(mem_flags::mem_threadgroup\);", "", text)
    assert n == 1
    (tmp_path / "rmsnorm.metal").write_text(racy)
    monkeypatch.setattr(measure, "REFERENCE_KERNELS", tmp_path)
    family, params, hand = SMALL[0]
    ref = _measured("rmsnorm/t", family, params, hand).hand_tuned
    assert ref["status"] in ("finding", "mismatch")
    assert any("race" in f or "uninit" in f for f in ref["findings"]), ref["findings"]


def test_a_row_length_the_vector_kernels_cannot_read_is_an_error():
    params = {"M": 2, "N": 30, "dtype": "float32", "eps": 1e-6, "weight": "global",
              "bM": 1, "threads": 32}
    ref = _measured("rmsnorm/t", "rmsnorm", params,
                    HandTuned("rmsnorm.metal", "rmsnorm_row", 32, ("eps",))).hand_tuned
    assert ref["status"] == "launch_error"
    assert "rmsnorm_row" in ref["message"] and "N=30 is not a multiple of 4" in ref["message"]


def test_bench_cases_name_existing_reference_kernels():
    cases = [c for c in CASES if c.hand_tuned]
    assert {c.family for c in cases} == {"rmsnorm", "softmax", "layernorm"}
    for case in cases:
        hand = case.hand_tuned
        text = (measure.REFERENCE_KERNELS / hand.file).read_text()
        assert re.search(rf"\bvoid\s+{hand.kernel}\s*\(", text), case.name
        assert case.params["N"] % 4 == 0 and case.params["bM"] == 1
        assert families.get(case.family) is not None
        for name in hand.constants:
            assert name in case.params, (case.name, name)

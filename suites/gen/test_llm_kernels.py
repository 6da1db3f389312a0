"""The decode GEMV and the quantized matmul families (harness/gen/gemv.py, qmm_fp8.py,
qmm_fp4.py) beyond their oracle runs: the form of the code they compile to (no simdgroup
matrices in a GEMV, vector weight loads, decoding by bit operations) and the
barrier-necessity check on each variant that has barriers."""

import re

import pytest

import core
from core.target import METAL
from harness.check import barriers
from harness.bench.cases import CASES
from harness.check.case import Status, run_case
from harness.gen import family as families
from harness.gen import gemv
from harness.bench.roofline import local_array_bytes


def _msl(name, params):
    built = families.get(name).build(dict(params))
    return core.compile(built.func, out_idx=built.out_idx).msl


GEMV = {"M": 5, "N": 24, "K": 200, "bM": 4, "bN": 8, "bK": 128, "threads": 64,
        "dtype": "float16", "out_dtype": "float16"}


def test_gemv_splits_k_over_lanes_without_barriers_or_matrices():
    msl = _msl("gemv", GEMV)
    assert "simd_sum(" in msl and "simdgroup_" not in msl      # 32 lanes per row: simd_sum
    assert "threadgroup_barrier" not in msl and "threadgroup " not in msl
    assert "(const device half4*)(W" in msl                 # weight rows in vector loads


LANES = {**GEMV, "form": "lanes"}


@pytest.mark.parametrize("M, N, K, bM, bN, threads, dtype, out_dtype", [
    (5, 37, 203, 4, 8, 128, "bfloat16", "bfloat16"),   # ragged M, N, K; 4 simdgroups x 2 rows
    (9, 40, 301, 8, 16, 512, "float16", "float16"),    # 16 simdgroups, one row each
    (7, 33, 130, 8, 16, 32, "bfloat16", "float32"),    # one simdgroup: X from device, 16 rows
    (3, 20, 77, 2, 4, 64, "float32", "float32"),       # threads beyond bN simdgroups unused
    (1, 9, 300, 1, 1, 256, "float16", "float32"),      # one row of X, one weight row
    (2, 3, 5, 2, 16, 256, "bfloat16", "bfloat16"),     # K shorter than one lane run
])
def test_gemv_lanes_form_against_the_oracle(run_family, M, N, K, bM, bN, threads, dtype,
                                            out_dtype):
    params = {"M": M, "N": N, "K": K, "bM": bM, "bN": bN, "bK": 64, "threads": threads,
              "dtype": dtype, "out_dtype": out_dtype, "form": "lanes"}
    kernel, _, _ = run_family("gemv", params)
    assert "simd_sum(" in kernel.msl and "simdgroup_" not in kernel.msl


@pytest.mark.parametrize("M, bM, bN, threads, staged", [
    (9, 8, 16, 512, True),       # 16 simdgroups re-reading 8 rows: staging is cheaper
    (9, 8, 16, 128, False),      # 4 simdgroups (MLX's 128 threads): reading X is
    (3, 1, 16, 512, False),      # one row of X: 256 bytes a step, no barrier worth it
])
def test_gemv_lanes_form_stages_x_where_the_cost_says_so(run_family, M, bM, bN, threads,
                                                        staged):
    params = {"M": M, "N": 40, "K": 301, "bM": bM, "bN": bN, "bK": 64, "threads": threads,
              "dtype": "float16", "out_dtype": "float16", "form": "lanes"}
    assert gemv.stages_vector(bM, bN, threads, "float16") is staged
    kernel, _, _ = run_family("gemv", params)
    assert ("(threadgroup half4*)(xs" in kernel.msl) is staged
    assert (kernel.msl.count("threadgroup_barrier") == 2) is staged    # else none
    stats = kernel.last_run.stats[0]
    assert (stats["threadgroup_bytes_read"] > 0) is staged
    # forced the other way, the same result (run_family compares with the oracle)
    other, _, _ = run_family("gemv", {**params, "stage_x": not staged})
    assert ("(threadgroup half4*)(xs" in other.msl) is not staged


@pytest.mark.parametrize("case", [c for c in CASES if c.family == "gemv"], ids=lambda c: c.name)
def test_gemv_bench_cases_keep_their_state_in_registers(case):
    """The decode bench GEMVs: every thread array fits the register budget the cost model
    charges spills beyond (the reduce form holds 2 KB per thread at this shape), the weight
    rows and X's lanes come in 4-element vector loads, the lanes combine by simd_sum."""
    msl = _msl("gemv", case.params)
    assert case.params["form"] == "lanes"
    assert local_array_bytes(msl) <= METAL.fragment_register_budget_bytes, msl
    reduce = _msl("gemv", {**case.params, "form": "reduce", "threads": 32})
    assert local_array_bytes(reduce) > METAL.fragment_register_budget_bytes
    assert "(const device half4*)(W" in msl and "(const device half4*)(X" in msl
    assert "(threadgroup half4*)(xs" in msl                  # each lane's X from the stage
    assert "simd_sum(" in msl and "simdgroup_" not in msl
    # per thread: one X lane, one weight lane, bM partials (and the reduction's copies)
    assert re.search(r"^\s+float acc\[8\];$", msl, re.M), msl


BARRIERED = [
    ("gemv", {**GEMV, "bK": 256, "threads": 128}),           # a row spans simdgroups
    ("gemv", {**LANES, "threads": 256, "stage_x": True}),   # X staged for 8 simdgroups
    # block scales staged in threadgroup memory (the gemv path):
    ("qmm_fp8", {"M": 3, "N": 20, "K": 200, "scale": "block", "G": 64, "bM": 2, "bN": 4,
                 "bK": 64, "threads": 32, "dtype": "float16", "out_dtype": "float32"}),
    ("qmm_fp8", {"M": 16, "N": 24, "K": 72, "scale": "block", "G": 32, "path": "gemm",
                 "bM": 16, "bN": 16, "bK": 32, "threads": 64, "dtype": "bfloat16",
                 "out_dtype": "float32"}),
    ("qmm_fp4", {"E": 2, "T": 3, "N": 20, "K": 64, "bM": 4, "bN": 8, "threads": 64,
                 "dtype": "float16", "out_dtype": "float16", "x": "shared"}),
]


@pytest.mark.parametrize("name, params", BARRIERED,
                         ids=["gemv", "gemv-lanes", "qmm_fp8-staged-scales", "qmm_fp8-gemm",
                              "qmm_fp4"])
def test_every_barrier_is_necessary(name, params):
    assert run_case(name, params, seed=0).status == Status.PASS
    report = barriers.check_case(name, params)
    assert report.barriers and report.ok, report.summary()


@pytest.mark.parametrize("name, params", [
    ("qmm_fp8", {"M": 1, "N": 8, "K": 64, "scale": "row", "bM": 1, "bN": 4, "bK": 32,
                 "threads": 32, "dtype": "float16", "out_dtype": "float32"}),
    ("qmm_fp4", {"E": 1, "T": 1, "N": 4, "K": 32, "bM": 1, "bN": 4, "threads": 32,
                 "dtype": "float16", "out_dtype": "float32", "x": "fragment"}),
], ids=["fp8", "fp4"])
def test_weights_are_decoded_in_the_kernel_from_bytes(name, params):
    msl = _msl(name, params)
    assert "const device uchar* W" in msl and "as_type<float>" in msl
    assert run_case(name, params, seed=3).status == Status.PASS


def test_staged_fp4_loads_four_weight_bytes_per_lane():
    msl = _msl("qmm_fp4", {"E": 2, "T": 3, "N": 20, "K": 64, "bM": 4, "bN": 8, "threads": 32,
                           "dtype": "float16", "out_dtype": "float16", "x": "shared"})
    assert "(const device uchar4*)(W" in msl


@pytest.mark.parametrize("stage_scales, staged", [(None, True), (True, True), (False, False)])
def test_fp8_block_scales_staged_or_loaded_per_lane(run_family, stage_scales, staged):
    """`stage_scales` picks where the gemv path's block scales come from: staged once in
    threadgroup memory behind one barrier (the default while they fit in 16 KiB), or loaded
    per thread and step from device memory, as MLX's qmv does (the bench's decode case);
    both pass the oracle, ragged N and K included."""
    params = {"M": 3, "N": 37, "K": 290, "scale": "block", "G": 128, "bM": 2, "bN": 8,
              "bK": 64, "threads": 64, "dtype": "bfloat16", "out_dtype": "float32",
              "stage_scales": stage_scales}
    kernel, _, _ = run_family("qmm_fp8", params)
    assert ("threadgroup_barrier" in kernel.msl) is staged
    stats = kernel.last_run.stats[0]
    assert (stats["threadgroup_bytes_read"] > 0) is staged
    assert (stats["barriers"] > 0) is staged


def test_fp8_block_scales_staged_past_16_kib_are_refused():
    params = {"M": 1, "N": 64, "K": 65536, "scale": "block", "G": 128, "bM": 1, "bN": 16,
              "bK": 128, "threads": 32, "dtype": "bfloat16", "out_dtype": "bfloat16",
              "stage_scales": True}          # 16 rows x 512 blocks x 4 bytes = 32 KiB
    with pytest.raises(ValueError, match=r"qmm_fp8: stage_scales needs"):
        families.get("qmm_fp8").build(params)
    assert "threadgroup_barrier" not in _msl("qmm_fp8", {**params, "stage_scales": None})


def test_fp8_block_scales_straddling_a_k_step_are_refused():
    """The kernel applies one block scale a k step: G=128 with bK=256 would take one scale
    for two blocks and compute a wrong result (it did: a mismatch, not an error)."""
    params = {"M": 1, "N": 64, "K": 512, "scale": "block", "G": 128, "bM": 1, "bN": 8,
              "bK": 256, "threads": 64, "dtype": "bfloat16", "out_dtype": "bfloat16"}
    with pytest.raises(ValueError, match=r"qmm_fp8: block scales of edge G=128 need G to be "
                                         r"a multiple of the k step bK=256"):
        families.get("qmm_fp8").build(params)


@pytest.mark.parametrize("params", [
    {"tokens": 2, "HK": 2, "groups": 2, "DK": 128, "DV": 40, "dtype": "bfloat16", "bV": 16,
     "threads": 128},
    {"tokens": 3, "HK": 1, "groups": 1, "DK": 37, "DV": 21, "dtype": "float16", "bV": 8,
     "threads": 64},
    {"tokens": 1, "HK": 1, "groups": 2, "DK": 64, "DV": 64, "dtype": "float32", "bV": 8,
     "threads": 256},
], ids=["qwen3-next-key-dim", "odd-key-dim", "f32-8-simdgroups"])
def test_gdn_k_and_q_per_lane_need_no_threadgroup_memory(run_family, params):
    """gdn_decode's kq="per_lane" (state="rows"): each simdgroup loads and normalizes the
    k and q elements of its lanes, each lane its rows' v and the gates, as MLX's
    gated_delta does: the oracle and every emulator check pass with no threadgroup bytes
    and no barrier, ragged DV included."""
    params = {**params, "state": "rows", "kq": "per_lane"}
    assert run_case("gdn_decode", params, seed=3).status == Status.PASS
    kernel, _, _ = run_family("gdn_decode", params)
    stats = kernel.last_run.stats[0]
    assert stats["threadgroup_bytes_read"] == 0 and stats["barriers"] == 0
    assert "threadgroup_barrier" not in kernel.msl

"""The decode GEMV and the quantized matmul families (harness/gen/gemv.py, qmm_fp8.py,
qmm_fp4.py) beyond their oracle runs: the form of the code they compile to (no simdgroup
matrices in a GEMV, vector weight loads, decoding by bit operations) and the
barrier-necessity check on each variant that has barriers."""

import pytest

import core
from harness import barriers
from harness.diff import run_case
from harness.gen import family as families


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


BARRIERED = [
    ("gemv", {**GEMV, "bK": 256, "threads": 128}),           # a row spans simdgroups
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
                         ids=["gemv", "qmm_fp8-staged-scales", "qmm_fp8-gemm", "qmm_fp4"])
def test_every_barrier_is_necessary(name, params):
    assert run_case(name, params, seed=0).status == "pass"
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
    assert run_case(name, params, seed=3).status == "pass"


def test_staged_fp4_loads_four_weight_bytes_per_lane():
    msl = _msl("qmm_fp4", {"E": 2, "T": 3, "N": 20, "K": 64, "bM": 4, "bN": 8, "threads": 32,
                           "dtype": "float16", "out_dtype": "float16", "x": "shared"})
    assert "(const device uchar4*)(W" in msl

"""The harness families use the new constructs (so fuzzing covers them): the reduce
family's split-K atomic variant and the gemm family's shared accumulator and C in device
memory, each run through `harness.check.compare.run_case` (every emulator check, the family's
oracle)."""

import re

import pytest

import core
from harness.check.barriers import check_barriers
from harness.check.case import Status, run_case
from harness.gen.family import REGISTRY

REDUCE = {"M": 13, "N": 24, "keepdim": False, "dst": "fragment", "block": 4, "threads": 64,
          "combine": "atomic"}


@pytest.mark.parametrize("kind", ["sum", "max", "min", "abssum", "absmax"])
@pytest.mark.parametrize("dim, splits, clear, dtype", [
    (1, 3, True, "float32"), (-1, 4, False, "int32"), (0, 1, False, "float32")])
def test_reduce_family_split_k_atomics(kind, dim, splits, clear, dtype):
    p = {**REDUCE, "kind": kind, "dim": dim, "splits": splits, "clear": clear,
         "dtype": dtype, "out_dtype": dtype}
    res = run_case("reduce", p)
    assert res.status == Status.PASS, res.message
    assert "atomic_fetch_" in res.msl or "tl_atomic_" in res.msl


GEMM = {"M": 48, "N": 40, "K": 40, "bM": 32, "bN": 32, "bK": 16, "threads": 128,
        "dtype": "bfloat16", "out_dtype": "bfloat16", "trans_A": True, "trans_B": False,
        "num_stages": 1, "a_operand": "shared", "accum": "shared"}


@pytest.mark.parametrize("epilogue, init, pad", [
    ("none", "clear", 0), ("relu_scale", "clear_accum", 8), ("window", "clear", 4)])
def test_gemm_family_shared_accumulator(epilogue, init, pad):
    p = {**GEMM, "epilogue": epilogue, "init": init, "pad": pad, "window": [1, 9, 20, 7]}
    res = run_case("gemm", p)
    assert res.status == Status.PASS, res.message
    assert "simdgroup_store(C_local_mat" in res.msl


@pytest.mark.parametrize("dtype, out_dtype, trans_B, a_operand, M, N", [
    ("float16", "float32", False, "shared", 48, 40),      # ragged: edge tiles staged
    ("float16", "float32", True, "fragment", 64, 64),     # every tile straight to device
    ("bfloat16", "bfloat16", False, "shared", 40, 56),    # half C: through the float stage
    ("float32", "float32", True, "shared", 56, 24)])
def test_gemm_family_c_in_device_memory(dtype, out_dtype, trans_B, a_operand, M, N):
    p = {**GEMM, "M": M, "N": N, "dtype": dtype, "out_dtype": out_dtype, "trans_B": trans_B,
         "a_operand": a_operand, "accum": "global", "init": "clear_accum",
         "epilogue": "none", "pad": 0}
    res = run_case("gemm", p)
    assert res.status == Status.PASS, res.message
    # the family names C's tile C_local in every variant: here it is C's device tile
    assert "simdgroup_store(C_local_mat" in res.msl
    assert not re.search(r"threadgroup float\*? C_local\b", res.msl)  # no on-chip accumulator
    device_stores = [ln for ln in res.msl.splitlines()
                     if "simdgroup_store(" in ln and "&C_local[" in ln]
    assert bool(device_stores) == (out_dtype == "float32")  # never through a half pointer


@pytest.mark.parametrize("M, N, K, bM, bN, threads, dtype", [
    (3, 37, 200, 2, 4, 64, "float16"),       # reduce over 16 lanes: a butterfly
    (1, 9, 300, 1, 1, 128, "float32"),       # over 4 simdgroups: simd_sum + the stage
    (5, 20, 77, 4, 8, 256, "bfloat16")])     # 32 strided lanes: shuffles, then the stage
def test_gemv_family_thread_allreduce(M, N, K, bM, bN, threads, dtype):
    p = {"M": M, "N": N, "K": K, "bM": bM, "bN": bN, "bK": 64, "threads": threads,
         "dtype": dtype, "out_dtype": dtype, "form": "allreduce"}
    res = run_case("gemv", p)
    assert res.status == Status.PASS, res.message
    assert "allreduce_buf" in res.msl or "simd_shuffle_xor" in res.msl


def test_gemm_family_device_c_barriers_are_necessary():
    """Found by the fuzzer (seed 15): the family's M, N are multiples of 8, so no 8x8 tile
    straddles C's edge and loading C's tiles needs no stage and no barrier (ragged edges
    that do: suites/compat/test_gemm_global.py)."""
    p = {"M": 56, "N": 64, "K": 112, "bM": 32, "bN": 16, "bK": 16, "threads": 32,
         "dtype": "float32", "out_dtype": "float32", "trans_A": False, "trans_B": False,
         "num_stages": 0, "init": "clear_accum", "a_operand": "fragment", "epilogue": "none",
         "accum": "global", "pad": 0, "window": [0, 3, 1, 13], "swizzle": 3,
         "swizzle_order": "row"}
    built = REGISTRY["gemm"].build(p)
    kernel = core.compile(built.func, out_idx=built.out_idx)
    report = check_barriers(kernel, built.inputs(0))
    assert report.ok, report.summary()
    assert "C_local_stage" not in kernel.msl

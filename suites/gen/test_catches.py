"""The differential test must catch broken kernels: a wrong result is a "mismatch", a
missing barrier a "finding" (or a mismatch), a crashing pass an "internal_error", a kernel
the core rejects "rejected"; `run_case` returns a status for each and never raises.

Test-only families are registered into the registry for one test (monkeypatch), so other
suites never see them.
"""

from __future__ import annotations

import dataclasses

import pytest

import core.language as T
from harness.check.case import Status, run_case
from harness.gen import family as families
from harness.gen.family import Family

SMALL_COPY = {"M": 37, "N": 45, "dtype": "float16", "mode": "transpose", "bM": 16,
              "bN": 32, "threads": 128}

# One case per family whose kernel shares threadgroup memory between threads: without
# the thread_sync pass a race must be reported (or the numbers must be wrong).
NEEDS_BARRIERS = [
    ("copy", SMALL_COPY),
    ("copy", {"M": 40, "N": 24, "dtype": "int8", "mode": "parallel_transpose", "bM": 8,
              "bN": 16, "threads": 64}),
    ("conditional", {"M": 20, "N": 30, "dtype": "float32", "mode": "shared",
                     "threshold": "literal", "t": 0.0, "bM": 8, "bN": 16, "threads": 64}),
    ("multikernel", {"N": 100, "dtype": "int32", "kernels": 2, "read": "tile_reverse",
                     "shift": 0, "b1": 64, "b2": 64, "b3": 64, "t1": 64, "t2": 32,
                     "t3": 32}),
    ("reduce", {"M": 3, "N": 256, "dim": 1, "kind": "sum", "dtype": "float32",
                "out_dtype": "float32", "clear": True, "keepdim": False, "block": 1,
                "threads": 128}),
    # rows 1.. of the tile read weights that other threads staged (with bM = 1 every
    # thread would read back only what it wrote itself: no barrier needed)
    ("rmsnorm", {"M": 5, "N": 64, "dtype": "float32", "eps": 1e-6, "weight": "shared",
                 "bM": 2, "threads": 64}),
    ("gemm", {"M": 32, "N": 32, "K": 64, "bM": 32, "bN": 32, "bK": 16, "threads": 64,
              "dtype": "float16", "out_dtype": "float32", "trans_A": False,
              "trans_B": False, "num_stages": 2, "init": "clear"}),
]


def _register(monkeypatch, name, build, params=None, skip_reason=None):
    fam = Family(name, "test-only family", params or (lambda: None), build,
                 skip_reason=skip_reason)
    families.get("copy")  # load the real families first
    monkeypatch.setitem(families.REGISTRY, name, fam)
    return fam


@pytest.mark.parametrize("name,params", NEEDS_BARRIERS,
                         ids=[f"{n}-{i}" for i, (n, _) in enumerate(NEEDS_BARRIERS)])
def test_missing_barriers_are_caught(name, params):
    if families.get(name).skip_reason:
        pytest.skip(families.get(name).skip_reason)
    assert run_case(name, params).status == Status.PASS
    broken = run_case(name, params, disable=("thread_sync",))
    assert broken.status in (Status.FINDING, Status.MISMATCH), broken.message
    assert "threadgroup_barrier" not in broken.msl


def test_wrong_kernel_is_a_mismatch(monkeypatch):
    real = families.get("elementwise")

    def build(p):
        built = real.build(p)
        M, N, dtype = p["M"], p["N"], p["dtype"]

        @T.prim_func
        def off_by_one(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                       C: T.Tensor((M, N), dtype)):
            with T.Kernel(M, threads=32) as bx:
                for j in T.Parallel(N):
                    C[bx, j] = A[bx, j] + B[bx, N - 1 - j]   # reads B mirrored: wrong
        return dataclasses.replace(built, func=off_by_one)

    _register(monkeypatch, "wrong_add", build)
    params = {"M": 9, "N": 20, "dtype": "float32", "out_dtype": "float32", "op": "add",
              "bM": 4, "bN": 16, "threads": 32}
    result = run_case("wrong_add", params)
    assert result.status == Status.MISMATCH, result.message
    assert "outside the bound (add in float32 -> float32)" in result.message
    assert result.findings == []


def test_wrong_oracle_dtype_is_a_mismatch(monkeypatch):
    real = families.get("copy")

    def build(p):
        built = real.build(p)
        return dataclasses.replace(built, oracle=lambda args: [args[0].float()])

    _register(monkeypatch, "copy_wrong_dtype", build)
    result = run_case("copy_wrong_dtype", SMALL_COPY)
    assert result.status == Status.MISMATCH, result.message


def test_crashing_pass_is_an_internal_error():
    def boom(func):
        raise RuntimeError("a pass crashed")

    result = run_case("copy", SMALL_COPY, replace={"vectorize": boom})
    assert result.status == Status.INTERNAL_ERROR
    assert "a pass crashed" in result.message


def test_crashing_build_is_an_internal_error(monkeypatch):
    def build(p):
        return {}["missing"]

    _register(monkeypatch, "broken_build", build)
    result = run_case("broken_build", {})
    assert result.status == Status.INTERNAL_ERROR and "KeyError" in result.message


def test_rejected_kernel_is_rejected(monkeypatch):
    real = families.get("copy")
    _register(monkeypatch, "too_many_threads",
              lambda p: real.build({**p, "threads": 2048}))
    result = run_case("too_many_threads", SMALL_COPY)
    assert result.status == Status.REJECTED and "2048" in result.message


def test_skipped_family_is_skipped(monkeypatch):
    _register(monkeypatch, "not_yet", lambda p: None, skip_reason="T.magic is missing")
    result = run_case("not_yet", {})
    assert result.status == Status.SKIP and result.ok and result.message == "T.magic is missing"


@pytest.mark.parametrize("schedule", ["reverse", "random"])
@pytest.mark.parametrize("name,params", [NEEDS_BARRIERS[0], NEEDS_BARRIERS[4]],
                         ids=["copy", "reduce"])
def test_other_schedules_pass(name, params, schedule):
    if families.get(name).skip_reason:
        pytest.skip(families.get(name).skip_reason)
    result = run_case(name, params, schedule=schedule, seed=3)
    assert result.status == Status.PASS, result.message


@pytest.mark.parametrize("dtype, factor", [("float16", 1.02), ("bfloat16", 1.05),
                                           ("float32", 1.001)])
def test_a_softmax_off_by_a_small_scaling_is_a_mismatch(monkeypatch, dtype, factor):
    """A real kernel whose every output is scaled by 1 + d (d: what the power check
    demands of the dtype) fails the family's own bounds through run_case; scaled by
    1 + 1e-5 (inside float32's accumulation and function errors) it passes. Rows of 4096 at
    values ~1/4096, where the old sqrt(n)-wide atol let all of it through."""
    M, N = 2, 4096

    def build(p):
        built = families.get("softmax").build(
            {"M": M, "N": N, "bM": 1, "threads": 256, "dtype": dtype, "scale": 1.0})

        @T.prim_func
        def scaled_softmax(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
            with T.Kernel(M, threads=256) as bx:
                x = T.alloc_fragment((1, N), "float32")
                row_max = T.alloc_fragment((1,), "float32")
                row_sum = T.alloc_fragment((1,), "float32")
                T.copy(X[bx:bx + 1, 0:N], x)
                T.reduce_max(x, row_max, dim=1)
                for i, j in T.Parallel(1, N):
                    x[i, j] = T.exp(x[i, j] - row_max[i])
                T.reduce_sum(x, row_sum, dim=1)
                for i, j in T.Parallel(1, N):
                    x[i, j] = x[i, j] / row_sum[i] * p["factor"]
                T.copy(x, Y[bx:bx + 1, 0:N])
        return dataclasses.replace(built, func=scaled_softmax)

    _register(monkeypatch, "scaled_softmax", build)
    wrong = run_case("scaled_softmax", {"factor": factor})
    assert wrong.status == Status.MISMATCH, wrong.message
    assert "softmax over N=4096 in float32" in wrong.message
    close = run_case("scaled_softmax", {"factor": 1 + 1e-5})
    assert close.status == Status.PASS, close.message

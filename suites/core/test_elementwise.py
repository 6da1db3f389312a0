"""Element-wise kernels end to end on the emulator: ragged edges, dtypes, scalars,
symbolic sizes."""

import pytest
import torch

import core
import core.language as T
from harness.check.compare import assert_close
from harness.gen import elementwise as elementwise_family
from harness.gen.inputs import random_tensor

DTYPES = list(elementwise_family.DTYPES)   # the element-wise family's dtypes


def _rand(shape, dtype, seed):
    return random_tensor(shape, dtype, seed, low=-50, high=100 if dtype == "uint8" else 50)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(64, 64), (37, 50)])
def test_add_dtypes_ragged(dtype, shape, run_family):
    # the family's guarded T.Parallel over 32 x 32 tiles (harness/gen/elementwise.py)
    M, N = shape
    run_family("elementwise", {"M": M, "N": N, "dtype": dtype, "out_dtype": dtype, "op": "add",
                               "bM": 32, "bN": 32, "threads": 128})


def test_bool_and_comparison(run):
    @T.prim_func
    def gt(A: T.Tensor((100,), "float32"), B: T.Tensor((100,), "float32"),
           C: T.Tensor((100,), "bool")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(100):
                C[i] = A[i] > B[i]
    a, b = random_tensor((100,), "float32", 4), random_tensor((100,), "float32", 5)
    assert_close(run(core.compile(gt, out_idx=[-1]), a, b), a > b)


def test_fragment_through_copy_ragged(run):
    M, N, bM, bN = 70, 45, 32, 16

    @T.prim_func
    def scale(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            F = T.alloc_fragment((bM, bN), "float32")
            T.copy(A[by * bM, bx * bN], F)
            for i, j in T.Parallel(bM, bN):
                F[i, j] = F[i, j] * 2.0 + T.exp(F[i, j] * 0.1)
            T.copy(F, B[by * bM, bx * bN])
    a = random_tensor((M, N), "float16", 6)
    ref = a.float() * 2 + torch.exp(a.float() * 0.1)
    assert_close(run(core.compile(scale, out_idx=[1]), a), ref, "float32")


@pytest.mark.parametrize("order", ["first", "middle", "last"])
def test_scalars_positions(order, run):
    N = 256

    if order == "first":
        @T.prim_func
        def k(n: T.int32, m: T.int32, A: T.Tensor((N,), "float32"), alpha: T.float32,
              B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    if bx * 128 + i < n:
                        B[bx * 128 + i] = A[bx * 128 + i] * alpha + T.cast(m, "float32")
        args = lambda a: (200, 7, a, 1.5)  # noqa: E731
    elif order == "middle":
        @T.prim_func
        def k(A: T.Tensor((N,), "float32"), n: T.int32, m: T.int32, alpha: T.float32,
              B: T.Tensor((N,), "float32")):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    if bx * 128 + i < n:
                        B[bx * 128 + i] = A[bx * 128 + i] * alpha + T.cast(m, "float32")
        args = lambda a: (a, 200, 7, 1.5)  # noqa: E731
    else:
        @T.prim_func
        def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"), n: T.int32,
              m: T.int32, alpha: T.float32):
            with T.Kernel(T.ceildiv(N, 128), threads=128) as bx:
                for i in T.Parallel(128):
                    if bx * 128 + i < n:
                        B[bx * 128 + i] = A[bx * 128 + i] * alpha + T.cast(m, "float32")
        args = lambda a: (a, 200, 7, 1.5)  # noqa: E731
    kernel = core.compile(k, out_idx=[1] if order == "last" else [4])
    a = random_tensor((N,), "float32", 7)
    out = run(kernel, *args(a))
    ref = torch.zeros(N)
    ref[:200] = a[:200] * 1.5 + 7
    assert_close(out[:200], ref[:200])


def test_scalar_dtypes_int64_half_bool(run):
    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), big: T.int64, h: T.float16, flag: T.bool,
          B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = T.if_then_else(flag, A[i] * T.cast(h, "float32"),
                                      T.cast(big % 1000, "float32"))
    kernel = core.compile(k, out_idx=[-1])
    a = random_tensor((64,), "float32", 8)
    assert_close(run(kernel, a, 2**40 + 5, 0.5, True), a * 0.5)
    assert_close(run(kernel, a, 2**40 + 5, 0.5, False), torch.full((64,), float((2**40 + 5) % 1000)))


def test_symbolic_sizes(run):
    M, N = T.dynamic("M"), T.dynamic("N")

    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32"), alpha: T.float32):
        with T.Kernel(T.ceildiv(N, 32), T.ceildiv(M, 8), threads=(32, 8)) as (bx, by):
            for i, j in T.Parallel(8, 32):
                if by * 8 + i < M and bx * 32 + j < N:
                    B[by * 8 + i, bx * 32 + j] = A[by * 8 + i, bx * 32 + j] * alpha
    kernel = core.compile(k, out_idx=[1])
    for shape in [(5, 7), (40, 33), (16, 64)]:
        a = random_tensor(shape, "float32", 9)
        assert_close(run(kernel, a, 3.0), a * 3)


def test_math_and_limits(run):
    @T.prim_func
    def k(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32"),
          C: T.Tensor((128,), "float16")):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                B[i] = T.max(T.sqrt(T.abs(A[i])) + T.tanh(A[i]), T.log(T.abs(A[i]) + 1.0)) + \
                    T.rsqrt(T.abs(A[i]) + 1.0) + T.exp2(T.min(A[i], 2.0))
                C[i] = T.cast(T.max(A[i], -T.infinity("float32")), "float16") + \
                    T.max_value("float16") * T.cast(0, "float16")
    a = random_tensor((128,), "float32", 10)
    ref = torch.maximum(a.abs().sqrt() + a.tanh(), torch.log(a.abs() + 1))
    ref = ref + torch.rsqrt(a.abs() + 1) + torch.exp2(torch.clamp(a, max=2.0))
    b, c = run(core.compile(k, out_idx=[1, 2]), a)
    assert_close(b, ref, "float32", reduction_length=4)
    assert_close(c, a.half(), "float16")


def test_floor_division_and_modulo_of_negative_operands(run):
    # TIR's floordiv/floormod round toward minus infinity (Python semantics), also when the
    # operands' signs are unknown, where MSL's / and % would truncate.
    @T.prim_func
    def floors(X: T.Tensor((64,), "int32"), Q: T.Tensor((64,), "int32"),
               R: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                Q[i] = T.floordiv(X[i], -3)
                R[i] = T.floormod(X[i], -3)
    ints = torch.arange(-32, 32, dtype=torch.int32)
    kernel = core.compile(floors, out_idx=[1, 2])
    assert "tl_floordiv" in kernel.msl and "tl_floormod" in kernel.msl
    q, r = run(kernel, ints)
    assert torch.equal(q, torch.div(ints, -3, rounding_mode="floor"))
    assert torch.equal(r, torch.remainder(ints, -3))

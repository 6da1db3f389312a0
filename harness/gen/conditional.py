"""Family `conditional`: data-dependent stores and selects (`if A[i, j] > t: C[i, j] = ...`,
T.if_then_else, bool masks) over a 2-D grid of tiles, with ragged edges.

Params:
    M, N        extents of A, B, C (any size >= 1; M = N = 4096 builds too)
    dtype       float32, float16, bfloat16, int32, int8, uint8, int64
    mode        "if":       C = B; then `if A > t: C = A * 2` (a nested store, same thread)
                "if_else":  `if A > t: C = A + B` / `else: C = B - A`
                "select":   C = T.if_then_else(A > t, A, B)
                "mask":     `if Mask[i, j]: C = A` / `else: C = B`, Mask a bool tensor
                "shared":   T.copy(B tile -> shared S); a T.Parallel stores A into S
                            where A > t at the row-mirrored position (another thread's
                            element); T.copy(S -> C tile): barriers both ways
                "relu":     F = T.copy(A tile) fragment; F = T.if_then_else(F > t, F, 0);
                            T.copy(F -> C tile)
    threshold   "literal": t is a constant of the kernel (a Python number in the source),
                "scalar":  t is a runtime scalar argument (T.float32 / T.int32) after the
                           tensors; the literal kernels keep that argument, unused
    t           the threshold value (exactly representable in every dtype)
    bM, bN      tile; threads: threads per threadgroup (int or [x, y(, z)])

Signature: (A, B[, Mask], C, t) with C the output.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import conditional as oracle

DTYPES = S.NUMERIC + ("int64",)
MODES = ("if", "if_else", "select", "mask", "shared", "relu")
FLOAT_T = (0.0, 0.5, -0.25, 1.0)
INT_T = (0, 3, -7, 20)


def build(p: dict) -> Built:
    M, N, bM, bN, threads = p["M"], p["N"], p["bM"], p["bN"], p["threads"]
    dtype, mode, t_value = p["dtype"], p["mode"], p["t"]
    floats = S.is_float(dtype)
    t_dtype = "float32" if floats else "int32"
    t_ann = getattr(T, t_dtype)           # scalar annotations are T.float32 objects
    scalar = p["threshold"] == "scalar"

    def gt(a, t):
        """a > threshold, as written in the kernel: the literal in a's dtype, or the
        runtime scalar against a converted to the scalar's dtype."""
        return T.cast(a, t_dtype) > t if scalar else a > t_value

    def twice(a):
        return a * T.cast(2, dtype)

    if mode == "mask":
        @T.prim_func
        def conditional_mask(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                             Mask: T.Tensor((M, N), "bool"), C: T.Tensor((M, N), dtype),
                             t: t_ann):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                for i, j in T.Parallel(bM, bN):
                    if by * bM + i < M and bx * bN + j < N:
                        if Mask[by * bM + i, bx * bN + j]:
                            C[by * bM + i, bx * bN + j] = A[by * bM + i, bx * bN + j]
                        else:
                            C[by * bM + i, bx * bN + j] = B[by * bM + i, bx * bN + j]
        func, out = conditional_mask, 3
    else:
        func, out = _kernel(M, N, bM, bN, threads, dtype, mode, t_ann, gt, twice), 2

    def inputs(seed):
        args = [random_tensor((M, N), dtype, seed), random_tensor((M, N), dtype, seed + 1)]
        if mode == "mask":
            args.append(random_tensor((M, N), "bool", seed + 2))
        return args + [t_value]

    def expected(args):
        mask = args[2] if mode == "mask" else None
        return [oracle.conditional_expected(mode, args[0], args[1], t_value, mask)]

    return Built(func, [out], inputs, expected, flops=M * N)


def _kernel(M, N, bM, bN, threads, dtype, mode, t_ann, gt, twice):
    if mode == "if":
        @T.prim_func
        def conditional_if(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                           C: T.Tensor((M, N), dtype), t: t_ann):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                for i, j in T.Parallel(bM, bN):
                    if by * bM + i < M and bx * bN + j < N:
                        C[by * bM + i, bx * bN + j] = B[by * bM + i, bx * bN + j]
                        if gt(A[by * bM + i, bx * bN + j], t):
                            C[by * bM + i, bx * bN + j] = twice(A[by * bM + i, bx * bN + j])
        return conditional_if
    if mode == "if_else":
        @T.prim_func
        def conditional_if_else(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                                C: T.Tensor((M, N), dtype), t: t_ann):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                for i, j in T.Parallel(bM, bN):
                    if by * bM + i < M and bx * bN + j < N:
                        if gt(A[by * bM + i, bx * bN + j], t):
                            C[by * bM + i, bx * bN + j] = A[by * bM + i, bx * bN + j] + \
                                B[by * bM + i, bx * bN + j]
                        else:
                            C[by * bM + i, bx * bN + j] = B[by * bM + i, bx * bN + j] - \
                                A[by * bM + i, bx * bN + j]
        return conditional_if_else
    if mode == "select":
        @T.prim_func
        def conditional_select(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                               C: T.Tensor((M, N), dtype), t: t_ann):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                for i, j in T.Parallel(bM, bN):
                    if by * bM + i < M and bx * bN + j < N:
                        C[by * bM + i, bx * bN + j] = T.if_then_else(
                            gt(A[by * bM + i, bx * bN + j], t), A[by * bM + i, bx * bN + j],
                            B[by * bM + i, bx * bN + j])
        return conditional_select
    if mode == "shared":
        @T.prim_func
        def conditional_shared(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                               C: T.Tensor((M, N), dtype), t: t_ann):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                S_ = T.alloc_shared((bM, bN), dtype)
                T.copy(B[by * bM, bx * bN], S_)
                for i, j in T.Parallel(bM, bN):
                    if by * bM + (bM - 1 - i) < M and bx * bN + j < N:
                        if gt(A[by * bM + (bM - 1 - i), bx * bN + j], t):
                            S_[bM - 1 - i, j] = A[by * bM + (bM - 1 - i), bx * bN + j]
                T.copy(S_, C[by * bM, bx * bN])
        return conditional_shared

    @T.prim_func
    def conditional_relu(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype),
                         C: T.Tensor((M, N), dtype), t: t_ann):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            F = T.alloc_fragment((bM, bN), dtype)
            T.copy(A[by * bM, bx * bN], F)
            for i, j in T.Parallel(bM, bN):
                F[i, j] = T.if_then_else(gt(F[i, j], t), F[i, j], T.cast(0, dtype))
            T.copy(F, C[by * bM, bx * bN])
    return conditional_relu


@st.composite
def params(draw):
    dtype = draw(S.dtype(DTYPES))
    if S.is_float(dtype):
        t = draw(S.sampled_from(FLOAT_T))
    else:
        t = draw(S.sampled_from(INT_T if dtype != "uint8" else (0, 3, 20)))
    return {
        "M": draw(S.extent(1, 96)), "N": draw(S.extent(1, 96)),
        "dtype": dtype, "mode": draw(S.sampled_from(MODES)),
        "threshold": draw(S.sampled_from(("literal", "scalar"))), "t": t,
        "bM": draw(S.tile((1, 4, 8, 16, 32))), "bN": draw(S.tile((4, 8, 16, 32, 64))),
        "threads": draw(S.threads(S.THREADS_ANY)),
    }


FAMILY = register(Family("conditional", __doc__.splitlines()[0], params, build))

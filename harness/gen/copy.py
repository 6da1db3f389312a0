"""Family `copy`: tiles moved global -> on-chip -> global, straight or transposed, with
ragged edges.

Params:
    M, N        extents of the input A (M x N), any size >= 1 (M = N = 4096 builds too)
    dtype       float32, float16, bfloat16, int32, int8, uint8, int64, bool
    mode        "shared":     T.copy(A tile -> shared), T.copy(shared -> B)
                "fragment":   T.copy(A tile -> fragment), T.copy(fragment -> B)
                "staged":     A -> shared -> fragment -> shared -> B, all by T.copy
                "transpose":  T.copy(A tile -> shared S), T.Parallel F[i, j] = S[j, i]
                              into a fragment, T.copy(F -> B tile), B = A^T (N x M)
                "parallel_transpose": the same written with T.Parallel only: a guarded
                              load S[i, j] = A[...] (0 outside), a guarded store
                              B[...] = S[j, i]
                "batched":    3-D: A is batch x M x N, tiles bB x bM x bN go
                              A -> shared -> fragment -> B by T.copy (3-D grid)
    batch, bB   (mode "batched" only) leading extent and its tile (1 or 2)
    bM, bN      tile of A (on-chip tiles are bM x bN, or bN x bM transposed), unit
                extents included
    threads     threads per threadgroup (int or [x, y(, z)])

Copies move bits: results are compared exactly (op class "exact"). Every mode but
"fragment" shares a tile between threads, so it needs a barrier (thread_sync).
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import bounds
from oracles import copy as oracle

DTYPES = S.NUMERIC + ("int64", "bool")
MODES = ("shared", "fragment", "staged", "transpose", "parallel_transpose", "batched")
TRANSPOSED = ("transpose", "parallel_transpose")


def _batched(batch, M, N, bB, bM, bN, threads, dtype):
    @T.prim_func
    def copy_batched(A: T.Tensor((batch, M, N), dtype), B: T.Tensor((batch, M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), T.ceildiv(batch, bB),
                      threads=threads) as (bx, by, bz):
            S_ = T.alloc_shared((bB, bM, bN), dtype)
            F = T.alloc_fragment((bB, bM, bN), dtype)
            T.copy(A[bz * bB, by * bM, bx * bN], S_)
            T.copy(S_, F)
            T.copy(F, B[bz * bB, by * bM, bx * bN])
    return copy_batched


def _kernel(M, N, bM, bN, threads, dtype, mode):
    if mode == "shared":
        @T.prim_func
        def copy_shared(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                S_ = T.alloc_shared((bM, bN), dtype)
                T.copy(A[by * bM, bx * bN], S_)
                T.copy(S_, B[by * bM, bx * bN])
        return copy_shared
    if mode == "fragment":
        @T.prim_func
        def copy_fragment(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                F = T.alloc_fragment((bM, bN), dtype)
                T.copy(A[by * bM, bx * bN], F)
                T.copy(F, B[by * bM, bx * bN])
        return copy_fragment
    if mode == "staged":
        @T.prim_func
        def copy_staged(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                S_ = T.alloc_shared((bM, bN), dtype)
                F = T.alloc_fragment((bM, bN), dtype)
                T.copy(A[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN], S_)
                T.copy(S_, F)
                T.copy(F, S_)
                T.copy(S_, B[by * bM, bx * bN])
        return copy_staged
    if mode == "transpose":
        @T.prim_func
        def copy_transpose(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                S_ = T.alloc_shared((bM, bN), dtype)
                F = T.alloc_fragment((bN, bM), dtype)
                T.copy(A[by * bM, bx * bN], S_)
                for i, j in T.Parallel(bN, bM):
                    F[i, j] = S_[j, i]
                T.copy(F, B[bx * bN, by * bM])
        return copy_transpose

    @T.prim_func
    def copy_parallel_transpose(A: T.Tensor((M, N), dtype), B: T.Tensor((N, M), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            S_ = T.alloc_shared((bM, bN), dtype)
            for i, j in T.Parallel(bM, bN):
                S_[i, j] = T.if_then_else(by * bM + i < M and bx * bN + j < N,
                                          A[by * bM + i, bx * bN + j], T.cast(0, dtype))
            for i, j in T.Parallel(bN, bM):
                if bx * bN + i < N and by * bM + j < M:
                    B[bx * bN + i, by * bM + j] = S_[j, i]
    return copy_parallel_transpose


def build(p: dict) -> Built:
    M, N, dtype, mode = p["M"], p["N"], p["dtype"], p["mode"]
    shape = (M, N)
    if mode == "batched":
        shape = (p["batch"], M, N)
        func = _batched(p["batch"], M, N, p["bB"], p["bM"], p["bN"], p["threads"], dtype)
    else:
        func = _kernel(M, N, p["bM"], p["bN"], p["threads"], dtype, mode)

    def inputs(seed):
        return [random_tensor(shape, dtype, seed, low=-128, high=128)]

    def expected(args):
        moved = oracle.transpose(args[0]) if mode in TRANSPOSED else oracle.copy(args[0])
        return [bounds.exact(moved, dtype, f"data movement ({mode})")]

    return Built(func, [1], inputs, expected)


@st.composite
def params(draw):
    mode = draw(S.sampled_from(MODES))
    p = {
        "M": draw(S.extent(1, 96)), "N": draw(S.extent(1, 96)),
        "dtype": draw(S.dtype(DTYPES)), "mode": mode,
        "bM": draw(S.tile((1, 4, 8, 16, 32, 64))),
        "bN": draw(S.tile((1, 4, 8, 16, 32, 64))),
        "threads": draw(S.threads(S.THREADS_ANY)),
    }
    if mode == "batched":
        p["batch"], p["bB"] = draw(S.extent(1, 5)), draw(S.tile((1, 2)))
        p["M"], p["N"] = min(p["M"], 40), min(p["N"], 40)
    return p


FAMILY = register(Family("copy", __doc__.splitlines()[0], params, build))

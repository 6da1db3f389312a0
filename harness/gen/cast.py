"""Family `cast`: C = A converted to another dtype, over a 2-D grid of tiles, ragged edges.

Params:
    M, N        tensor extents, any size >= 1 (M = N = 4096 builds too)
    src, dst    dtypes among float32, float16, bfloat16, int32, int64, int8, uint8, bool
                (src != dst); inputs are
                drawn where the conversion is defined
                (oracles/cast.py `input_range`: floats that fit an integer target,
                integers wide enough to round in floats and to wrap in narrower ints)
    via         "cast":     C[i, j] = T.cast(A[i, j], dst) in a guarded T.Parallel
                "shared":   T.copy(A tile -> shared tile of dst) converts, then
                            T.copy(shared -> C) (masked edge tiles, one barrier)
                "fragment": T.copy(A tile -> fragment of dst) converts, T.copy(-> C)
    bM, bN      tile; threads: threads per threadgroup (int or [x, y(, z)])

A conversion rounds at most once, so results are compared exactly (op class "exact").
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor, uniform_tensor
from oracles import bounds
from oracles import cast as oracle

DTYPES = ("float32", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool")
VIA = ("cast", "shared", "fragment")


def _source(shape, src, dst, seed):
    if src == "bool":
        return random_tensor(shape, "bool", seed)
    lo, hi = oracle.input_range(src, dst)
    if S.is_float(src):
        return uniform_tensor(shape, src, seed, lo, hi)
    return random_tensor(shape, src, seed, low=int(lo), high=int(hi))


def build(p: dict) -> Built:
    M, N, bM, bN, threads = p["M"], p["N"], p["bM"], p["bN"], p["threads"]
    src, dst, via = p["src"], p["dst"], p["via"]

    if via == "cast":
        @T.prim_func
        def cast(A: T.Tensor((M, N), src), C: T.Tensor((M, N), dst)):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                for i, j in T.Parallel(bM, bN):
                    if by * bM + i < M and bx * bN + j < N:
                        C[by * bM + i, bx * bN + j] = T.cast(A[by * bM + i, bx * bN + j], dst)
        func = cast
    elif via == "shared":
        @T.prim_func
        def cast_copy_shared(A: T.Tensor((M, N), src), C: T.Tensor((M, N), dst)):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                S_ = T.alloc_shared((bM, bN), dst)
                T.copy(A[by * bM, bx * bN], S_)
                T.copy(S_, C[by * bM, bx * bN])
        func = cast_copy_shared
    else:
        @T.prim_func
        def cast_copy_fragment(A: T.Tensor((M, N), src), C: T.Tensor((M, N), dst)):
            with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
                F = T.alloc_fragment((bM, bN), dst)
                T.copy(A[by * bM, bx * bN], F)
                T.copy(F, C[by * bM, bx * bN])
        func = cast_copy_fragment

    def inputs(seed):
        return [_source((M, N), src, dst, seed)]

    def expected(args):
        return [bounds.exact(oracle.cast(args[0], dst), dst, f"one conversion {src} -> {dst}")]

    return Built(func, [1], inputs, expected)


@st.composite
def params(draw):
    src = draw(S.dtype(DTYPES))
    dst = draw(S.dtype(tuple(d for d in DTYPES if d != src)))
    return {
        "M": draw(S.extent(1, 80)), "N": draw(S.extent(1, 80)),
        "src": src, "dst": dst, "via": draw(S.sampled_from(VIA)),
        "bM": draw(S.tile((1, 4, 8, 16, 32))), "bN": draw(S.tile((4, 8, 16, 32, 64))),
        "threads": draw(S.threads(S.THREADS_ANY)),
    }


FAMILY = register(Family("cast", __doc__.splitlines()[0], params, build))

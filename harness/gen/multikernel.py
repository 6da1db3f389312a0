"""Family `multikernel`: a program of 2 or 3 T.Kernel launches in order, each reading what
the previous one wrote to global memory, with its own grid and threadgroup size.

Params:
    N           length of the 1-D tensors (any size >= 1; 4096 * 4096 builds too)
    dtype       float32, float16, bfloat16, int32, int8, uint8
    kernels     2 or 3 launches:
                  1: Tmp[g] = A[g] * 2 + 1                       (tile b1, threads t1)
                  2: Out[g] = Tmp[src(g)] + A[g]                  (tile b2, threads t2)
                  3: Out2[g] = max(Out[N - 1 - g], Tmp[g])        (tile b3, threads t3)
    read        how launch 2 reads Tmp: "same" (g), "reverse" (N - 1 - g), "rotate"
                ((g + shift) % N): a guarded T.Parallel; "tile_reverse": T.copy of a
                Tmp tile into shared memory, read back mirrored within the tile
    shift       rotation of "rotate" (0 <= shift < N)
    b1, b2, b3  tiles (elements per threadgroup); t1, t2, t3 threads per threadgroup
                (int or [x, y(, z)])

Signature: (A, Tmp, Out[, Out2]); every tensor but A is an output.
"""

from __future__ import annotations

from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import multikernel as oracle

DTYPES = S.NUMERIC
READS = ("same", "reverse", "rotate", "tile_reverse")
TILES = (32, 64, 128, 256, 16, 100)


def _program(N, dtype, read, shift, kernels, b1, b2, b3, t1, t2, t3):
    """One of four programs: launch 2 reads Tmp in global memory or through shared
    memory ("tile_reverse"); a third launch or not. Only the chosen one is parsed."""
    shared = read == "tile_reverse"

    def src(g):
        if read == "reverse":
            return N - 1 - g
        if read == "rotate":
            return (g + shift) % N
        return g

    def mul_add(a):
        return a * T.cast(2, dtype) + T.cast(1, dtype)

    if kernels == 2 and not shared:
        @T.prim_func
        def two_kernels(A: T.Tensor((N,), dtype), Tmp: T.Tensor((N,), dtype),
                        Out: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, b1), threads=t1) as bx:
                for i in T.Parallel(b1):
                    if bx * b1 + i < N:
                        Tmp[bx * b1 + i] = mul_add(A[bx * b1 + i])
            with T.Kernel(T.ceildiv(N, b2), threads=t2) as bx:
                for i in T.Parallel(b2):
                    if bx * b2 + i < N:
                        Out[bx * b2 + i] = Tmp[src(bx * b2 + i)] + A[bx * b2 + i]
        return two_kernels

    if kernels == 2 and shared:
        @T.prim_func
        def two_kernels_shared(A: T.Tensor((N,), dtype), Tmp: T.Tensor((N,), dtype),
                               Out: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, b1), threads=t1) as bx:
                for i in T.Parallel(b1):
                    if bx * b1 + i < N:
                        Tmp[bx * b1 + i] = mul_add(A[bx * b1 + i])
            with T.Kernel(T.ceildiv(N, b2), threads=t2) as bx:
                S_ = T.alloc_shared((b2,), dtype)
                T.copy(Tmp[bx * b2], S_)
                for i in T.Parallel(b2):
                    if bx * b2 + i < N:
                        Out[bx * b2 + i] = S_[b2 - 1 - i] + A[bx * b2 + i]
        return two_kernels_shared

    if kernels == 3 and not shared:
        @T.prim_func
        def three_kernels(A: T.Tensor((N,), dtype), Tmp: T.Tensor((N,), dtype),
                          Out: T.Tensor((N,), dtype), Out2: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, b1), threads=t1) as bx:
                for i in T.Parallel(b1):
                    if bx * b1 + i < N:
                        Tmp[bx * b1 + i] = mul_add(A[bx * b1 + i])
            with T.Kernel(T.ceildiv(N, b2), threads=t2) as bx:
                for i in T.Parallel(b2):
                    if bx * b2 + i < N:
                        Out[bx * b2 + i] = Tmp[src(bx * b2 + i)] + A[bx * b2 + i]
            with T.Kernel(T.ceildiv(N, b3), threads=t3) as bx:
                for i in T.Parallel(b3):
                    if bx * b3 + i < N:
                        Out2[bx * b3 + i] = T.max(Out[N - 1 - (bx * b3 + i)], Tmp[bx * b3 + i])
        return three_kernels

    if kernels == 3 and shared:
        @T.prim_func
        def three_kernels_shared(A: T.Tensor((N,), dtype), Tmp: T.Tensor((N,), dtype),
                                 Out: T.Tensor((N,), dtype), Out2: T.Tensor((N,), dtype)):
            with T.Kernel(T.ceildiv(N, b1), threads=t1) as bx:
                for i in T.Parallel(b1):
                    if bx * b1 + i < N:
                        Tmp[bx * b1 + i] = mul_add(A[bx * b1 + i])
            with T.Kernel(T.ceildiv(N, b2), threads=t2) as bx:
                S_ = T.alloc_shared((b2,), dtype)
                T.copy(Tmp[bx * b2], S_)
                for i in T.Parallel(b2):
                    if bx * b2 + i < N:
                        Out[bx * b2 + i] = S_[b2 - 1 - i] + A[bx * b2 + i]
            with T.Kernel(T.ceildiv(N, b3), threads=t3) as bx:
                for i in T.Parallel(b3):
                    if bx * b3 + i < N:
                        Out2[bx * b3 + i] = T.max(Out[N - 1 - (bx * b3 + i)], Tmp[bx * b3 + i])
        return three_kernels_shared
    raise ValueError(f"kernels={kernels}: a program has 2 or 3 launches")


def build(p: dict) -> Built:
    N, dtype, read, kernels, shift = p["N"], p["dtype"], p["read"], p["kernels"], p["shift"]
    func = _program(N, dtype, read, shift, kernels, p["b1"], p["b2"], p["b3"],
                    p["t1"], p["t2"], p["t3"])

    def inputs(seed):
        return [random_tensor((N,), dtype, seed)]

    def expected(args):
        return oracle.multikernel(args[0], read, kernels, shift, p["b2"])

    return Built(func, list(range(1, kernels + 1)), inputs, expected,
                 flops=N * (2 + kernels))


@st.composite
def params(draw):
    N = draw(S.extent(1, 300))
    return {
        "N": N, "dtype": draw(S.dtype(DTYPES)),
        "kernels": draw(st.sampled_from((2, 3))), "read": draw(st.sampled_from(READS)),
        "shift": draw(st.integers(0, N - 1)),
        "b1": draw(S.tile(TILES)), "b2": draw(S.tile(TILES)), "b3": draw(S.tile(TILES)),
        "t1": draw(S.threads(S.THREADS_ANY)), "t2": draw(S.threads(S.THREADS_ANY)),
        "t3": draw(S.threads(S.THREADS_ANY)),
    }


FAMILY = register(Family("multikernel", __doc__.splitlines()[0], params, build))

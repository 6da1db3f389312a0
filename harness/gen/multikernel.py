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

    style       "prim_func" (default) or "eager": the same program in TileLang's eager
                style (`@core.jit`, `T.const("N")`, outputs made with T.empty), with
    workspace   (eager) Tmp is not returned: a workspace the runtime allocates
    loop        (eager) launch 2 runs in a host loop of `loop` launches, each over one
                chunk of ceil(N / loop) elements (the chunk offset a per-launch scalar)

Signature: (A, Tmp, Out[, Out2]); every tensor but A is an output (eager with a
workspace: Out[, Out2]). Eager programs read "same", "reverse" or "rotate".
"""

from __future__ import annotations

from hypothesis import strategies as st

import core
import core.language as T
from core.ir import annotations as keys
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


@core.jit
def eager_chain(A, dtype, read, shift, kernels, workspace, loop, b1, b2, b3, t1, t2, t3):
    """The family's program in TileLang's eager style, launch 2 in a host loop."""
    N = T.const("N")
    A: T.Tensor((N,), dtype)
    Tmp = T.empty((N,), dtype)
    Out = T.empty((N,), dtype)

    def src(g):
        if read == "reverse":
            return N - 1 - g
        if read == "rotate":
            return (g + shift) % N
        return g

    with T.Kernel(T.ceildiv(N, b1), threads=t1) as bx:
        for i in T.Parallel(b1):
            if bx * b1 + i < N:
                Tmp[bx * b1 + i] = A[bx * b1 + i] * T.cast(2, dtype) + T.cast(1, dtype)
    chunk = (N + loop - 1) // loop
    for c in range(loop):
        with T.Kernel(T.ceildiv(chunk, b2), threads=t2) as bx:
            for i in T.Parallel(b2):
                g = c * chunk + bx * b2 + i
                if bx * b2 + i < chunk and g < N:
                    Out[g] = Tmp[src(g)] + A[g]
    outputs = [Out]
    if kernels == 3:
        Out2 = T.empty((N,), dtype)
        with T.Kernel(T.ceildiv(N, b3), threads=t3) as bx:
            for i in T.Parallel(b3):
                if bx * b3 + i < N:
                    Out2[bx * b3 + i] = T.max(Out[N - 1 - (bx * b3 + i)], Tmp[bx * b3 + i])
        outputs.append(Out2)
    return tuple(outputs) if workspace else (Tmp, *outputs)


def _eager(p: dict):
    """The traced PrimFunc of the eager program and its output indices."""
    func = eager_chain.get_tir(
        N=p["N"], dtype=p["dtype"], read=p["read"], shift=p["shift"], kernels=p["kernels"],
        workspace=p["workspace"], loop=p["loop"], b1=p["b1"], b2=p["b2"], b3=p["b3"],
        t1=p["t1"], t2=p["t2"], t3=p["t3"])
    workspaces = [str(n) for n in (func.attrs or {}).get(keys.WORKSPACES, ())]
    out_idx = [i for i, q in enumerate(func.params)
               if i > 0 and q.name not in workspaces]
    return func, out_idx


def build(p: dict) -> Built:
    N, dtype, read, kernels, shift = p["N"], p["dtype"], p["read"], p["kernels"], p["shift"]
    eager = p.get("style", "prim_func") == "eager"
    if eager:
        func, out_idx = _eager(p)
    else:
        func = _program(N, dtype, read, shift, kernels, p["b1"], p["b2"], p["b3"],
                        p["t1"], p["t2"], p["t3"])
        out_idx = list(range(1, kernels + 1))

    def inputs(seed):
        return [random_tensor((N,), dtype, seed)]

    def expected(args):
        outs = oracle.multikernel_expected(args[0], read, kernels, shift, p["b2"])
        return outs[1:] if eager and p["workspace"] else outs

    return Built(func, out_idx, inputs, expected, flops=N * (2 + kernels))


@st.composite
def params(draw):
    N = draw(S.extent(1, 300))
    style = draw(S.sampled_from(("prim_func", "eager")))
    eager = {"style": "eager", "workspace": draw(st.booleans()),
             "loop": draw(st.integers(1, 4))} if style == "eager" else {}
    return {
        **eager,
        "N": N, "dtype": draw(S.dtype(DTYPES)),
        "kernels": draw(S.sampled_from((2, 3))),
        "read": draw(S.sampled_from(READS if style == "prim_func" else READS[:3])),
        "shift": draw(st.integers(0, N - 1)),
        "b1": draw(S.tile(TILES)), "b2": draw(S.tile(TILES)), "b3": draw(S.tile(TILES)),
        "t1": draw(S.threads(S.THREADS_ANY)), "t2": draw(S.threads(S.THREADS_ANY)),
        "t3": draw(S.threads(S.THREADS_ANY)),
    }


FAMILY = register(Family("multikernel", __doc__.splitlines()[0], params, build))

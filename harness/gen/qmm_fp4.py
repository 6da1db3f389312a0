"""Family `qmm_fp4`: per-expert Y[e] = X[e] W[e]^T for MoE expert weights in fp4 e2m1, two
codes per byte (element 2j in the low nibble, 2j+1 in the high one) with one float16
scale per group of 32 weights along K (MXFP4-style groups), decoded in the kernel
(T.decode_e2m1: bit operations, no table) and accumulated in float32.

Params:
    E           experts; grid z runs one expert per slice (the gathered tokens of each
                expert in X[e], as a MoE block hands them over, padded to T rows, C[e] of
                them real)
    T           token rows per expert (any >= 1; rows past it are masked)
    N, K        expert weight W[e] is N x K (stored N x K/2 bytes); K a multiple of the
                group (32); N any >= 1 (ragged tiles are masked)
    bM, bN      token rows and weight rows per threadgroup
    threads     32, 64, 128, 256
    x           "fragment" (default): each group's activations are loaded into a fragment
                per k step, by every thread that needs them (a simdgroup per weight row);
                "shared": the threadgroup's bM x K activations and bN x K/32 scales are
                staged in threadgroup memory once (one barrier), read from there by all
                rows (bM * K * 2 + bN * K / 16 bytes within 32 KiB), so device memory sees
                them once per threadgroup; a lane then takes a run of 4 weight bytes
                (one uchar4 load, 8 weights) and both nibbles of each byte
    dtype       X: float16 or bfloat16
    out_dtype   Y: float32 or `dtype`
    counts      "full" (default): every expert has T tokens; "ragged": C[e] drawn in [0, T]

Signature: (X (E, T, K/2, 2), W (E, N, K/2) uint8, S (E, N, K/32) float16, C (E,) int32,
Y (E, T, N)). C[e] is how many of expert e's T padded rows hold routed tokens (the counts a
MoE router produces); Y's rows past it are zeros.
X is viewed with its K axis split into (byte, nibble) pairs, the same memory as (E, T, K),
so activation X[m, j, p] meets nibble p of weight byte W[n, j].
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import core.language as T
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import bounds
from oracles import qmm as oracle

GROUP = 32
DTYPES = ("float16", "bfloat16")


def kernel(p: dict):
    E, Tk, N, K, bM, bN = p["E"], p["T"], p["N"], p["K"], p["bM"], p["bN"]
    dtype, out_dtype = p["dtype"], p["out_dtype"]
    half_group = GROUP // 2
    staged = p.get("x", "fragment") == "shared"

    @T.prim_func
    def qmm_fp4(X: T.Tensor((E, Tk, K // 2, 2), dtype), W: T.Tensor((E, N, K // 2), "uint8"),
                Sc: T.Tensor((E, N, K // GROUP), "float16"), C: T.Tensor((E,), "int32"),
                Y: T.Tensor((E, Tk, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(Tk, bM), E, threads=p["threads"]) as \
                (bx, by, e):
            w = T.alloc_fragment((bN, half_group), "uint8")
            y = T.alloc_fragment((bM, bN), "float32")
            if staged:
                # one lane per run of 4 bytes (8 weights): both nibbles of a byte in one
                # iteration, their activations read from threadgroup memory
                xs = T.alloc_shared((bM, K // 2, 2), dtype)
                ss = T.alloc_shared((bN, K // GROUP), "float16")
                acc = T.alloc_fragment((bM, bN, half_group), "float32")
                T.copy(X[e, by * bM, 0, 0], xs)
                T.copy(Sc[e, bx * bN, 0], ss)
                T.clear(acc)
                for g in T.serial(K // GROUP):
                    T.copy(W[e, bx * bN, g * half_group], w)
                    for m, n, j in T.Parallel(bM, bN, half_group):
                        acc[m, n, j] += T.cast(ss[n, g], "float32") * (
                            T.cast(xs[m, g * half_group + j, 0], "float32")
                            * T.decode_e2m1(w[n, j])
                            + T.cast(xs[m, g * half_group + j, 1], "float32")
                            * T.decode_e2m1(T.shift_right(w[n, j], 4)))
                T.reduce_sum(acc, y, dim=2)
            else:
                x = T.alloc_fragment((bM, half_group, 2), dtype)
                s = T.alloc_fragment((bN,), "float32")
                acc = T.alloc_fragment((bM, bN, half_group, 2), "float32")
                pairs = T.alloc_fragment((bM, bN, half_group), "float32")
                T.clear(acc)
                for g in T.serial(K // GROUP):
                    T.copy(W[e, bx * bN, g * half_group], w)
                    for n in T.Parallel(bN):
                        s[n] = T.if_then_else(bx * bN + n < N,
                                              T.cast(Sc[e, bx * bN + n, g], "float32"), 0.0)
                    T.copy(X[e, by * bM, g * half_group, 0], x)
                    for m, n, j, q in T.Parallel(bM, bN, half_group, 2):
                        acc[m, n, j, q] += T.cast(x[m, j, q], "float32") * s[n] * \
                            T.decode_e2m1(T.shift_right(T.cast(w[n, j], "uint32"),
                                                        T.cast(q, "uint32") * 4))
                T.reduce_sum(acc, pairs, dim=3)
                T.reduce_sum(pairs, y, dim=2)
            for m, n in T.Parallel(bM, bN):     # rows past the expert's count are zeros
                if by * bM + m < Tk and bx * bN + n < N:
                    Y[e, by * bM + m, bx * bN + n] = T.cast(
                        T.if_then_else(by * bM + m < C[e], y[m, n], 0.0), out_dtype)
    return qmm_fp4


def inputs_for(p: dict, seed: int) -> list:
    E, Tk, N, K = p["E"], p["T"], p["N"], p["K"]
    w = random_tensor((E, N, K), "float32", seed + 1)
    packed, scales = oracle.quantize_e2m1(w, GROUP)
    x = random_tensor((E, Tk, K), p["dtype"], seed).reshape(E, Tk, K // 2, 2)
    g = torch.Generator().manual_seed(seed + 2)
    counts = torch.full((E,), Tk, dtype=torch.int32) if p.get("counts", "full") == "full" \
        else torch.randint(0, Tk + 1, (E,), generator=g, dtype=torch.int32)
    return [x, packed, scales, counts]


def build(p: dict) -> Built:
    E, Tk, N, K = p["E"], p["T"], p["N"], p["K"]

    def expected(args):
        x, packed, scales, counts = args
        w = oracle.dequant_bounded(oracle.dequant_e2m1(packed, scales, GROUP))
        y = oracle.qmm_bounded(x.reshape(E, Tk, K), w)
        padding = (torch.arange(Tk)[None, :] >= counts[:, None])[..., None]
        y = bounds.where(padding, 0.0, y)             # rows past the count: stored zeros
        return [bounds.expected(y, p["out_dtype"], f"fp4 dot over K={K}, float32 "
                                "accumulation")]

    return Built(kernel(p), [4], lambda seed: inputs_for(p, seed), expected,
                 flops=2 * E * Tk * N * K)


@st.composite
def _drawn(draw):
    dtype = draw(S.dtype(DTYPES))
    return {"E": draw(st.integers(1, 3)), "T": draw(S.extent(1, 9)),
            "N": draw(S.extent(1, 40)), "K": draw(S.multiple_of(GROUP, GROUP, 256)),
            "bM": draw(S.tile((1, 2, 4, 8))), "bN": draw(S.tile((1, 2, 4, 8, 16))),
            "threads": draw(S.threads((32, 64, 128, 256))), "dtype": dtype,
            "out_dtype": draw(S.sampled_from(("float32", dtype))),
            "x": draw(S.sampled_from(("fragment", "shared"))),
            "counts": draw(S.sampled_from(("full", "ragged")))}


def supported(p: dict) -> bool:
    return p["x"] != "shared" or S.fits_threadgroup((p["bM"] * p["K"], p["dtype"]),
                                                    (p["bN"] * p["K"] // GROUP, "float16"))


def params():
    return _drawn().filter(supported)


FAMILY = register(Family("qmm_fp4", __doc__.splitlines()[0], params, build, tags=("gemm",)))

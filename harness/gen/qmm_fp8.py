"""Family `qmm_fp8`: Y = X W^T with W stored as fp8 e4m3 codes (one byte each) and float32
scales per weight row or per G x G block, decoded in the kernel (T.decode_e4m3: bit
operations, no table) and accumulated in float32; for decode the GEMV structure of family
`gemv`, for prefill a T.gemm over weight tiles decoded into threadgroup memory.

Params:
    M, N, K     X is M x K (1: decode; 64: prefill), W codes N x K (uint8), Y is M x N;
                any sizes >= 1 (ragged tiles are masked: padding codes load as 0 = +0.0)
    path        "gemv" (default): the GEMV form below, for decode; "gemm": the prefill
                form (`gemm_kernel`: weight tiles decoded into threadgroup memory, T.gemm;
                M, N, K multiples of 8, T.gemm's tiles and threads)
    scale       "row": S is (N,), applied to the reduced dot products;
                "block": S is (ceil(N/G), ceil(K/G)) as DeepSeek-V3's 128 x 128 blocks,
                applied per k step (G a multiple of bK, so a step lies in one block)
    G           block edge for "block" (bK or 2 bK); unused for "row"
    stage_scales
                gemv path, block scales: True stages the scales of the bN rows in
                threadgroup memory once (one barrier; up to 16 KiB of them), False has
                every thread holding a row load its scale per step (as MLX's qmv reads
                each group's scale per lane), None (default) stages them when they fit
                in 16 KiB
    bM, bN, bK  tile: rows of X, weight rows, K elements per step (gemv: 32..256;
                gemm: 16, 32)
    threads     32, 64, 128, 256
    dtype       X: float16 or bfloat16
    out_dtype   Y: float32 or `dtype`

Signature: (X, W, S, Y).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import core.language as T
from core import cdiv
from core.target import DTYPES as TARGET_DTYPES
from harness.gen import gemm as gemm_family
from harness.gen import strategies as S
from harness.gen.family import Built, Family, register
from harness.gen.inputs import random_tensor
from oracles import bounds
from oracles import qmm as oracle

DTYPES = ("float16", "bfloat16")
SCALES = ("row", "block")
SCALE_STAGE_BYTES = 16 * 1024   # block scales of a tile's rows staged up to this size


def scale_shape(p: dict) -> tuple:
    if p["scale"] == "row":
        return (p["N"],)
    return (cdiv(p["N"], p["G"]), cdiv(p["K"], p["G"]))


def kernel(p: dict):
    if p.get("path", "gemv") == "gemm":
        return gemm_kernel(p)
    M, N, K, bM, bN, bK = p["M"], p["N"], p["K"], p["bM"], p["bN"], p["bK"]
    dtype, out_dtype, G = p["dtype"], p["out_dtype"], p.get("G", bK)
    per_block = p["scale"] == "block"
    s_shape = scale_shape(p)
    tile_scales = bN * s_shape[1] * TARGET_DTYPES["float32"].bytes if per_block else 0
    fits = per_block and tile_scales <= SCALE_STAGE_BYTES
    stage = p.get("stage_scales")
    if stage and not fits:
        raise ValueError(f"qmm_fp8: stage_scales needs block scales (scale='block') of at "
                         f"most {SCALE_STAGE_BYTES} bytes a tile (bN={bN} rows: "
                         f"{tile_scales})")
    staged = fits if stage is None else bool(stage)

    @T.prim_func
    def qmm_fp8(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), "uint8"),
                Sc: T.Tensor(s_shape, "float32"), Y: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=p["threads"]) as (bx, by):
            x = T.alloc_fragment((bM, bK), dtype)
            w = T.alloc_fragment((bN, bK), "uint8")
            s = T.alloc_fragment((bN,), "float32")
            acc = T.alloc_fragment((bM, bN, bK), "float32")
            y = T.alloc_fragment((bM, bN), "float32")
            if staged:
                ss = T.alloc_shared((bN, s_shape[1]), "float32")
                for n, j in T.Parallel(bN, s_shape[1]):
                    ss[n, j] = T.if_then_else(bx * bN + n < N, Sc[(bx * bN + n) // G, j], 0.0)
            T.clear(acc)
            for ko in T.serial(T.ceildiv(K, bK)):
                T.copy(X[by * bM, ko * bK], x)
                T.copy(W[bx * bN, ko * bK], w)
                if staged:
                    for m, n, k in T.Parallel(bM, bN, bK):
                        acc[m, n, k] += T.cast(x[m, k], "float32") * \
                            T.decode_e4m3(w[n, k]) * ss[n, ko * bK // G]
                elif per_block:
                    for n in T.Parallel(bN):
                        s[n] = T.if_then_else(bx * bN + n < N,
                                              Sc[(bx * bN + n) // G, ko * bK // G], 0.0)
                    for m, n, k in T.Parallel(bM, bN, bK):
                        acc[m, n, k] += T.cast(x[m, k], "float32") * \
                            T.decode_e4m3(w[n, k]) * s[n]
                else:
                    for m, n, k in T.Parallel(bM, bN, bK):
                        acc[m, n, k] += T.cast(x[m, k], "float32") * T.decode_e4m3(w[n, k])
            T.reduce_sum(acc, y, dim=2)
            if not per_block:
                for m, n in T.Parallel(bM, bN):
                    y[m, n] = y[m, n] * T.if_then_else(bx * bN + n < N, Sc[bx * bN + n], 0.0)
            T.copy(y, Y[by * bM, bx * bN])
    return qmm_fp8


def gemm_kernel(p: dict):
    """The prefill form: each k step decodes the weight tile into threadgroup memory in
    the activation dtype (e4m3 values are exact in float16 and bfloat16; a block scale is
    applied before that rounding, a row scale after the GEMM) and T.gemm multiplies it with
    simdgroup matrices, so a weight byte is read once per bM rows of X."""
    M, N, K, bM, bN, bK = p["M"], p["N"], p["K"], p["bM"], p["bN"], p["bK"]
    dtype, out_dtype, G = p["dtype"], p["out_dtype"], p.get("G", bK)
    per_block = p["scale"] == "block"
    s_shape = scale_shape(p)

    @T.prim_func
    def qmm_fp8_gemm(X: T.Tensor((M, K), dtype), W: T.Tensor((N, K), "uint8"),
                     Sc: T.Tensor(s_shape, "float32"), Y: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=p["threads"]) as (bx, by):
            x = T.alloc_shared((bM, bK), dtype)
            w = T.alloc_shared((bN, bK), dtype)
            codes = T.alloc_fragment((bN, bK), "uint8")
            acc = T.alloc_fragment((bM, bN), "float32")
            T.clear(acc)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(X[by * bM, ko * bK], x)
                T.copy(W[bx * bN, ko * bK], codes)
                if per_block:
                    for n, k in T.Parallel(bN, bK):
                        w[n, k] = T.cast(T.decode_e4m3(codes[n, k]) * T.if_then_else(
                            bx * bN + n < N, Sc[(bx * bN + n) // G, ko * bK // G], 0.0),
                            dtype)
                else:
                    for n, k in T.Parallel(bN, bK):
                        w[n, k] = T.cast(T.decode_e4m3(codes[n, k]), dtype)
                T.gemm(x, w, acc, transpose_B=True)
            if not per_block:
                for m, n in T.Parallel(bM, bN):
                    acc[m, n] = acc[m, n] * T.if_then_else(bx * bN + n < N, Sc[bx * bN + n],
                                                           0.0)
            T.copy(acc, Y[by * bM, bx * bN])
    return qmm_fp8_gemm


def inputs_for(p: dict, seed: int) -> list:
    """X, and W quantized from normal weights with absmax scales (per row or block)."""
    N, K = p["N"], p["K"]
    w = random_tensor((N, K), "float32", seed + 1)
    if p["scale"] == "row":
        scales = (w.abs().amax(1) / oracle.E4M3_MAX).clamp_min(1e-8)
        codes = oracle.quantize_e4m3(w, scales[:, None])
    else:
        G = p["G"]
        nb, kb = scale_shape(p)
        padded = torch.zeros(nb * G, kb * G)
        padded[:N, :K] = w
        scales = (padded.abs().reshape(nb, G, kb, G).amax((1, 3)) / oracle.E4M3_MAX) \
            .clamp_min(1e-8)
        codes = oracle.quantize_e4m3(w, oracle.expand_blocks(scales, G, N, K))
    return [random_tensor((p["M"], K), p["dtype"], seed), codes, scales.float()]


def build(p: dict) -> Built:
    M, N, K = p["M"], p["N"], p["K"]
    if p["scale"] == "block" and p["G"] % p["bK"]:
        # a k step would straddle two scale blocks, and the kernel applies one scale a step
        raise ValueError(f"qmm_fp8: block scales of edge G={p['G']} need G to be a multiple "
                         f"of the k step bK={p['bK']} (each step lies in one block)")
    # the gemm path stores block-scaled weights in the activation dtype; the others form
    # code x scale in float32
    rounded = p.get("path") == "gemm" and p["scale"] == "block"

    def expected(args):
        x, codes, scales = args
        w = oracle.dequant_bounded(oracle.dequant_e4m3(codes, scales, p.get("G", 0)),
                                   p["dtype"] if rounded else None)
        return [bounds.expected(oracle.qmm_bounded(x, w), p["out_dtype"],
                                f"fp8 dot over K={K}, float32 accumulation")]

    return Built(kernel(p), [3], lambda seed: inputs_for(p, seed), expected,
                 flops=2 * M * N * K)


@st.composite
def _drawn_gemm(draw):
    """The gemm path: T.gemm's rules (multiples of 8, tiles the simdgroups split)."""
    dtype = draw(S.dtype(DTYPES))
    bK = draw(S.tile((16, 32)))
    scale = draw(S.sampled_from(SCALES))
    p = {"M": draw(S.multiple_of(8, 8, 80)), "N": draw(S.multiple_of(8, 8, 80)),
         "K": draw(S.multiple_of(8, 8, 160)), "scale": scale, "path": "gemm",
         "bM": draw(S.tile((16, 32))), "bN": draw(S.tile((16, 32))), "bK": bK,
         "threads": draw(S.threads((32, 64, 128))), "dtype": dtype,
         "out_dtype": draw(S.sampled_from(("float32", dtype)))}
    if scale == "block":
        p["G"] = bK * draw(S.sampled_from((1, 2)))
    return p


@st.composite
def _drawn(draw):
    dtype = draw(S.dtype(DTYPES))
    bK = draw(S.tile((32, 64, 128, 256)))
    scale = draw(S.sampled_from(SCALES))
    p = {"M": draw(S.extent(1, 10)), "N": draw(S.extent(1, 40)), "K": draw(S.extent(1, 300)),
         "scale": scale, "bM": draw(S.tile((1, 2, 4, 8))), "bN": draw(S.tile((1, 2, 4, 8, 16))),
         "bK": bK, "threads": draw(S.threads((32, 64, 128, 256))), "dtype": dtype,
         "out_dtype": draw(S.sampled_from(("float32", dtype)))}
    if scale == "block":
        p["G"] = bK * draw(S.sampled_from((1, 2)))
        p["stage_scales"] = draw(S.sampled_from((None, True, False)))
    return p


def params():
    return st.one_of(_drawn(), _drawn_gemm().filter(gemm_family.supported))


FAMILY = register(Family("qmm_fp8", __doc__.splitlines()[0], params, build, tags=("gemm",)))

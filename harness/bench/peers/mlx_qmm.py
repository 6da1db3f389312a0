"""MLX's mxfp8 quantized matrix-matrix product (fp_quantized.h, `fp_qmm_t_splitk` +
steel's `gemm_splitk_accum`, or `fp_qmm_t`) as the peer of the `qmm_fp8` family's prefill
path (`path: "gemm"`): Y = X W^T with W as e4m3 codes, M rows of X.

**The formats differ**, as for the decode peer (mlx_qmv.py, whose re-quantization this
module uses): the case's float32 scales per row or per 128 x 128 block become one e8m0
scale per 32 weights of a row, and the case's oracle is evaluated on the re-quantized
weights. MLX's loader decodes each weight as scale x code in float32 and stores it in the
activation type in threadgroup memory (exact: a power of two times an e4m3 value fits
bfloat16 and, in its range, float16), the simdgroup-matrix products accumulate in float32.

What MLX runs, from its host code, mlx/backend/metal/quantized.cpp (MLX 846d176):
QuantizedMatmul::eval_gpu with transposed weights and M >= get_qmv_batch_limit(K, N) (the
per-GPU table: at most 33 rows on any GPU; below, some GPU runs a qmv kernel) and one batch
calls `qmm_splitk`: bm = bn = 32, tiles n_tiles = ceil(N / 32) x m_tiles = ceil(M / 32),
split_k = max(1, 512 / (n_tiles m_tiles)) (about 512 threadgroups), at most
K / max(group_size, 32), lowered until K % (split_k * 32) == 0; split_k <= 1 falls back
to `qmm` (no NAX on M1-M4: `is_nax_available` is false). The split form launches
`fp_qmm_t_splitk<T, 32, 8, aligned_N>` (BM = BK = BN = 32, aligned_N = N % 32 == 0) over
threadgroups (n_tiles, m_tiles, split_k) of (32, 2, 2), each over K / split_k of K,
writing partial sums [split_k, M, N]; then `gemm_splitk_accum<float, T>` (the steel GEMM's
split-K accumulation) sums them, a thread per output, threads (N, M, 1) in threadgroups of
get_block_dims(N, M, 1) (mlx_gemm.py; dispatch_threads, so the last threadgroups are
partial where N or M is not their multiple: run_msl(threads=...)). `qmm` launches
`fp_qmm_t<T, 32, 8, aligned_N, false>` over threadgroups (n_tiles, m_tiles, 1) of
(32, 2, 2).

The wheel the headers come from (mlx-metal 0.32.4) is newer than 846d176 where the two
differ, and its kernels are what runs: its `fp_qmm_t_splitk` writes float32 partials
(846d176: the activation type, summed by a strided reduction) and its `fp_qmm_t` has a
global-scale buffer at 2. What its host code binds there was read from the wheel's
libmlx.dylib (`qmm_splitk` and `qmm`, disassembled; the kernel names are its
mlx.metallib's): the partials an (split_k, M, N) float32 array, summed by
`steel_gemm_splitk_accum_<out>_float32` with buffers 0 partials, 1 y, 2 split_k,
3 M * N, 4 N; the split kernel's buffers 0 w (codes), 1 scales (e8m0 bytes), 2 x,
3 partials, 4 K, 5 N, 6 M, 7 K / split_k, 8 M * N (its own [[buffer]] indices); `fp_qmm_t`'s
0 w, 1 scales, 2 the global scale (not set: none; x stays at 3 in the fp modes), 3 x, 4 y,
5 K, 6 N, 7 M, and 8-14 the batch shapes and strides, not set for one batch
(`add_strides_and_shapes` skips them), placeholders here.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.bench.peers import NotApplicable, PeerLaunch
from harness.bench.peers.mlx_gemm import _arrays, _block_dims
from harness.bench.peers.mlx_qmv import (GROUP, MSL_TYPES, requantize_mxfp8,
                                         requantized_expected)

HOST = "mlx/backend/metal/quantized.cpp"
QMM_HEADERS = ("utils.h", "steel/gemm/gemm.h", "quantized_utils.h", "fp_quantized.h")
HEADERS = {"mxfp8": QMM_HEADERS,
           "affine": ("utils.h", "steel/gemm/gemm.h", "quantized_utils.h", "quantized.h")}
ACCUM_HEADERS = ("utils.h", "steel/gemm/gemm.h", "steel/gemm/kernels/steel_gemm_splitk.h")
TILE = 32                      # qmm's bm = bn (and the kernels' BK)
TARGET_TGS = 512               # qmm_splitk: split K until about this many threadgroups
TYPE_STRINGS = {"float16": "float16_t", "bfloat16": "bfloat16_t"}   # get_type_string


def qmv_batch_limit(K: int, N: int) -> int:
    """The most rows any GPU sends to a qmv kernel instead of qmm at (K, N):
    quantized.cpp get_qmv_batch_limit, the largest over its per-GPU table (M5 and
    later: 33 / 25 / 13; M3, M4: 13 / 15 / 13; M1, M2: 14 / 10 / 6; the Max and Ultra
    ('d') of M1-M4: 32 / 18 / 12; the three for K and N <= 2048, <= 4096, beyond)."""
    if K <= 2048 and N <= 2048:
        return 33
    if K <= 4096 and N <= 4096:
        return 25
    return 13


def split_k(M: int, N: int, K: int, group: int = GROUP) -> int:
    """qmm_splitk's number of K partitions (1: it calls qmm instead)."""
    tgs = -(-N // TILE) * -(-M // TILE)
    parts = min(max(1, TARGET_TGS // tgs), K // max(group, TILE))
    while parts > 1 and K % (parts * max(group, TILE)):
        parts -= 1
    return parts


def _i32(v):
    return np.array([v], np.int32)


def check_applies(p: dict, group: int, what: str) -> None:
    """NotApplicable unless MLX runs a qmm kernel for the params."""
    M, N, K, dtype = p["M"], p["N"], p["K"], p["dtype"]
    if p.get("path", "gemv") != "gemm":
        raise NotApplicable(f"path={p.get('path', 'gemv')}: the {what} qmm peer is the "
                            "prefill (gemm path) product")
    if p["out_dtype"] != dtype:
        raise NotApplicable(f"out_dtype={p['out_dtype']}: MLX's qmm writes the activation "
                            f"type ({dtype})")
    if K % group:
        raise NotApplicable(f"K={K}: {what} groups {group} weights of a row")
    limit = qmv_batch_limit(K, N)
    if M < limit:
        raise NotApplicable(f"M={M}: below {limit} rows some GPU runs a qmv kernel "
                            "(get_qmv_batch_limit), not qmm")


def launch(p: dict, inputs: list, outputs: list):
    from oracles import qmm as oracle

    check_applies(p, GROUP, "mxfp8")
    x, codes, scales = inputs
    (y,) = outputs
    w = oracle.dequant_e4m3(codes, scales, p.get("G", 0))
    mx_codes, mx_scales, wq = requantize_mxfp8(w)
    dtype = p["dtype"]

    # the loader stores scale x code in the activation type (exact here)
    expected = requantized_expected(x, wq, p, "mxfp8", held=dtype)

    formats = ("mxfp8 (e4m3 codes, an e8m0 scale per 32 weights) re-quantized from the "
               "case's e4m3 codes and float32 "
               + ("row" if p["scale"] == "row" else f"{p.get('G')} x {p.get('G')} block")
               + " scales; the oracle evaluated on the re-quantized weights")
    return plan(p, "mxfp8", GROUP, [mx_codes, mx_scales], x, y, expected, formats)


def plan(p: dict, mode: str, group: int, quantized: list, x, y, expected, formats: str):
    """The launches of QuantizedMatmul::eval_gpu -> qmm_splitk for 8-bit weights in
    `mode` ("mxfp8": `quantized` is [codes, e8m0 scales]; "affine": [codes, scales,
    biases], the affine kernels' extra buffer 2 shifting the split kernel's later ones)."""
    M, N, K, dtype = p["M"], p["N"], p["K"], p["dtype"]
    func = "affine" if mode == "affine" else "fp"
    t, ts = MSL_TYPES[dtype], TYPE_STRINGS[dtype]
    aligned = N % TILE == 0
    al = "true" if aligned else "false"
    tiles = (-(-N // TILE), -(-M // TILE))
    parts = split_k(M, N, K, group)
    arrays = _arrays(TILE, TILE, 2, 2)          # BlockMMA<T, U, 32, 32, 32, 2, 2>
    if parts <= 1:
        name = f"{mode}_qmm_t_{ts}_gs_{group}_b_8_alN_{al}_batch_0"
        targs = f"{t}, {group}, 8, {al}, false"
        # buffer 2: the biases, or in the fp modes the (unset) global scale
        head = quantized if mode == "affine" else [*quantized, np.zeros(4, np.float32)]
        # 8-14 (affine 8-15, the biases' strides too): one batch, not set
        unset = [np.zeros(4, np.int32) for _ in range(8 if mode == "affine" else 7)]
        return PeerLaunch(
            headers=HEADERS[mode],
            instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                          f"{func}_qmm_t<{targs}>) {func}_qmm_t<{targs}>;\n",
            kernel=name, grid=(*tiles, 1), threadgroup=(32, 2, 2),
            buffers=[*head, x, y, _i32(K), _i32(N), _i32(M), *unset],
            outputs=[y], expected=expected,
            host_code=f"{HOST}: QuantizedMatmul::eval_gpu -> qmm_splitk -> qmm",
            geometry=f"{func}_qmm_t: 32 x 32 output tiles, K in steps of 32, 4 simdgroups "
                     f"(2 x 2) a threadgroup, grid {tiles}",
            formats=formats, local_arrays=arrays)
    name = f"{mode}_qmm_t_splitk_{ts}_gs_{group}_b_8_alN_{al}"
    targs = f"{t}, {group}, 8, {al}"
    partials = torch.zeros(parts, M, N, dtype=torch.float32)
    split = PeerLaunch(
        headers=HEADERS[mode],
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"{func}_qmm_t_splitk<{targs}>) {func}_qmm_t_splitk<{targs}>;\n",
        kernel=name, grid=(*tiles, parts), threadgroup=(32, 2, 2),
        buffers=[*quantized, x, partials, _i32(K), _i32(N), _i32(M), _i32(K // parts),
                 _i32(M * N)],
        outputs=[partials], host_code=f"{HOST}: QuantizedMatmul::eval_gpu -> qmm_splitk",
        geometry=f"{func}_qmm_t_splitk: 32 x 32 output tiles, {parts} K partitions of "
                 f"{K // parts}, 4 simdgroups (2 x 2) a threadgroup, grid "
                 f"{(*tiles, parts)}, float32 partials",
        formats=formats, local_arrays=arrays)
    bx, by, _ = _block_dims(N, M, 1)
    accum = f"steel_gemm_splitk_accum_{dtype}_float32"
    total = PeerLaunch(
        headers=ACCUM_HEADERS,
        instantiation=f'template [[host_name("{accum}")]] [[kernel]] decltype('
                      f"gemm_splitk_accum<float, {t}>) gemm_splitk_accum<float, {t}>;\n",
        kernel=accum, grid=(-(-N // bx), -(-M // by), 1), threadgroup=(bx, by, 1),
        threads=(N, M, 1),
        buffers=[partials, y, _i32(parts), _i32(M * N), _i32(N)], outputs=[y],
        expected=expected, host_code=f"{HOST}: QuantizedMatmul::eval_gpu -> qmm_splitk",
        geometry=f"then the {parts} partitions summed, a thread per output in groups of "
                 f"({bx}, {by})")
    return [split, total]

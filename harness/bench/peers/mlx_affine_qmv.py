"""MLX's affine 8-bit quantized matrix-vector product (quantized.h, `affine_qmv_fast` /
`affine_qmv`) as the second peer (`--peers mlx-affine`) of the `qmm_fp8` family's decode
path (M = 1): what MLX runs for `mx.quantize(w, group_size=64, bits=8)` weights, its
default group with 8 bits, the integer format a user would pick for 8-bit weights.

**The formats differ more than the mxfp8 peer's** (mlx_qmv.py): MLX's affine format holds
unsigned 8-bit codes q with a scale s and a bias b per 64 consecutive weights of a row,
both in the activation type, and decodes w = s q + b. The peer re-quantizes the case's
weights (decoded in float64, then held in the activation type, as the weights MLX's
quantizer would be given) the way MLX's `affine_quantize<T, 64, 8>` does, in float32:
per group w_min = the least weight, w_max = the greatest or 0 (its running maximum starts
at 0), s = max((w_max - w_min) / 255, 1e-7), taken negative unless |w_min| > |w_max|; the
edge e = w_min (or w_max on the negative side), and unless e / s rounds to 0 the scale
becomes e / round(e / s) and b = e (an exact code for the edge), else b = 0; the codes
min(round((w - b) / s), 255) with the float32 s and b, rounded half away from zero (Metal's
`round`), then s and b stored in the activation type. That is MLX's quantizer bit for bit
(suites/harness/test_peers.py runs `affine_quantize` on the emulator). The oracle (the
case's own, oracles/qmm.py) is evaluated on the weights the kernel decodes, s q + b with s
and b as stored: the same x, the same kind of float32 dot over K, other weights; the bytes
read differ too (two 2-byte values per 64 weights against a float per row or block). The
kernel computes each group's dot as s (sum of x q) + b (sum of x): the same products
regrouped.

Launch, from MLX's host code, mlx/backend/metal/quantized.cpp (MLX 846d176; its fast-path
alignment also read from the 0.32.4 wheel's libmlx.dylib, the same):
QuantizedMatmul::eval_gpu with transposed weights and M = 1 calls `dispatch_qmv` -> `qmv`
(K not 64 or 128: no qmv_quad; M = 1: no qmv_wide): bn = 8 (2 simdgroups x 4 rows), `fast`
when N % 8 == 0 and K % qmv_fast_k_alignment(8) = 4 * 2 * 32 = 256 == 0; threads (32, 2, 1)
a threadgroup, threadgroups (M, ceil(N / 8), 1). Kernels (the wheel's mlx.metallib names):
`affine_qmv_fast_<type>_gs_64_b_8_batch_0_pr_0_hgs_0_r_4` = `affine_qmv_fast<T, 64, 8,
false>` (not batched, no partial rows, no global scale, 4 rows a simdgroup: the template's
defaults), else `affine_qmv<T, 64, 8, false>`. Buffers (the kernels' own [[buffer]]
indices): 0 w (codes), 1 scales, 2 biases, 3 x, 4 y, 5 K, 6 N; 7-14 the batch shapes and
strides, not set for one batch (`add_strides_and_shapes` skips them), placeholders here.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.bench.peers import NotApplicable, PeerLaunch
from harness.bench.peers.mlx_qmv import (BN, FAST_K, HOST, MSL_TYPES, check_applies,
                                         requantized_expected)

TYPE_STRINGS = {"float16": "float16_t", "bfloat16": "bfloat16_t"}     # get_type_string
TORCH_TYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
GROUP = 64                     # mx.quantize's default group size
BINS = 255.0                   # 2^8 - 1
EPS = 1e-7                     # affine_quantize's least scale


def _round_away(t: torch.Tensor) -> torch.Tensor:
    """Metal's round: to nearest, halves away from zero (torch.round takes the even)."""
    return torch.sign(t) * torch.floor(t.abs() + 0.5)


def requantize_affine8(w: torch.Tensor, dtype: str, group: int = GROUP):
    """Weights (N, K), K a multiple of `group`, held in `dtype` -> (codes uint8 (N, K),
    scales and biases in `dtype` (N, K / group), the weights they decode to in float64:
    scale x code + bias), as MLX's affine_quantize<T, group, 8> computes them."""
    n, k = w.shape
    wt = w.to(TORCH_TYPES[dtype]).float().reshape(n, k // group, group)
    w_min = wt.amin(-1)
    w_max = wt.amax(-1).clamp_min(0.0)
    scale = ((w_max - w_min) / BINS).clamp_min(EPS)
    side = w_min.abs() > w_max.abs()
    scale = torch.where(side, scale, -scale)
    edge = torch.where(side, w_min, w_max)
    q0 = _round_away(edge / scale)
    at_zero = q0 == 0
    scale = torch.where(at_zero, scale, edge / torch.where(at_zero, 1.0, q0))
    bias = torch.where(at_zero, 0.0, edge)
    q = _round_away((wt - bias[..., None]) / scale[..., None]).clamp(max=BINS)
    codes = q.to(torch.uint8)          # (w - b) / s >= 0 but for -0
    s_t, b_t = scale.to(TORCH_TYPES[dtype]), bias.to(TORCH_TYPES[dtype])
    wq = codes.double() * s_t.double()[..., None] + b_t.double()[..., None]
    return codes.reshape(n, k), s_t, b_t, wq.reshape(n, k)


def launch(p: dict, inputs: list, outputs: list) -> PeerLaunch:
    from oracles import qmm as oracle

    M, N, K, dtype = p["M"], p["N"], p["K"], p["dtype"]
    check_applies(p, GROUP, "MLX's affine 8-bit format")
    if K in (64, 128):
        raise NotApplicable(f"K={K}: MLX runs qmv_quad there, not qmv")
    x, codes, scales = inputs
    (y,) = outputs
    w = oracle.dequant_e4m3(codes, scales, p.get("G", 0))
    q, s, b, wq = requantize_affine8(w, dtype)
    fast = N % BN == 0 and K % FAST_K == 0
    func = "affine_qmv_fast" if fast else "affine_qmv"
    t = MSL_TYPES[dtype]
    targs = f"{t}, {GROUP}, 8, false"
    name = f"{func}_{TYPE_STRINGS[dtype]}_gs_{GROUP}_b_8_batch_0_pr_0_hgs_0_r_4"
    unset = [np.zeros(4, np.int32) for _ in range(8)]       # buffers 7-14: one batch

    expected = requantized_expected(x, wq, p, "affine 8-bit")

    # float x_thread[values_per_thread], result[4]: fast 2 packs of 4 values, else 1
    values = 8 if fast else 4
    return PeerLaunch(
        headers=("utils.h", "steel/gemm/gemm.h", "quantized_utils.h", "quantized.h"),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"{func}<{targs}>) {func}<{targs}>;\n",
        kernel=name, grid=(M, -(-N // BN), 1), threadgroup=(32, 2, 1),
        buffers=[q, s, b, x, y, np.array([K], np.int32), np.array([N], np.int32), *unset],
        outputs=[y], expected=expected,
        host_code=f"{HOST}: dispatch_qmv -> qmv",
        geometry=f"{func}: 2 simdgroups x 4 weight rows a threadgroup of 64 threads, "
                 f"{values} weights a lane per step",
        formats=f"MLX affine 8-bit (codes, a {dtype} scale and bias per {GROUP} weights, "
                "w = s q + b) re-quantized as MLX's affine_quantize does from the case's "
                "e4m3 codes and float32 "
                + ("row" if p["scale"] == "row" else f"{p.get('G')} x {p.get('G')} block")
                + " scales; the oracle evaluated on the re-quantized weights",
        local_arrays={"x_thread": 4 * values, "result": 4 * 4})

"""MLX's mxfp8 quantized matrix-vector product (fp_quantized.h, `fp_qmv_fast` / `fp_qmv`)
as the peer of the `qmm_fp8` family's decode path (M = 1, the GEMV form): y = x W^T with W
as e4m3 codes.

**The formats differ.** The case's weights are e4m3 codes with float32 scales per row or
per 128 x 128 block; MLX's mxfp8 has e4m3 codes with one e8m0 scale (a power of two, a
byte) per 32 consecutive weights of a row. The peer re-quantizes the case's weights
(decoded in float64) into mxfp8: per group of 32 the scale 2^e with e the smallest integer
such that the group's absmax / 2^e <= 448 (e4m3's largest finite value), the codes
rounded to nearest e4m3, and the oracle (the case's own, oracles/qmm.py) is evaluated on
the re-quantized weights: the same x, the same kind of float32 dot over K, other weights.
The bytes it reads differ too (one scale byte per 32 weights against a float per row or
per block), which the counters and ratios show as they are.

Launch, from MLX's host code, mlx/backend/metal/quantized.cpp (MLX 846d176):
QuantizedMatmul::eval_gpu with transposed weights and M < the qmv batch limit calls
`dispatch_qmv`, which for K not 64 or 128 and M = 1 calls `qmv`: bn = 8 (2 simdgroups x
results_per_simdgroup 4; the narrow 2-row variant is M5 Max nvfp4 only), bk = 32,
`fast` when N % 8 == 0 and K % qmv_fast_k_alignment(8) = 4 * 2 * 32 = 256 == 0; threads
(32, 2, 1) a threadgroup, threadgroups (M, ceil(N / 8), 1). Kernel names and template
arguments, kernels/fp_quantized.metal: `fp_qmv_fast<T, 32, 8, false>` and
`fp_qmv<T, 32, 8, false>` (group size 32, 8 bits, not batched). Buffers 0 w (the codes,
N x K bytes), 1 scales (N x K / 32 bytes), 2 the global scale (not set: no global scale),
3 x, 4 y, 5 K, 6 N (int); the batch shapes and strides (7-13) are not set for one batch
(`add_strides_and_shapes` skips them), placeholders here.
"""

from __future__ import annotations

import numpy as np
import torch

from harness.bench.peers import NotApplicable, PeerLaunch

HOST = "mlx/backend/metal/quantized.cpp"
MSL_TYPES = {"float16": "half", "bfloat16": "bfloat16_t"}
GROUP = 32                     # mxfp8: one e8m0 scale per 32 weights
BN = 8                         # rows per threadgroup: 2 simdgroups x 4 results
FAST_K = 256                   # qmv_fast_k_alignment(8)
E4M3_MAX = 448.0


def requantize_mxfp8(w: torch.Tensor):
    """float64 weights (N, K), K a multiple of 32 -> (codes uint8 (N, K), e8m0 scale bytes
    (N, K / 32), the re-quantized weights in float64)."""
    n, k = w.shape
    groups = w.reshape(n, k // GROUP, GROUP)
    amax = groups.abs().amax(-1)
    e = torch.ceil(torch.log2(amax.clamp_min(2.0 ** -127) / E4M3_MAX)).clamp(-127, 127)
    # the smallest e whose scaled absmax fits (log2 may land a hair below an exact power)
    e = torch.where(amax / torch.exp2(e) > E4M3_MAX, e + 1, e)
    scale = torch.exp2(e)
    codes = (groups / scale[..., None]).float().clamp(-E4M3_MAX, E4M3_MAX) \
        .to(torch.float8_e4m3fn)
    wq = codes.double() * scale[..., None]
    return (codes.view(torch.uint8).reshape(n, k), (e + 127).to(torch.uint8),
            wq.reshape(n, k))


def check_applies(p: dict, group: int, what: str) -> None:
    """NotApplicable unless MLX runs a qmv kernel for the params: the decode (M = 1)
    product, written in the activation type, over whole groups of `group` weights."""
    M, K, dtype = p["M"], p["K"], p["dtype"]
    if p.get("path", "gemv") != "gemv" or M != 1:
        raise NotApplicable(f"M={M}, path={p.get('path', 'gemv')}: the {what} peer is MLX's "
                            "qmv, the decode (M = 1) product")
    if p["out_dtype"] != dtype:
        raise NotApplicable(f"out_dtype={p['out_dtype']}: MLX's qmv writes the activation "
                            f"type ({dtype})")
    if K % group:
        raise NotApplicable(f"K={K}: {what} groups {group} weights of a row")


def requantized_expected(x, wq, p: dict, what: str, held: str | None = None, x_shape=None):
    """The peer's `expected`: the case's oracle evaluated on the re-quantized weights `wq`
    (float64; `held`: the dtype the kernel's loader stores each decoded weight in), x
    reshaped to `x_shape` where given, float32 accumulation, stored in the output dtype."""
    def expected():
        from oracles import bounds
        from oracles import qmm as oracle
        wb = oracle.dequant_bounded(wq, held) if held else oracle.dequant_bounded(wq)
        xs = x if x_shape is None else x.reshape(x_shape)
        return [bounds.expected(oracle.qmm_bounded(xs, wb), p["out_dtype"],
                                f"{what} dot over K={p['K']} (re-quantized weights), float32 "
                                "accumulation")]
    return expected


def launch(p: dict, inputs: list, outputs: list) -> PeerLaunch:
    from oracles import qmm as oracle

    M, N, K, dtype = p["M"], p["N"], p["K"], p["dtype"]
    check_applies(p, GROUP, "mxfp8")
    x, codes, scales = inputs
    (y,) = outputs
    w = oracle.dequant_e4m3(codes, scales, p.get("G", 0))
    mx_codes, mx_scales, wq = requantize_mxfp8(w)
    fast = N % BN == 0 and K % FAST_K == 0
    func = "fp_qmv_fast" if fast else "fp_qmv"
    t = MSL_TYPES[dtype]
    targs = f"{t}, {GROUP}, 8, false"
    name = f"mxfp8_{func[3:]}_{dtype}_gs_{GROUP}_b_8_batch_0"
    unset = [np.zeros(4, np.int32) for _ in range(7)]       # buffers 7-13: one batch

    expected = requantized_expected(x, wq, p, "mxfp8")

    # float x_thread[values_per_thread], result[4]: fast 8 values, else 4
    values = 8 if fast else 4
    return PeerLaunch(
        headers=("utils.h", "steel/gemm/gemm.h", "quantized_utils.h", "fp_quantized.h"),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"{func}<{targs}>) {func}<{targs}>;\n",
        kernel=name, grid=(M, -(-N // BN), 1), threadgroup=(32, 2, 1),
        buffers=[mx_codes, mx_scales, np.zeros(4, np.float32), x, y,
                 np.array([K], np.int32), np.array([N], np.int32), *unset],
        outputs=[y], expected=expected,
        host_code=f"{HOST}: dispatch_qmv -> qmv",
        geometry=f"{func}: 2 simdgroups x 4 weight rows a threadgroup of 64 threads, "
                 f"{values} weights a lane per step",
        formats="mxfp8 (e4m3 codes, an e8m0 scale per 32 weights) re-quantized from the "
                "case's e4m3 codes and float32 "
                + ("row" if p["scale"] == "row" else f"{p.get('G')} x {p.get('G')} block")
                + " scales; the oracle evaluated on the re-quantized weights",
        local_arrays={"x_thread": 4 * values, "result": 4 * 4})

"""MLX's mxfp4 gathered quantized matrix-vector product (fp_quantized.h,
`fp_gather_qmv_fast` / `fp_gather_qmv`) as the peer of the `qmm_fp4` family: per expert e,
Y[e] = X[e] W[e]^T with W[e] as e2m1 codes, the few token rows of each expert one vector
each.

**The formats differ.** The case's weights are e2m1 codes with one float16 scale per 32
weights of a row (absmax / 6: not a power of two); MLX's mxfp4 has the same e2m1 codes and
group of 32 but its scale is e8m0 (a power of two, one byte). The peer re-quantizes the
case's weights (decoded in float64) into mxfp4: per group the scale 2^e with e the
smallest integer such that the group's absmax / 2^e <= 6 (e2m1's largest value), the codes
the nearest e2m1 value of w / 2^e (ties to the even code, as MLX's `fp4_e2m1` rounds; the
bytes are those of MLX's own `fp_quantize<float, 32, 4>`, which picks the smallest e8m0 at
or above absmax / 6: suites/harness/test_peers.py runs it), and
the oracle (the case's own, oracles/qmm.py) is evaluated on the re-quantized weights: the
same x, the same kind of float32 dot over K, other weights (coarser: a power-of-two scale
leaves up to half of e2m1's range unused in a group). The scale bytes read differ too (one
byte per 32 weights against two).

What MLX would run, from its host code, mlx/backend/metal/quantized.cpp (MLX 846d176): the
case's work as `gather_qmm(x, w, scales, lhs_indices, rhs_indices, transpose=True,
group_size=32, bits=4, mode="mxfp4")` with x (E, T, K), w (E, N, K) quantized and the index
arrays arange(E) (expert e's rows multiply expert e's weights). GatherQMM::eval_gpu: M = T
rows per batch, B = E batches; not `gather_qmm_rhs` (that needs M = 1, B >= 16, B / E >= 4
and sorted indices: one row per routed token, not this layout); M below
get_qmv_batch_limit(K, N) (>= 6 on every GPU family) so not `gather_qmm`; transposed, so
`gather_qmv`: bn = 8, bk = 32, threads (32, 2, 1) a threadgroup, threadgroups
(M, ceil(N / 8), B); `fast` when N % 8 == 0 and K % qmv_fast_k_alignment(4) =
8 * 2 * 32 = 512 == 0. Kernel names and template arguments, kernels/fp_quantized.metal
(`instantiate_quantized(mxfp4, gather_qmv_fast, type, 32, 4)`):
`mxfp4_gather_qmv_fast_<type>_gs_32_b_4` = `fp_gather_qmv_fast<T, 32, 4>` (no global
scale), else `fp_gather_qmv<T, 32, 4>`. Buffers (quantized.cpp `gather_qmv`,
`add_strides_and_shapes`, `add_gather_strides_and_shapes`): 0 w (the codes, read as
uint32), 1 scales (e8m0 bytes), 2 the global scale (not set: none), 3 x, 4 lhs_indices,
5 rhs_indices (uint32), 6 y, 7 K, 8 N, 9 x's batch ndims, 10 x's shape, 11 x's strides
(int64), 12 w's batch ndims, 13 w's shape, 14 w's strides (in uint32 words, int64),
15 the scales' strides, 16 the index arrays' ndims (after collapse_contiguous_dims),
17 their shape, 18 lhs strides, 19 rhs strides. No function constants (the header's
200-202 belong to `fp_gather_qmm_rhs`).
"""

from __future__ import annotations

import numpy as np
import torch

from harness.bench.peers import NotApplicable, PeerLaunch
from harness.bench.peers.mlx_qmv import requantized_expected

HOST = "mlx/backend/metal/quantized.cpp"
MSL_TYPES = {"float16": "half", "bfloat16": "bfloat16_t"}
GROUP = 32                     # mxfp4: one e8m0 scale per 32 weights
BN = 8                         # rows per threadgroup: 2 simdgroups x 4 results
FAST_K = 512                   # qmv_fast_k_alignment(4)
E2M1_MAX = 6.0
QMV_LIMIT = 6                  # the smallest get_qmv_batch_limit of any GPU and shape
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)     # codes 0..7, sign bit 8


def requantize_mxfp4(w: torch.Tensor):
    """float64 weights (..., K), K a multiple of 32 -> (codes packed two a byte, element
    2j in the low nibble (..., K / 2) uint8, e8m0 scale bytes (..., K / 32) uint8, the
    re-quantized weights in float64 (..., K))."""
    *lead, k = w.shape
    groups = w.reshape(*lead, k // GROUP, GROUP)
    amax = groups.abs().amax(-1)
    e = torch.ceil(torch.log2(amax.clamp_min(2.0 ** -127) / E2M1_MAX)).clamp(-127, 127)
    # the smallest e whose scaled absmax fits (log2 may land a hair off an exact power)
    e = torch.where(amax / torch.exp2(e) > E2M1_MAX, e + 1, e)
    e = torch.where(amax / torch.exp2(e - 1) <= E2M1_MAX, e - 1, e).clamp(-127, 127)
    scale = torch.exp2(e)
    q = groups / scale[..., None]
    grid = torch.tensor(E2M1_GRID, dtype=torch.float64)
    dist = (q.abs()[..., None] - grid).abs()
    # nearest grid value; on a tie the even code (argmin takes the first, so prefer an
    # even index by nudging odd ones)
    dist = dist + (torch.arange(8) % 2).double() * 1e-12
    mag = dist.argmin(-1)
    codes = (mag | torch.where(torch.signbit(q), 8, 0)).to(torch.uint8)   # -0: 8, as MLX
    wq = grid[mag] * torch.sign(q) * scale[..., None]
    codes = codes.reshape(*lead, k)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed, (e + 127).to(torch.uint8), wq.reshape(*lead, k)


def _i32(*v):
    return np.array(v, np.int32)


def _i64(*v):
    return np.array(v, np.int64)


def launch(p: dict, inputs: list, outputs: list) -> PeerLaunch:
    from oracles import qmm as oracle

    E, Tk, N, K, dtype = p["E"], p["T"], p["N"], p["K"], p["dtype"]
    if p["out_dtype"] != dtype:
        raise NotApplicable(f"out_dtype={p['out_dtype']}: MLX's gather_qmv writes the "
                            f"activation type ({dtype})")
    if Tk >= QMV_LIMIT:
        raise NotApplicable(f"T={Tk}: at that many rows a batch GatherQMM runs gather_qmm "
                            f"on some GPUs (get_qmv_batch_limit: {QMV_LIMIT} to 33); this "
                            "peer is its gather_qmv, for T below every limit")
    if p.get("counts", "full") != "full":
        raise NotApplicable("counts=ragged: MLX's gather_qmm takes the routed rows by "
                            "index and has no per-expert count of padded rows to zero")
    if K % GROUP:
        raise NotApplicable(f"K={K}: mxfp4 groups 32 weights of a row")
    x, packed, scales, _counts = inputs
    (y,) = outputs
    w = oracle.dequant_e2m1(packed, scales, GROUP)
    mx_packed, mx_scales, wq = requantize_mxfp4(w)
    fast = N % BN == 0 and K % FAST_K == 0
    func = "fp_gather_qmv_fast" if fast else "fp_gather_qmv"
    t = MSL_TYPES[dtype]
    targs = f"{t}, {GROUP}, 4"
    name = f"mxfp4_{func[3:]}_{dtype}_gs_{GROUP}_b_4"
    words = K // 8                                  # uint32 words of a weight row
    experts = np.arange(E, dtype=np.uint32)

    expected = requantized_expected(x, wq, p, "mxfp4", x_shape=(E, Tk, K))

    # float x_thread[values_per_thread], result[4]: fast 2 packs of 8 values, else 1
    values = 16 if fast else 8
    return PeerLaunch(
        headers=("utils.h", "steel/gemm/gemm.h", "quantized_utils.h", "fp_quantized.h"),
        instantiation=f'template [[host_name("{name}")]] [[kernel]] decltype('
                      f"{func}<{targs}>) {func}<{targs}>;\n",
        kernel=name, grid=(Tk, -(-N // BN), E), threadgroup=(32, 2, 1),
        buffers=[mx_packed, mx_scales, np.zeros(4, np.float32), x, experts, experts.copy(),
                 y, _i32(K), _i32(N),
                 _i32(1), _i32(E, Tk, K), _i64(Tk * K, K, 1),
                 _i32(1), _i32(E, N, words), _i64(N * words, words, 1),
                 _i64(N * (K // GROUP), K // GROUP, 1),
                 _i32(1), _i32(E), _i64(1), _i64(1)],
        outputs=[y], expected=expected,
        host_code=f"{HOST}: GatherQMM::eval_gpu -> gather_qmv",
        geometry=f"{func}: one token row of one expert and 8 weight rows a threadgroup "
                 f"(2 simdgroups x 4 rows, 64 threads), {values} weights a lane per step",
        formats="mxfp4 (e2m1 codes, an e8m0 scale per 32 weights) re-quantized from the "
                "case's e2m1 codes and float16 group-32 scales (not powers of two); the "
                "oracle evaluated on the re-quantized weights",
        local_arrays={"x_thread": 4 * values, "result": 4 * 4})

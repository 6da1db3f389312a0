"""MLX's affine 8-bit quantized matrix-matrix product (quantized.h, `affine_qmm_t_splitk`
+ steel's `gemm_splitk_accum`, or `affine_qmm_t`) as the `mlx-affine` peer of the `qmm_fp8`
family's prefill path (`path: "gemm"`): the weights re-quantized as for the decode peer
(mlx_affine_qmv.py: MLX's `affine_quantize<T, 64, 8>`, codes with a scale and a bias per
64 weights), the launch the mxfp8 qmm's (mlx_qmm.py `plan`: QuantizedMatmul::eval_gpu ->
qmm_splitk, 32 x 32 tiles, about 512 threadgroups) with the affine group of 64: partitions
of whole 64-weight groups (split_k at most K / 64). MLX's loader decodes a weight as
s q + b in float32 and stores it in the activation type; the oracle holds it so.

Buffers (mlx/backend/metal/quantized.cpp `qmm_splitk` and `qmm`: the biases take buffer 2
and shift the later ones; the kernels' own [[buffer]] indices agree): the split kernel
0 w (codes), 1 scales, 2 biases, 3 x, 4 float32 partials, 5 K, 6 N, 7 M, 8 K / split_k,
9 M * N, then `steel_gemm_splitk_accum_<type>_float32` as for mxfp8; `affine_qmm_t<T, 64,
8, aligned_N, false>` 0 w, 1 scales, 2 biases, 3 x, 4 y, 5 K, 6 N, 7 M, 8-15 the batch
shapes and strides (not set for one batch).
"""

from __future__ import annotations

from harness.bench.peers.mlx_affine_qmv import GROUP, requantize_affine8
from harness.bench.peers.mlx_qmm import check_applies, plan
from harness.bench.peers.mlx_qmv import requantized_expected


def launch(p: dict, inputs: list, outputs: list):
    from oracles import qmm as oracle

    check_applies(p, GROUP, "MLX's affine 8-bit format")
    x, codes, scales = inputs
    (y,) = outputs
    w = oracle.dequant_e4m3(codes, scales, p.get("G", 0))
    q, s, b, wq = requantize_affine8(w, p["dtype"])

    # s q + b formed in float32, stored in the activation type
    expected = requantized_expected(x, wq, p, "affine 8-bit", held=p["dtype"])

    formats = (f"MLX affine 8-bit (codes, a {p['dtype']} scale and bias per {GROUP} weights, "
               "w = s q + b) re-quantized as MLX's affine_quantize does from the case's e4m3 "
               "codes and float32 "
               + ("row" if p["scale"] == "row" else f"{p.get('G')} x {p.get('G')} block")
               + " scales; the oracle evaluated on the re-quantized weights")
    return plan(p, "affine", GROUP, [q, s, b], x, y, expected, formats)

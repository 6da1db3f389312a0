"""Oracles of the quantized matmul families (harness/gen/qmm_fp8.py, qmm_fp4.py), in
float64 from the kernel's own inputs: the packed codes are decoded by torch's float8
type (e4m3) or by the e2m1 table of the format definition, scaled, and multiplied.

    quantize_e4m3(w, scale)          codes (uint8) of w / scale, round to nearest
    dequant_e4m3(codes, scales, G)   float64 weights; scales per row (N,) or per G x G
                                     block (ceil(N/G), ceil(K/G))
    quantize_e2m1(w, G)              (packed bytes (..., K/2), float16 scales (..., K/G))
    dequant_e2m1(packed, scales, G)  float64 weights (..., K)
    qmm(x, w)                        x @ w^T in float64, float32 result (+ batch dims)
"""

from __future__ import annotations

import torch

from oracles import bounds

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)   # codes 0..7; 8..15 negative
E4M3_MAX = 448.0
E2M1_MAX = 6.0


def quantize_e4m3(w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return (w.float() / scale.float()).clamp(-E4M3_MAX, E4M3_MAX) \
        .to(torch.float8_e4m3fn).view(torch.uint8)


def expand_blocks(scales: torch.Tensor, G: int, n: int, k: int) -> torch.Tensor:
    """A (ceil(n/G), ceil(k/G)) block grid of scales as an n x k tensor."""
    return scales.repeat_interleave(G, 0)[:n].repeat_interleave(G, 1)[:, :k]


def dequant_e4m3(codes: torch.Tensor, scales: torch.Tensor, G: int = 0) -> torch.Tensor:
    w = codes.view(torch.float8_e4m3fn).double()
    if scales.dim() == 1:
        return w * scales.double()[:, None]
    return w * expand_blocks(scales.double(), G, *w.shape)


def e2m1_table() -> torch.Tensor:
    return torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float64)


def quantize_e2m1(w: torch.Tensor, G: int):
    """Nearest e2m1 codes of w (..., K) with one float16 scale per G elements (absmax/6),
    packed two per byte, element 2j in the low nibble, 2j+1 in the high one."""
    *lead, K = w.shape
    groups = w.double().reshape(*lead, K // G, G)
    scales = (groups.abs().amax(-1) / E2M1_MAX).clamp_min(2.0 ** -14).half()
    q = groups / scales.double()[..., None]
    codes = (q[..., None] - e2m1_table()).abs().argmin(-1).reshape(*lead, K).to(torch.uint8)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed, scales


def dequant_e2m1(packed: torch.Tensor, scales: torch.Tensor, G: int) -> torch.Tensor:
    low, high = (packed & 15).long(), (packed >> 4).long()
    codes = torch.stack((low, high), -1).flatten(-2)
    w = e2m1_table()[codes]
    return w * scales.double().repeat_interleave(G, -1)


def qmm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x @ w^T in float64 (batched over leading dims), float32 result."""
    return (x.double() @ w.double().transpose(-1, -2)).float()


def dequant_bounded(w: torch.Tensor, stored=None) -> bounds.Bounded:
    """Decoded weights (float64 `w`, exact code x scale) as the kernel holds them: the
    product of code and scale rounded in float32, then once more in `stored` (the
    activation dtype) where the kernel stores the scaled weight so."""
    held = bounds.round_to(bounds.exact_input(w), "float32")
    return bounds.round_to(held, stored) if stored else held


def qmm_bounded(x: torch.Tensor, w: bounds.Bounded) -> bounds.Bounded:
    """x @ w^T accumulated in float32, products rounded in float32 (docs/tolerance.md)."""
    return bounds.matmul(bounds.exact_input(x), w.map(lambda t: t.transpose(-1, -2)),
                         "float32", products="float32")

"""Oracles of the normalization kernels: row softmax and RMSNorm, computed in float64 and
rounded once to the result dtype (x's unless `out_dtype` is given).

    softmax(x, dim=-1)                      exp(x - max) / sum(exp(x - max)) along dim
    rmsnorm(x, weight, eps)                 x / sqrt(mean(x^2, last dim) + eps) * weight
    layer_norm(x, weight, bias, eps)        (x - mean) / sqrt(var + eps) * weight + bias
                                            (mean and biased variance over the last dim)
"""

from __future__ import annotations

import torch


def _dtype(x, out_dtype):
    dtype = out_dtype if out_dtype is not None else x.dtype
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


def softmax(x, dim: int = -1, out_dtype=None):
    return torch.softmax(x.double(), dim).to(_dtype(x, out_dtype))


def rmsnorm(x, weight, eps: float = 1e-6, out_dtype=None):
    wide = x.double()
    scale = torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    return (wide * scale * weight.double()).to(_dtype(x, out_dtype))


def layer_norm(x, weight, bias, eps: float = 1e-5, out_dtype=None):
    wide = x.double()
    out = torch.nn.functional.layer_norm(wide, (wide.shape[-1],), weight.double(),
                                         bias.double(), eps)
    return out.to(_dtype(x, out_dtype))

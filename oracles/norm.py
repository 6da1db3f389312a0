"""Oracles of the normalization kernels: row softmax and RMSNorm, computed in float64 and
rounded once to the result dtype (x's unless `out_dtype` is given).

    softmax(x, dim=-1)                      exp(x - max) / sum(exp(x - max)) along dim
    rmsnorm(x, weight, eps)                 x / sqrt(mean(x^2, last dim) + eps) * weight
    layer_norm(x, weight, bias, eps)        (x - mean) / sqrt(var + eps) * weight + bias
                                            (mean and biased variance over the last dim)
"""

from __future__ import annotations

import torch

from oracles import bounds as B


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


# The same computations as `Bounded` values, in the order and the dtype (`acc`, float32)
# the families' kernels compute them, for the forward error bounds of docs/tolerance.md.

def softmax_bounded(x, scale: float = 1.0, acc: str = "float32") -> B.Bounded:
    """exp(x s - max) / sum(exp(x s - max)) along the last dim, each step in `acc`; `x` a
    kernel input or an already `Bounded` value."""
    v = x if isinstance(x, B.Bounded) else B.exact_input(x)
    if scale != 1.0:
        v = B.mul(v, scale, acc)
    shifted = B.sub(v, B.amax(v, -1, keepdim=True), acc)
    e = B.function("exp", shifted, acc)
    return B.div(e, B.total(e, -1, acc, keepdim=True), acc)


def rmsnorm_bounded(x, weight, eps: float, acc: str = "float32") -> B.Bounded:
    """x * rsqrt(sum(x^2) / N + eps) * weight, each step in `acc`."""
    v = B.exact_input(x)
    n = v.shape[-1]
    mean_sq = B.div(B.total(B.mul(v, v, acc), -1, acc, keepdim=True), float(n), acc)
    inv = B.function("rsqrt", B.add(mean_sq, eps, acc), acc)
    return B.mul(B.mul(v, inv, acc), B.exact_input(weight), acc)


def layer_norm_bounded(x, weight, bias, eps: float, acc: str = "float32") -> B.Bounded:
    """(x - mean) * rsqrt(var + eps) * weight + bias (biased variance), each step in `acc`."""
    v = B.exact_input(x)
    n = float(v.shape[-1])
    mean = B.div(B.total(v, -1, acc, keepdim=True), n, acc)
    centred = B.sub(v, mean, acc)
    var = B.div(B.total(B.mul(centred, centred, acc), -1, acc, keepdim=True), n, acc)
    inv = B.function("rsqrt", B.add(var, eps, acc), acc)
    scaled = B.mul(B.mul(centred, inv, acc), B.exact_input(weight), acc)
    return B.add(scaled, B.exact_input(bias), acc)

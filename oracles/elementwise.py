"""Oracles of the elementwise family: binary ops with a cast, computed in float64 (ints in
int64) and rounded once to the result dtype, which is the reference a kernel computing in
its own dtype is measured against (the tolerance policy covers per-op rounding)."""

from __future__ import annotations

import torch

OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "max": torch.maximum,
    "min": torch.minimum,
}


def binary(op: str, a, b, out_dtype: str):
    """`out = cast(op(a, b))` element-wise, exact for integers, float64 for floats."""
    wide = torch.float64 if a.is_floating_point() else torch.int64
    out = OPS[op](a.to(wide), b.to(wide))
    return out.to(getattr(torch, out_dtype))

"""Deterministic kernel inputs from a seed: the same (shape, dtype, seed) always gives the
same tensor, on any machine, so a regression file needs only the seed."""

from __future__ import annotations

import torch


def random_tensor(shape, dtype: str, seed: int, *, low: int = -50, high: int = 50,
                  scale: float = 1.0):
    """Normal floats (times `scale`) or uniform integers in [low, high) (uint8: [0, high))."""
    g = torch.Generator().manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
    t = getattr(torch, dtype)
    if dtype.startswith(("float", "bfloat")):
        return (torch.randn(tuple(shape), generator=g, dtype=torch.float32) * scale).to(t)
    if dtype == "bool":
        return torch.randint(0, 2, tuple(shape), generator=g).bool()
    lo = 0 if dtype.startswith("uint") else low
    return torch.randint(lo, high, tuple(shape), generator=g, dtype=torch.int64).to(t)


def uniform_tensor(shape, dtype: str, seed: int, low: float, high: float):
    """Uniform values in [low, high) rounded to `dtype` (integers: floor of the value), for
    functions with a restricted domain (log, rsqrt) or conversions that need the value
    to fit the target type."""
    g = torch.Generator().manual_seed(int(seed) & 0x7FFF_FFFF_FFFF_FFFF)
    u = torch.rand(tuple(shape), generator=g, dtype=torch.float64) * (high - low) + low
    t = getattr(torch, dtype)
    if dtype.startswith(("float", "bfloat")):
        return u.to(t)
    return u.floor().to(torch.int64).to(t)

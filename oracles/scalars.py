"""Oracle of the scalars family: the kernel's chain of scalar operations on each element,
in float64, rounded once to the result dtype.

Per scalar argument, in signature order (v starts as A[i, j] in float32):
    float32 s   v = v * s
    float16 s   v = v * float(s)
    int32 s     v = v + float(s)
    int64 s     v = v + float(s mod 1000)     (floor modulo, s may exceed 2^32)
    bool s      v = v if s else -v
"""

from __future__ import annotations

import torch


def apply(dtype: str, v, s):
    if dtype in ("float32", "float16"):
        return v * float(s)
    if dtype == "int32":
        return v + float(s)
    if dtype == "int64":
        return v + float(s % 1000)
    return v if s else -v


def scalars(a, scalar_dtypes, values, out_dtype: str):
    v = a.to(torch.float64)
    for dtype, s in zip(scalar_dtypes, values):
        v = apply(dtype, v, s)
    return v.to(getattr(torch, out_dtype))

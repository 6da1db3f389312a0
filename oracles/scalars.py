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

from oracles import bounds as B


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


def scalars_expected(a, scalar_dtypes, values, out_dtype: str) -> B.Expected:
    """`scalars` as an `Expected`: each step one float32 operation (a multiply by the
    scalar, an add of it converted to float32, an exact negation), one rounding on the
    store. Integer results are exact (the float32 chain is exact on the values drawn)."""
    if not out_dtype.startswith(("float", "bfloat")):
        return B.exact(scalars(a, scalar_dtypes, values, out_dtype), out_dtype,
                       "scalar chain, integer result")
    v = B.exact_input(a)
    for dtype, s in zip(scalar_dtypes, values):
        if dtype in ("float32", "float16"):
            v = B.mul(v, float(s), "float32")
        elif dtype in ("int32", "int64"):
            addend = float(s) if dtype == "int32" else float(s % 1000)
            v = B.add(v, B.round_to(B.const(addend), "float32"), "float32")
        elif not s:
            v = B.negate(v)
    return B.expected(v, out_dtype, f"{len(scalar_dtypes)} scalar op(s) in float32")


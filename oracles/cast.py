"""Oracle of the cast family: one conversion, torch's `.to(dtype)` on the CPU.

torch and MSL agree where the conversion is defined: float -> float and int -> float
round to nearest even, float -> int truncates toward zero (for values that fit the
target), int -> narrower int wraps modulo 2^bits, anything -> bool is `x != 0`. The
family draws inputs only where the conversion is defined (no float -> int overflow, no
NaN); `input_range` says where that is.
"""

from __future__ import annotations

import torch

FLOAT_MAX = {"float16": 60000.0, "bfloat16": 1e30, "float32": 1e30}
INT_RANGE = {"int8": (-128, 128), "uint8": (0, 256), "int32": (-2**31, 2**31),
             "int64": (-2**62, 2**62), "bool": (0, 2)}


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def input_range(src: str, dst: str) -> tuple:
    """[low, high) of source values whose conversion `src -> dst` is defined and exercises
    rounding or wrapping: floats into an integer type's range, integers wide enough to
    round in float16/bfloat16/float32 and to wrap in narrower integers."""
    if src == "bool":
        return (0, 2)
    if _is_float(src):
        if dst in ("int8", "uint8", "int32", "int64"):
            lo, hi = INT_RANGE[dst]
            lo, hi = max(lo, -1e6), min(hi, 1e6)
            # trunc(x) must fit: stay one unit inside
            return (max(lo + 1, -FLOAT_MAX[src]), min(hi - 1, FLOAT_MAX[src]))
        return (-64.0, 64.0)
    lo, hi = INT_RANGE[src]
    lo, hi = max(lo, -2**40), min(hi, 2**40)
    if dst == "float16":
        lo, hi = max(lo, -60000), min(hi, 60000)
    return (lo, hi)


def cast(a, dst: str):
    return a.to(getattr(torch, dst))

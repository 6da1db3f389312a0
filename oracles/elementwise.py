"""Oracles of the elementwise family: binary ops and unary math with a cast, computed in
float64 (ints in int64) and rounded once to the result dtype, which is the reference a
kernel computing in its own dtype is measured against (the tolerance policy covers per-op
rounding and fast-math approximations of the transcendental functions)."""

from __future__ import annotations

import torch

from oracles import bounds as B

OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "max": torch.maximum,
    "min": torch.minimum,
}

# Unary math: the function and the input range where it is well-conditioned in half and
# bfloat and the result stays far from overflow (the family draws inputs from it).
UNARY = {
    "exp": (torch.exp, (-4.0, 4.0)),
    "exp2": (torch.exp2, (-6.0, 6.0)),
    "log": (torch.log, (0.25, 8.0)),
    "log2": (torch.log2, (0.25, 8.0)),
    "sqrt": (torch.sqrt, (0.0, 8.0)),
    "rsqrt": (torch.rsqrt, (0.25, 8.0)),
    "abs": (torch.abs, (-8.0, 8.0)),
    "tanh": (torch.tanh, (-4.0, 4.0)),
    "sigmoid": (torch.sigmoid, (-6.0, 6.0)),
}
TRANSCENDENTAL = frozenset(UNARY) - {"abs"}


def binary(op: str, a, b, out_dtype: str):
    """`out = cast(op(a, b))` element-wise, exact for integers, float64 for floats."""
    wide = torch.float64 if a.is_floating_point() else torch.int64
    out = OPS[op](a.to(wide), b.to(wide))
    return out.to(getattr(torch, out_dtype))


def unary(op: str, a, out_dtype: str):
    """`out = cast(op(a))` element-wise; float64 for floats, int64 for integers (abs)."""
    wide = torch.float64 if a.is_floating_point() else torch.int64
    out = UNARY[op][0](a.to(wide))
    return out.to(getattr(torch, out_dtype))


def _computed(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def binary_expected(op: str, a, b, dtype: str, out_dtype: str) -> B.Expected:
    """`binary` as an `Expected`: the op computed in the input `dtype` (one rounding, none
    for max/min), then converted to `out_dtype` (one more)."""
    if not _computed(dtype) and not _computed(out_dtype):
        return B.exact(binary(op, a, b, out_dtype), out_dtype, f"integer {op}")
    x, y = B.exact_input(a), B.exact_input(b)
    if op in ("max", "min"):
        v = (B.maximum if op == "max" else B.minimum)(x, y)
    else:
        v = {"add": B.add, "sub": B.sub, "mul": B.mul}[op](x, y, dtype) if _computed(dtype) \
            else B.exact_input(OPS[op](a.long(), b.long()))
    return B.expected(v, out_dtype, f"{op} in {dtype} -> {out_dtype}")


def unary_expected(op: str, a, dtype: str, out_dtype: str) -> B.Expected:
    """`unary` as an `Expected`: the function evaluated in the input `dtype` (its error,
    oracles/bounds.py FUNCTION_ULPS), then converted to `out_dtype`."""
    if not _computed(dtype) and not _computed(out_dtype):
        return B.exact(unary(op, a, out_dtype), out_dtype, f"integer {op}")
    if not _computed(dtype):
        v = B.exact_input(UNARY[op][0](a.long()))
    else:
        v = B.function(op, B.exact_input(a), dtype)
    return B.expected(v, out_dtype, f"{op} in {dtype} -> {out_dtype}")

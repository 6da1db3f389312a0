"""Oracles of the T.reduce family (core/language/reduce.py), computed in float64 (int32
in int64) and rounded once to the result dtype: what a kernel accumulating in float32
(int32) and rounding once on the store is measured against.

    reduce(x, "sum" | "max" | "min" | "abssum" | "absmax", dim=-1, out=None, out_dtype=None)

`out` is the destination's value before the call for `clear=False` (the reduction is
combined into it: out + sum, max(out, max), ...); `out_dtype` defaults to x's dtype.
The tolerance: `op_class(kind)` (sums accumulate rounding errors, max/min are exact).
"""

from __future__ import annotations

import torch

from oracles import bounds as B

KINDS = ("sum", "max", "min", "abssum", "absmax")


def _wide(t):
    return t.to(torch.float64 if t.is_floating_point() else torch.int64)


def reduce(x, kind: str, dim: int = -1, out=None, out_dtype=None):
    """The reference of `T.reduce_<kind>(x, dst, dim, clear=out is None)`."""
    if kind not in KINDS:
        raise ValueError(f"unknown reduction '{kind}'; known: {KINDS}")
    wide = _wide(x)
    if kind.startswith("abs"):
        wide = wide.abs()
    if kind.endswith("sum"):
        result = wide.sum(dim)
    elif kind.endswith("max"):
        result = wide.amax(dim)
    else:
        result = wide.amin(dim)
    if out is not None:
        old = _wide(out).reshape(result.shape)
        if kind.endswith("sum"):
            result = old + result
        else:
            result = torch.maximum(old, result) if kind.endswith("max") else \
                torch.minimum(old, result)
    dtype = out_dtype if out_dtype is not None else x.dtype
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    return result.to(dtype)


def op_class(kind: str) -> str:
    """The tolerance class (oracles/tolerance.py) of a reduction's result."""
    return "accumulation" if kind.endswith("sum") else "exact"


def reduce_expected(x, kind: str, dim: int = -1, out=None, out_dtype=None,
                    acc: str = "float32") -> B.Expected:
    """`reduce` as an `Expected`: float results with the bound of a sum over the reduced
    length accumulated in `acc` (max and min are exact), integers exactly."""
    dtype = out_dtype if out_dtype is not None else x.dtype
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if not (x.is_floating_point() and dtype.is_floating_point):
        return B.exact(reduce(x, kind, dim, out, out_dtype), dtype, f"integer {kind}")
    v = B.exact_input(x)
    if kind.startswith("abs"):
        v = B.function("abs", v, acc)
    if kind.endswith("sum"):
        r = B.total(v, dim, acc)
    else:
        r = B.amax(v, dim) if kind.endswith("max") else B.amin(v, dim)
    if out is not None:
        old = B.exact_input(out).map(lambda t: t.reshape(r.shape))
        if kind.endswith("sum"):
            r = B.add(old, r, acc)
        else:
            r = (B.maximum if kind.endswith("max") else B.minimum)(old, r)
    return B.expected(r, dtype, f"{kind} over {x.shape[dim]} terms in {acc}")

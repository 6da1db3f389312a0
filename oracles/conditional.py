"""Oracles of the conditional family: stores and selects under a data-dependent
condition, computed in float64 (integers in int64) and rounded once to the dtype.

Every mode's result is a `torch.where` of the condition (A > t, or the mask) between the
value stored when it holds and the value when it does not."""

from __future__ import annotations

import torch

from oracles import bounds as B


def _wide(x):
    return x.to(torch.float64 if x.is_floating_point() else torch.int64)


def conditional(mode: str, a, b, t, mask=None):
    """The expected C of the family's `mode` (harness/gen/conditional.py) for inputs A, B,
    threshold t and (mode "mask") the bool mask."""
    wa, wb = _wide(a), _wide(b)
    cond = mask if mode == "mask" else wa > t
    if mode == "if":                     # C = B; if A > t: C = A * 2
        out = torch.where(cond, wa * 2, wb)
    elif mode == "if_else":              # if A > t: C = A + B else: C = B - A
        out = torch.where(cond, wa + wb, wb - wa)
    elif mode == "relu":                 # F = select(F > t, F, 0) on a fragment
        out = torch.where(cond, wa, torch.zeros_like(wa))
    else:                                # select, mask, shared: C = A if cond else B
        out = torch.where(cond, wa, wb)
    return out.to(a.dtype)


def conditional_expected(mode: str, a, b, t, mask=None) -> B.Expected:
    """`conditional` as an `Expected`: the condition is decided exactly on the inputs;
    A * 2 and the selects are exact, A + B and B - A one rounding in the dtype."""
    if not a.is_floating_point():
        return B.exact(conditional(mode, a, b, t, mask), a.dtype, f"conditional {mode}")
    dtype = a.dtype
    x, y = B.exact_input(a), B.exact_input(b)
    cond = mask if mode == "mask" else x.value > t
    if mode == "if":
        out = B.where(cond, x.same_error(x.value * 2), y)
    elif mode == "if_else":
        out = B.where(cond, B.add(x, y, dtype), B.sub(y, x, dtype))
    elif mode == "relu":
        out = B.where(cond, x, 0.0)
    else:
        out = B.where(cond, x, y)
    return B.expected(out, dtype, f"conditional {mode} in {dtype}")

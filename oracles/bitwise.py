"""Integer bit operations with MSL's semantics, computed in torch int64.

    bitwise(op, a, b, dtype)   op in "and" "or" "xor" "not" "shl" "shr"; a, b tensors of
                               `dtype` (b ignored for "not"); the result has `dtype`

MSL (C++14 rules) evaluates a scalar char/short operation in int and converts the result
back, and takes a shift count modulo the width N of the promoted left operand (N = 32 for
8/16/32-bit scalars, 64 for 64-bit ones): the count's low log2(N) bits, read as unsigned.
Right shifts of signed values are arithmetic (sign-filling), of unsigned ones logical.
torch's own shifts differ for counts >= the width (they give 0 or the sign), hence this
oracle: the operands are widened to int64 (unsigned values zero-extended, uint64 kept as
its bit pattern), the count masked as MSL does, and the result wrapped to `dtype`.
"""

from __future__ import annotations

import numpy as np
import torch

from core.target import DTYPES

OPS = ("and", "or", "xor", "not", "shl", "shr")


def _widen(t: torch.Tensor) -> torch.Tensor:
    """int64 tensor with the value of `t` (the bit pattern for uint64)."""
    if t.dtype == torch.uint64:
        return torch.from_numpy(t.numpy().view(np.int64).copy())
    return torch.from_numpy(t.numpy().astype(np.int64))


def _wrap(t: torch.Tensor, dtype: str) -> torch.Tensor:
    """`t` (int64) reduced modulo 2^bits into `dtype`, as a C++ conversion does."""
    return torch.from_numpy(t.numpy().astype(np.dtype(dtype)))


def shift_width(dtype: str) -> int:
    """N of MSL's shift rule for a scalar of `dtype`: the width after integer promotion."""
    return max(DTYPES[dtype].bits, DTYPES["int32"].bits)


def bitwise(op: str, a: torch.Tensor, b: torch.Tensor | None, dtype: str) -> torch.Tensor:
    dt = DTYPES[dtype]
    if not dt.is_integer:
        raise ValueError(f"bit operations need an integer dtype, got {dtype}")
    x = _widen(a)
    if op == "not":
        return _wrap(~x, dtype)
    y = _widen(b)
    if op in ("and", "or", "xor"):
        return _wrap({"and": x & y, "or": x | y, "xor": x ^ y}[op], dtype)
    count = y & (shift_width(dtype) - 1)
    if op == "shl":
        return _wrap(x << count, dtype)
    if op != "shr":
        raise ValueError(f"unknown bit operation {op!r}; known: {OPS}")
    shifted = x >> count                               # arithmetic on int64
    if dtype == "uint64":                              # logical: clear the copied sign bits
        keep = torch.where(count == 0, torch.full_like(x, -1),
                           (torch.ones_like(x) << (64 - count)) - 1)
        shifted = shifted & keep
    return _wrap(shifted, dtype)

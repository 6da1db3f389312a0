"""Integer bit operations `& | ^ ~ << >>` and TileLang's `T.bitwise_*` / `T.shift_*` on
every integer dtype, on the emulator against the MSL-semantics oracle (oracles/bitwise.py):
narrow types computed in int and converted back, shift counts taken modulo the promoted
width, arithmetic right shifts of signed values."""

import numpy as np
import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from core.target import DTYPES
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor
from oracles.bitwise import bitwise, shift_width

INTEGER = [n for n, d in DTYPES.items() if d.is_integer]
N = 96
BINARY = {"and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
          "shl": lambda a, b: a << b, "shr": lambda a, b: a >> b}
NAMED = {"and": T.bitwise_and, "or": T.bitwise_or, "xor": T.bitwise_xor,
         "shl": T.shift_left, "shr": T.shift_right}


def _full_range(dtype, n, seed):
    """Random bit patterns over the whole range of `dtype` (negative values included)."""
    raw = np.random.default_rng(seed).integers(0, 256, size=n * DTYPES[dtype].bytes,
                                               dtype=np.uint8)
    return torch.from_numpy(raw.view(np.dtype(dtype)).copy())


def _counts(dtype, n, seed, limit):
    return torch.from_numpy(np.random.default_rng(seed).integers(0, limit, size=n)
                            .astype(np.dtype(dtype)))


def _binary_kernel(fn, dtype):
    @T.prim_func
    def k(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                C[i] = fn(A[i], B[i])
    return core.compile(k, out_idx=[-1])


@pytest.mark.parametrize("dtype", INTEGER)
@pytest.mark.parametrize("op", ["and", "or", "xor"])
@pytest.mark.parametrize("spelling", ["operator", "T"])
def test_logical_ops_match_torch(op, dtype, spelling, run):
    fn = BINARY[op] if spelling == "operator" else NAMED[op]
    a, b = _full_range(dtype, N, 1), _full_range(dtype, N, 2)
    out = run(_binary_kernel(fn, dtype), a, b)
    assert_close(out, bitwise(op, a, b, dtype))
    if dtype not in ("uint16", "uint32", "uint64"):     # torch's own ops, where it has them
        assert_close(out, BINARY[op](a, b))


@pytest.mark.parametrize("dtype", INTEGER)
@pytest.mark.parametrize("op", ["shl", "shr"])
def test_shifts_in_range_match_torch(op, dtype, run):
    """Counts below the element width: MSL, torch and the oracle agree (signed right shifts
    fill with the sign)."""
    a, b = _full_range(dtype, N, 3), _counts(dtype, N, 4, DTYPES[dtype].bits)
    out = run(_binary_kernel(BINARY[op], dtype), a, b)
    assert_close(out, bitwise(op, a, b, dtype))
    if dtype not in ("uint16", "uint32", "uint64"):
        assert_close(out, BINARY[op](a, b))


@pytest.mark.parametrize("dtype", INTEGER)
@pytest.mark.parametrize("op", ["shl", "shr"])
def test_shift_counts_wrap_modulo_the_promoted_width(op, dtype, run):
    """Counts up to 4x the promoted width: MSL reads the count's low log2(N) bits, so
    `x << 33` on an int is `x << 1` and `x >> 12` on a char is a full int shift."""
    a = _full_range(dtype, N, 5)
    b = _counts(dtype, N, 6, min(4 * shift_width(dtype), int(np.iinfo(np.dtype(dtype)).max)))
    kernel = _binary_kernel(NAMED[op], dtype)
    assert f"({shift_width(dtype) - 1})" in kernel.msl      # the count is masked
    assert_close(run(kernel, a, b), bitwise(op, a, b, dtype))


@pytest.mark.parametrize("dtype", INTEGER)
def test_not_and_a_packed_nibble_expression(dtype, run):
    """`~`, and the unpacking pattern of packed weights: constant shifts and masks."""
    @T.prim_func
    def k(A: T.Tensor((N,), dtype), B: T.Tensor((N,), dtype), C: T.Tensor((N,), dtype)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(N):
                B[i] = T.bitwise_not(A[i])
                C[i] = ((A[i] >> 4) & 15) | (~A[i] << 6)
    kernel = core.compile(k, out_idx=[1, 2])
    assert "(31)" not in kernel.msl and "(63)" not in kernel.msl   # constant counts: plain
    a = _full_range(dtype, N, 7)
    b, c = run(kernel, a)
    assert_close(b, bitwise("not", a, None, dtype))
    four = torch.full_like(a, 4)
    nib = bitwise("and", bitwise("shr", a, four, dtype), torch.full_like(a, 15), dtype)
    high = bitwise("shl", bitwise("not", a, None, dtype), torch.full_like(a, 6), dtype)
    assert_close(c, bitwise("or", nib, high, dtype))


def test_bool_masks_combine_with_and_or_xor_not(run):
    """`(i < M) & (j < N)`, TileLang's way of writing a 2-D edge mask, on bool operands."""
    M, N = 5, 7

    @T.prim_func
    def k(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8, 8), "float32"),
          C: T.Tensor((8, 8), "bool")):
        with T.Kernel(1, threads=64):
            for i, j in T.Parallel(8, 8):
                if (i < M) & (j < N):
                    B[i, j] = A[i, j]
                else:
                    B[i, j] = 0.0
                C[i, j] = ((A[i, j] > 0) ^ (i < 3)) | ~(j < 2)
    a = random_tensor((8, 8), "float32", 1)
    b, c = run(core.compile(k, out_idx=[1, 2]), a)
    i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]
    assert_close(b, torch.where((i < M) & (j < N), a, 0.0))
    assert_close(c, ((a > 0) ^ (i < 3)) | ~(j < 2))


def test_bit_operations_on_floats_are_rejected_by_name():
    with pytest.raises(KernelDefinitionError, match="T.shift_right needs integer operands"):
        @T.prim_func
        def k(A: T.Tensor((N,), "float32"), C: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(N):
                    C[i] = T.shift_right(A[i], 1)

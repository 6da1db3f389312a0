"""bf16 vectorization (docs/architecture.md, "The target" and "Code generation"): arithmetic in `bfloat2` registers at most, bit
copies and broadcasts of 4- and 8-lane runs through `uint2` / `uint4` carriers, scalar or 2-lane fallbacks
for other widths. Checked in the MSL text, against torch, and in the emulator's counters."""

import re

import pytest
import torch

import core
import core.language as T
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

BF16 = "bfloat16"
OPS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "exp": lambda a, b: T.exp(a)}
TORCH_OPS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b,
             "exp": lambda a, b: torch.exp(a)}


def _bits(shape):
    """bf16 tensors of arbitrary bit patterns (NaN payloads, infinities, subnormals)."""
    return random_tensor(shape, "int16", 1, low=-2**15, high=2**15).view(torch.bfloat16)


def _vectors(msl, base):
    """Lane counts of the MSL vector types of `base` (bfloat -> {2}, ...)."""
    return {int(n) for n in re.findall(rf"\b{base}(\d)\b", msl)}


def make_binary(M, N, op, bM=32, bN=32):
    f = OPS[op]

    @T.prim_func
    def binary(A: T.Tensor((M, N), BF16), B: T.Tensor((M, N), BF16),
               C: T.Tensor((M, N), BF16)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            for i, j in T.Parallel(bM, bN):
                if by * bM + i < M and bx * bN + j < N:
                    C[by * bM + i, bx * bN + j] = f(A[by * bM + i, bx * bN + j],
                                                    B[by * bM + i, bx * bN + j])
    return binary


def make_copy(M, N, bM, bN, through_shared, dst_dtype=BF16):
    @T.prim_func
    def copy(A: T.Tensor((M, N), BF16), B: T.Tensor((M, N), dst_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=64) as (bx, by):
            if through_shared:
                S = T.alloc_shared((bM, bN), BF16)
                T.copy(A[by * bM, bx * bN], S)
                T.copy(S, B[by * bM, bx * bN])
            else:
                T.copy(A[by * bM, bx * bN], B[by * bM:(by + 1) * bM, bx * bN:(bx + 1) * bN])
    return copy


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("shape", [(64, 64), (37, 64), (37, 50)])
def test_arithmetic_in_bfloat2(op, shape, run):
    kernel = core.compile(make_binary(*shape, op), out_idx=[-1])
    a, b = random_tensor(shape, "bfloat16", 2), random_tensor(shape, "bfloat16", 3)
    assert_close(run(kernel, a, b), TORCH_OPS[op](a, b), BF16)
    assert "uint2" not in kernel.msl and _vectors(kernel.msl, "bfloat") <= {2}
    if shape[1] % 32 == 0:  # ragged columns mask each lane: those loops stay scalar
        assert "device bfloat2*" in kernel.msl


@pytest.mark.parametrize("through_shared, N, bN, carrier, align", [
    (True, 96, 32, "uint4", 16),    # a threadgroup tile only copied: 8-lane runs
    (True, 36, 4, "uint2", 8),      # a tile 4 wide: 4-lane runs
    (False, 96, 32, "uint2", 8)])   # device to device: the layout's runs of 4
def test_copy_uses_carrier_bit_exact(through_shared, N, bN, carrier, align, run):
    """A tile copy through threadgroup memory moves 16 bytes (8 bf16 lanes, `uint4`) per
    access where its rows allow 8-lane runs, 8 bytes (`uint2`) where the tile is 4 wide;
    a device-to-device copy keeps the default layout's runs of 4."""
    M = 64
    kernel = core.compile(make_copy(M, N, 16, bN, through_shared), out_idx=[1])
    a = _bits((M, N))
    out = run(kernel, a)
    assert torch.equal(out.view(torch.int16), a.view(torch.int16))
    assert f"*(device {carrier}*)(B + " in kernel.msl
    assert f"*(const device {carrier}*)(A + " in kernel.msl
    assert _vectors(kernel.msl, "bfloat") <= {2}
    assert {b.name: b.align for b in kernel.specs[0].buffers} == {"A": align, "B": align}


@pytest.mark.parametrize("through_shared", [False, True])
def test_ragged_width_falls_back_to_bfloat2(through_shared, run):
    M, N = 40, 6  # runs of 2: a 6-wide tile has no 4-lane run
    kernel = core.compile(make_copy(M, N, 8, N, through_shared), out_idx=[1])
    a = _bits((M, N))
    assert torch.equal(run(kernel, a).view(torch.int16), a.view(torch.int16))
    assert _vectors(kernel.msl, "uint") <= {3} and "device bfloat2*" in kernel.msl  # uint3: tgid


def test_copy_with_cast_or_arithmetic_never_uses_carrier(run):
    M, N = 32, 64
    cast = core.compile(make_copy(M, N, 16, 32, False, dst_dtype="float32"), out_idx=[1])
    a = random_tensor((M, N), "bfloat16", 4)
    assert_close(run(cast, a), a.float())
    assert "uint2" not in cast.msl and "float2(" in cast.msl

    @T.prim_func
    def scale(A: T.Tensor((M, N), BF16), B: T.Tensor((M, N), BF16)):
        with T.Kernel(1, threads=64):
            F = T.alloc_fragment((M, N), BF16)
            T.copy(A, F)
            for i, j in T.Parallel(M, N):
                F[i, j] = F[i, j] * T.cast(2.0, BF16)
            T.copy(F, B)
    kernel = core.compile(scale, out_idx=[1])
    assert_close(run(kernel, a), a * 2, BF16)
    # the copies in and out of the fragment move bits; the multiply stays in registers
    assert "(device uint2*)(B + " in kernel.msl
    assert "uint2" not in next(ln for ln in kernel.msl.splitlines() if " * " in ln
                               and "bfloat" in ln and "F[" in ln)


def test_fill_broadcasts_into_carrier(run):
    M, N = 32, 64

    @T.prim_func
    def fill(B: T.Tensor((M, N), BF16)):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((M, N), BF16)
            T.fill(S, 1.5)
            T.copy(S, B)
    kernel = core.compile(fill, out_idx=[0])
    assert torch.equal(run(kernel), torch.full((M, N), 1.5, dtype=torch.bfloat16))
    assert "uint4(as_type<uint>(bfloat2(" in kernel.msl   # 8 lanes a run


@pytest.mark.backend("emu")  # reads the emulator's counters
@pytest.mark.parametrize("kind", ["copy", "add"])
def test_vectorized_bf16_loads_fewer_ops(kind, run):
    M, N = 64, 64
    func = make_copy(M, N, 16, 32, False) if kind == "copy" else make_binary(M, N, "add")
    args = (_bits((M, N)),) if kind == "copy" else (random_tensor((M, N), "bfloat16", 5),) * 2
    ops = []
    for disable in ((), ("vectorize",)):
        kernel = core.compile(func, out_idx=[-1], disable=disable)
        run(kernel, *args)
        ops.append(kernel.last_run.stats[0]["device_load_ops"])
    assert ops[0] * (4 if kind == "copy" else 2) == ops[1]

"""TileLang dtype objects: T.float16, T.uint32, T.float, T.dtype(...), x.astype(dt)."""

from __future__ import annotations

import re

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError, LaunchError
from core.target import DTYPES
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_dtype_objects_are_their_names(name):
    dt = getattr(T, name)
    assert dt == name and hash(dt) == hash(name) and str(dt) == name
    assert {dt: 1}[name] == 1
    assert dt.bits == DTYPES[name].bits and dt.bytes == max(1, DTYPES[name].bits // 8)
    assert dt.as_torch() is getattr(torch, name)
    assert getattr(torch, str(dt)) is dt.as_torch()
    assert T.dtype(name) is not None and T.dtype(dt) is dt


def test_aliases_and_conversions():
    assert T.float == "float32" and T.half == "float16" and T.int == "int32"
    assert T.long == "int64" and T.uint == "uint32" and T.double == "float64"
    assert T.dtype(torch.bfloat16) == T.bfloat16
    assert T.dtype(float) == "float32" and T.dtype(int) == "int32" and T.dtype(bool) == "bool"
    assert isinstance(T.float16, T.dtype)
    # `in` is a substring test, as for the string (it once looped forever)
    assert "int" in T.int32 and "float" not in T.int32


def test_dtype_literal_and_annotation_kernel(run):
    M = 77   # ragged: not a multiple of the threads

    @T.prim_func
    def scale(A: T.Tensor((M,), T.float16), B: T.Tensor((M,), T.float), n: T.int32,
              s: T.float32):
        with T.Kernel(T.ceildiv(M, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < M:
                    B[bx * 32 + i] = A[bx * 32 + i].astype(T.float32) * s + \
                        T.float32(0.5) + n

    a = random_tensor((M,), "float16", 1)
    out = run(core.compile(scale, out_idx=[1]), a, 3, 1.5)
    assert_close(out, a.double() * 1.5 + 0.5 + 3, "float32")


@pytest.mark.parametrize("src,dst", [("float16", "float32"), ("float32", "bfloat16"),
                                     ("int32", "float32"), ("float32", "int8"),
                                     ("uint8", "int32")])
def test_astype_over_dtypes(run, src, dst):
    M = 100
    sdt, ddt = T.dtype(src), T.dtype(dst)

    @T.prim_func
    def conv(A: T.Tensor((M,), sdt), B: T.Tensor((M,), ddt)):
        with T.Kernel(T.ceildiv(M, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < M:
                    B[bx * 64 + i] = A[bx * 64 + i].astype(ddt)

    if sdt.as_torch().is_floating_point:
        a = (random_tensor((M,), "float32", 2) * 20).to(sdt.as_torch())
    else:
        a = random_tensor((M,), str(sdt), 3, low=0, high=100)
    out = run(core.compile(conv, out_idx=[1]), a)
    expected = a.double().trunc() if not ddt.as_torch().is_floating_point else a.double()
    assert_close(out, expected.to(ddt.as_torch()), dst)


def test_float64_is_rejected_with_reason():
    with pytest.raises(KernelDefinitionError, match="Metal has no 64-bit float"):
        T.Tensor((8,), T.float64)
    with pytest.raises(KernelDefinitionError, match="'float64' is not supported"):
        T.alloc_shared((8,), T.double)


def _scalar_kernel(dtype):
    @T.prim_func
    def k(A: T.Tensor((32,), dtype), B: T.Tensor((32,), dtype), s: getattr(T, dtype)):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(32):
                B[i] = A[i] * s
    return core.compile(k, out_idx=[1])


@pytest.mark.parametrize("dtype,value", [("float16", 1e6), ("float32", 1e40),
                                         ("float16", -7e4)])
def test_float_scalar_that_would_become_inf_is_an_error(dtype, value):
    kernel = _scalar_kernel(dtype)
    a = torch.ones(32, dtype=getattr(torch, dtype))
    with pytest.raises(LaunchError, match=re.escape(f"value {value} does not fit {dtype}")):
        kernel(a, value, backend="emu")


def test_float_scalar_in_range_and_inf_pass(run):
    kernel = _scalar_kernel("float16")
    a = torch.ones(32, dtype=torch.float16)
    assert_close(run(kernel, a, 6e4), torch.full((32,), 6e4).half(), "float16")
    assert bool(torch.isinf(run(kernel, a, float("inf"))).all())


@pytest.mark.parametrize("src,dst", [("uint32", "float32"), ("int16", "int32"),
                                     ("uint16", "float16"), ("float32", "uint32"),
                                     ("uint32", "uint32")])
def test_uint32_int16_uint16_tensors_through_shared_memory(run, src, dst):
    M = 100   # ragged over 64-element tiles
    sdt, ddt = getattr(T, src), getattr(T, dst)

    @T.prim_func
    def k(A: T.Tensor((M,), sdt), B: T.Tensor((M,), ddt)):
        with T.Kernel(T.ceildiv(M, 64), threads=64) as bx:
            S = T.alloc_shared((64,), sdt)
            T.copy(A[bx * 64], S)
            for i in T.Parallel(64):
                if bx * 64 + i < M:
                    B[bx * 64 + i] = T.cast(S[i] * 3, ddt)

    a = random_tensor((M,), "int64", 4, low=0, high=1000).to(sdt.as_torch())  # fits every dst
    out = run(core.compile(k, out_idx=[1]), a)
    # torch has no arithmetic on uint16/uint32: compare in int64 / float64
    expected = a.to(torch.int64) * 3 if not sdt.as_torch().is_floating_point \
        else (a.double() * 3).trunc()
    if ddt.as_torch().is_floating_point:
        assert_close(out.double(), expected.double().to(ddt.as_torch()).double(), dst)
    else:
        assert torch.equal(out.to(torch.int64), expected.to(torch.int64))

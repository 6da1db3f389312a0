"""T.atomic_load / atomic_store / atomic_or (core/language/atomic.py) on the emulator, against
torch.

Loads and stores of int32, uint32 and float32 on device and threadgroup memory (a float32
in threadgroup memory moves as the bits of an atomic_uint), atomic_or collecting one bit
per thread, and the refused forms: other dtypes, memory orders other than relaxed, a tile.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@pytest.mark.parametrize("dtype", ["int32", "uint32", "float32"])
def test_load_and_store_through_threadgroup_and_device_memory(run, dtype):
    n = 128

    @T.prim_func
    def mirror(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            S = T.alloc_shared((n,), dtype)
            T.atomic_store(S[tx], T.atomic_load(A[tx]))
            T.sync_threads()
            B[tx] = T.atomic_load(S[n - 1 - tx], memory_order="relaxed")
            T.atomic_store(C[tx], A[tx], memory_order="relaxed")

    kernel = core.compile(mirror, out_idx=[1, 2])
    for form in ("atomic_load_explicit(", "atomic_store_explicit("):
        assert form in kernel.msl
    if dtype == "float32":
        assert "(threadgroup atomic_uint*)&S[" in kernel.msl
    a = random_tensor((n,), dtype, 1)
    b, c = run(kernel, a)
    assert_close(b, a[torch.arange(n - 1, -1, -1)], op_class="exact",
                 what=f"atomic_load {dtype}")
    assert_close(c, a, op_class="exact", what=f"atomic_store {dtype}")


@pytest.mark.parametrize("dtype", ["int32", "uint32"])
def test_atomic_or_sets_one_bit_per_thread(run, dtype):
    n, groups = 96, 3

    @T.prim_func
    def bits(A: T.Tensor((groups * n,), "int32"), F: T.Tensor((groups, 4), dtype)):
        with T.Kernel(groups, threads=n) as bx:
            tx = T.get_thread_binding()
            if A[bx * n + tx] > 0:
                T.atomic_or(F[bx, tx // 32 + 1], T.cast(T.shift_left(1, tx % 32), dtype))

    kernel = core.compile(bits)
    assert "atomic_fetch_or_explicit(" in kernel.msl
    a = random_tensor((groups * n,), "int32", 2)
    f = torch.zeros((groups, 4), dtype=getattr(torch, dtype))
    run(kernel, a, f)
    expect = torch.zeros((groups, 4), dtype=torch.int64)
    for t in range(groups * n):
        if a[t] > 0:
            expect[t // n, (t % n) // 32 + 1] |= 1 << (t % 32)
    assert_close(f.to(torch.int64) & 0xFFFFFFFF, expect, what=f"atomic_or {dtype}")


def _define(body, dtype="int32"):
    @T.prim_func
    def bad(A: T.Tensor((64,), dtype)):
        with T.Kernel(1, threads=64):
            body(A)
    return bad


@pytest.mark.parametrize("body,dtype,match", [
    (lambda A: T.atomic_store(A[0], T.atomic_load(A[1], memory_order="seq_cst")), "int32",
     r"T.atomic_load.*memory_order='seq_cst': MSL atomics are relaxed only"),
    (lambda A: T.atomic_store(A[0], 1, memory_order="release"), "int32",
     r"T.atomic_store.*memory_order='release'"),
    (lambda A: T.atomic_store(A[0], 1.0), "float16",
     r"T.atomic_store.*dtype float16: MSL's atomic_load/atomic_store take 32-bit"),
    (lambda A: T.atomic_or(A[0], 1), "float32",
     r"T.atomic_or.*dtype float32; MSL's atomic_fetch_or takes int32, uint32"),
    (lambda A: T.atomic_or(A, A), "int32", r"T.atomic_or.*updates one element"),
])
def test_refused_uses_name_the_construct(body, dtype, match):
    with pytest.raises(KernelDefinitionError, match=match):
        _define(body, dtype)

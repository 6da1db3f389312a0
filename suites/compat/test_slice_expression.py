"""`B[0:N] = A[0:N] * 2`: an element-wise expression over buffer slices stored to a slice
(core/language/slice_store.py), as TileLang reads it, in prim_func bodies and in eager
@core.jit kernels alike; a T.Parallel over the target's sliced extents, results against
torch with every emulator check on; slices that do not match are errors naming both."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@T.prim_func
def doubled(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
    with T.Kernel(1, threads=64):
        B[0:64] = A[0:64] * 2


@T.prim_func
def shifted_rows(A: T.Tensor((8, 40), "float16"), C: T.Tensor((40,), "float16"),
                 B: T.Tensor((8, 32), "float16")):
    with T.Kernel(8, threads=32) as bx:
        B[bx, 0:32] = A[bx, 8:40] + C[0:32] * T.float16(0.5)


@T.prim_func
def through_shared(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16, 16), "float32")):
    with T.Kernel(1, threads=128):
        S = T.alloc_shared((16, 16), "float32")
        S[0:16, 0:16] = A[0:16, 0:16] - 1.0
        B[0:16, 0:16] = T.exp(S[0:16, 0:16]) + S[0:16, 0:16]


def test_one_dim(run):
    a = random_tensor((64,), "float32", 1)
    assert_close(run(core.compile(doubled, out_idx=[1]), a), a * 2, "float32")


def test_offset_slices_and_a_fixed_index(run):
    a, c = random_tensor((8, 40), "float16", 2), random_tensor((40,), "float16", 3)
    want = a.double()[:, 8:40] + c.double()[0:32] * 0.5
    assert_close(run(core.compile(shifted_rows, out_idx=[2]), a, c), want, "float16")


def test_two_dims_through_threadgroup_memory(run):
    a = random_tensor((16, 16), "float32", 4)
    s = a.double() - 1.0
    assert_close(run(core.compile(through_shared, out_idx=[1]), a), s.exp() + s, "float32")


@T.prim_func
def accumulated(A: T.Tensor((4, 64), "float32"), B: T.Tensor((64,), "float32")):
    with T.Kernel(1, threads=64):
        B[0:64] = A[0, 0:64] * 2.0
        for r in T.serial(1, 4):
            B[0:64] += A[r, 0:64] * T.float32(r + 1)


def test_augmented_stores_to_a_slice(run):
    a = random_tensor((4, 64), "float32", 8)
    want = (a.double() * torch.arange(1, 5, dtype=torch.float64)[:, None]).sum(0) + a.double()[0]
    assert_close(run(core.compile(accumulated, out_idx=[1]), a), want, "float32",
                 reduction_length=4, op_class="accumulation")


def test_slices_must_match_one_by_one():
    with pytest.raises(KernelDefinitionError) as info:
        @T.prim_func
        def bad(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=8):
                B[0:8] = A[0:8, 0:8] * 2.0
    assert "a slice of the value has 2 sliced dims, the target 'B' 1" in str(info.value)


def test_value_slices_must_have_the_target_extents():
    with pytest.raises(KernelDefinitionError, match=r"the value's slice of 'A' has extent 32 "
                                                    r"in its sliced dim 0, the target 'B' 64"):
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                B[0:64] = A[0:32] * 2.0


# ---- eager (@core.jit) kernels: the same stores, traced as Python ------------------------

@core.jit
def eager_doubled(A, B):
    A: T.Tensor((64,), "float32")
    B: T.Tensor((64,), "float32")
    with T.Kernel(1, threads=64) as bx:  # noqa: F841 - the launch, as TileLang writes it
        B[0:64] = A[0:64] * 2


@core.jit
def eager_mixed(A, C, B, scale: T.float32):
    """A sum of two slices at offsets, unary math, a cast and a runtime scalar, then an
    augmented store to the same slice."""
    A: T.Tensor((8, 40), "float16")
    C: T.Tensor((40,), "float32")
    B: T.Tensor((8, 32), "float32")
    with T.Kernel(8, threads=32) as bx:
        B[bx, 0:32] = T.exp(T.Cast("float32", A[bx, 8:40])) + C[0:32] * scale
        B[bx, 0:32] += -C[8:40]


@core.jit
def eager_to_half(A):
    M = 16
    A: T.Tensor((M, M), "float32")
    out = T.empty((M, M), "float16")
    with T.Kernel(1, threads=128) as bx:  # noqa: F841 - the launch, as TileLang writes it
        S = T.alloc_shared((M, M), "float32")
        S[0:M, 0:M] = A[0:M, 0:M] - 1.0
        out[0:M, 0:M] = (T.abs(S[0:M, 0:M]) * 0.5).astype("float16")
    return out


def test_eager_slice_times_a_constant(backend):
    a = random_tensor((64,), "float32", 0)
    b = torch.zeros(64)
    eager_doubled(a, b, backend=backend)
    assert_close(b, a.double() * 2, "float32")


def test_eager_offsets_math_casts_and_an_augmented_store(backend):
    a, c = random_tensor((8, 40), "float16", 5), random_tensor((40,), "float32", 6)
    b = torch.zeros(8, 32)
    eager_mixed(a, c, b, 0.75, backend=backend)
    want = a.double()[:, 8:40].exp() + c.double()[0:32] * 0.75 - c.double()[8:40]
    assert_close(b, want, "float32")


def test_eager_two_dims_through_threadgroup_memory_into_a_half_output(backend):
    a = random_tensor((16, 16), "float32", 7)
    out = eager_to_half(a, backend=backend)
    assert_close(out, ((a.double() - 1.0).abs() * 0.5), "float16")


def test_an_eager_slice_of_another_extent_is_a_clear_error():
    """The error names the kernel, the user's line and both extents."""
    @core.jit
    def mismatched(A, B):
        A: T.Tensor((64,), "float32")
        B: T.Tensor((64,), "float32")
        with T.Kernel(1, threads=64) as bx:  # noqa: F841 - the launch, as TileLang writes it
            B[0:64] = A[0:32] * 2

    a = random_tensor((64,), "float32", 0)
    with pytest.raises(KernelDefinitionError,
                       match=r"kernel 'mismatched', line \d+: B\[0:64\] = A\[0:32\] \* 2: "
                             r"the value's slice of 'A' has extent 32 in its sliced dim 0, "
                             r"the target 'B' 64"):
        mismatched(a, a.clone(), backend="emu")


def test_eager_arithmetic_on_a_slice_outside_a_store_is_a_clear_error():
    """`x = A[0:64] * 2` computes with a region before any store sees it: still the
    KernelDefinitionError naming the line, not TVM's TypeError."""
    @core.jit
    def held(A, B):
        A: T.Tensor((64,), "float32")
        B: T.Tensor((64,), "float32")
        with T.Kernel(1, threads=64) as bx:  # noqa: F841 - the launch, as TileLang writes it
            x = A[0:64] * 2
            B[0:64] = x

    a = random_tensor((64,), "float32", 0)
    with pytest.raises(KernelDefinitionError,
                       match=r"kernel 'held', line \d+: +x = A\[0:64\] \* 2: computes with "
                             r"a buffer slice .*outside a store to a slice"):
        held(a, a.clone(), backend="emu")

"""`B[0:N] = A[0:N] * 2`: an element-wise expression over buffer slices stored to a slice
(core/language/slice_store.py), as TileLang reads it; a T.Parallel over the target's
sliced extents, results against torch with every emulator check on."""

from __future__ import annotations

import pytest

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


def test_slices_must_match_one_by_one():
    with pytest.raises(KernelDefinitionError) as info:
        @T.prim_func
        def bad(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=8):
                B[0:8] = A[0:8, 0:8] * 2.0
    assert "a slice of the value has 2 sliced dims, the target 'B' 1" in str(info.value)


def test_an_eager_kernel_computing_with_a_slice_is_a_clear_error():
    """In an eager kernel Python evaluates `A[0:N] * 2` before the store sees it; the answer
    is a KernelDefinitionError naming the kernel and the user's line, not TVM's TypeError."""
    @core.jit
    def doubled(A, B):
        A: T.Tensor((64,), "float32")
        B: T.Tensor((64,), "float32")
        with T.Kernel(1, threads=64) as bx:  # noqa: F841 - the launch, as TileLang writes it
            B[0:64] = A[0:64] * 2

    a = random_tensor((64,), "float32", 0)
    with pytest.raises(KernelDefinitionError,
                       match=r"kernel 'doubled', line \d+: B\[0:64\] = A\[0:64\] \* 2: "
                             r"computes with a buffer slice.*T\.Parallel"):
        doubled(a, a.clone(), backend="emu")

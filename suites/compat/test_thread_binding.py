"""T.get_thread_binding / T.get_block_binding / T.get_thread_extent inside T.Kernel."""

from __future__ import annotations

import pytest

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def test_thread_and_block_bindings(run):
    M, N = 37, 29   # ragged for 8 x 4 threads

    @T.prim_func
    def k(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, 8), T.ceildiv(M, 4), threads=(8, 4)):
            tx = T.get_thread_binding(0)
            ty = T.get_thread_binding(1)
            bx, by = T.get_block_binding(0), T.get_block_binding(1)
            i = by * T.get_thread_extent(1) + ty
            j = bx * T.get_thread_extent(0) + tx
            if i < M and j < N:
                B[i, j] = A[i, j] + T.get_thread_binding(2)

    a = random_tensor((M, N), "float32", 1)
    assert_close(run(core.compile(k, out_idx=[1]), a), a, "float32")


def test_thread_binding_errors():
    with pytest.raises(KernelDefinitionError, match="T.get_thread_binding.*inside a `with T"):
        T.get_thread_binding(0)
    with pytest.raises(KernelDefinitionError, match="dim=3 is not allowed"):
        @T.prim_func
        def k(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                A[T.get_thread_binding(3)] = 0.0

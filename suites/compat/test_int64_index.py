"""int32 indices compared with int64 symbolic dims (promoted, as plain TVM does)."""

from __future__ import annotations

import pytest

import core
import core.language as T
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@pytest.mark.parametrize("L", [100, 64])
def test_int32_index_against_int64_dim(run, L):
    n = T.dynamic("L", "int64")

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < n:
                    B[bx * 64 + i] = A[bx * 64 + i] * 2.0

    a = random_tensor((L,), "float32", 1)
    assert_close(run(core.compile(k, out_idx=[1]), a), a.double() * 2, "float32")


@pytest.mark.parametrize("L", [100, 256])
def test_int32_indices_compare_with_int64_dim_on_a_constant_grid(run, L):
    n = T.dynamic("L", "int64")

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
          C: T.Tensor((n,), "float32")):
        with T.Kernel(4, threads=64) as bx:   # int32 block index, int64 length
            for i in T.Parallel(64):
                if bx * 64 + i < n:
                    B[bx * 64 + i] = A[bx * 64 + i] + 1.0
            j = T.alloc_var("int32")
            j = bx * 64 + T.get_thread_binding()
            if j != n and j < n and not (j >= n or n <= j):
                C[j] = A[j] * 3.0

    a = random_tensor((L,), "float32", 2)
    b, c = run(core.compile(k, out_idx=[1, 2]), a)
    assert_close(b, a.double() + 1, "float32")
    assert_close(c, a.double() * 3, "float32")

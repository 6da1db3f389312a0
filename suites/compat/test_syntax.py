"""TileLang syntax forms: T.transpose, T.Tensor[...], trace-time Python values in control
flow, T.serial/T.unroll with steps, T.get_thread_binding, int32/int64 index arithmetic."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_close

import core
import core.language as T
from core.language.errors import KernelDefinitionError


@pytest.mark.parametrize("M,N,dtype", [(24, 40, "float16"), (17, 9, "float32"),
                                       (8, 64, "bfloat16")])
def test_transpose_through_shared_tiles(run, M, N, dtype):
    @T.prim_func
    def tr(A: T.Tensor[(M, N), dtype], B: T.Tensor[(N, M), dtype]):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((M, N), dtype)
            D = T.alloc_shared((N, M), dtype)
            T.copy(A, S)
            T.transpose(S, D)
            T.copy(D, B)

    a = torch.randn(M, N).to(getattr(torch, dtype))
    assert torch.equal(run(core.compile(tr, out_idx=[1]), a), a.T.contiguous())


def test_transpose_of_a_tile_of_a_larger_buffer(run):
    M, N, b = 40, 24, 8

    @T.prim_func
    def tiles(A: T.Tensor((M, N), "float32"), B: T.Tensor((N, M), "float32")):
        with T.Kernel(T.ceildiv(N, b), T.ceildiv(M, b), threads=64) as (bx, by):
            S = T.alloc_shared((b, b), "float32")
            D = T.alloc_shared((b, b), "float32")
            T.copy(A[by * b, bx * b], S)
            T.transpose(S, D)
            T.copy(D, B[bx * b, by * b])

    a = torch.randn(M, N)
    assert torch.equal(run(core.compile(tiles, out_idx=[1]), a), a.T.contiguous())


def test_transpose_errors():
    with pytest.raises(KernelDefinitionError, match="T.transpose.*'local.fragment' memory"):
        @T.prim_func
        def frag(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32):
                F = T.alloc_fragment((8, 8), "float32")
                S = T.alloc_shared((8, 8), "float32")
                T.transpose(F, S)
    with pytest.raises(KernelDefinitionError, match=r"extents \[8, 16\] .* \[8, 16\]"):
        @T.prim_func
        def shape(A: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32):
                S = T.alloc_shared((8, 16), "float32")
                D = T.alloc_shared((8, 16), "float32")
                T.transpose(S, D)


@pytest.mark.parametrize("double", [True, False])
def test_python_values_decide_control_flow_at_trace_time(run, double):
    M = 50

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(M):
                B[i] = A[i] * 2.0 if double else A[i] + 1.0
            if double:
                for i in T.Parallel(M):
                    B[i] = B[i] + 0.25

    a = torch.randn(M)
    out = run(core.compile(k, out_idx=[1]), a)
    assert_close(out, a.double() * 2 + 0.25 if double else a.double() + 1, "float32")


def test_ternary_on_a_kernel_value_is_a_select(run):
    M = 40

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(M):
                B[i] = A[i] if i < 13 else 0.0

    a = torch.randn(M)
    expected = torch.where(torch.arange(M) < 13, a, torch.zeros(M))
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float32")


def test_serial_and_unroll_with_steps(run):
    M = 60

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            for i in T.serial(tx * 2, M, 64):
                for r in T.unroll(0, 2, 1):
                    B[i + r] = A[i + r] * 3.0
            for j in T.Unroll(tx * 2, tx * 2 + 2, 2):   # this thread's even element
                if j < M:
                    B[j] = B[j] + 1.0

    a = torch.randn(M)
    expected = a.double() * 3
    expected[0::2] += 1
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float32")


def test_non_positive_step_is_an_error():
    with pytest.raises(KernelDefinitionError, match="T.serial.*loop step 0 is not positive"):
        @T.prim_func
        def k(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                for i in T.serial(0, 8, 0):
                    A[i] = 0.0


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

    a = torch.randn(M, N)
    assert_close(run(core.compile(k, out_idx=[1]), a), a, "float32")


def test_thread_binding_errors():
    with pytest.raises(KernelDefinitionError, match="T.get_thread_binding.*inside a `with T"):
        T.get_thread_binding(0)
    with pytest.raises(KernelDefinitionError, match="dim=3 is not allowed"):
        @T.prim_func
        def k(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                A[T.get_thread_binding(3)] = 0.0


@pytest.mark.parametrize("L", [100, 64])
def test_int32_index_against_int64_dim(run, L):
    n = T.dynamic("L", "int64")

    @T.prim_func
    def k(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 64), threads=64) as bx:
            for i in T.Parallel(64):
                if bx * 64 + i < n:
                    B[bx * 64 + i] = A[bx * 64 + i] * 2.0

    a = torch.randn(L)
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

    a = torch.randn(L)
    b, c = run(core.compile(k, out_idx=[1, 2]), a)
    assert_close(b, a.double() + 1, "float32")
    assert_close(c, a.double() * 3, "float32")

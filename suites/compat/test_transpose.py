"""T.transpose of threadgroup tiles (dst[j, i] = src[i, j]), with T.Tensor[...] signatures."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.gen.inputs import random_tensor


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

    a = random_tensor((M, N), dtype, 1)
    assert torch.equal(run(core.compile(tr, out_idx=[1]), a), a.T.contiguous())


def test_tensor_subscript_of_extents_only_is_float32(run):
    """`T.Tensor[M, N]` (no dtype) annotates a float32 tensor of shape (M, N)."""
    M, N = 16, 8

    @T.prim_func
    def tr(A: T.Tensor[M, N], B: T.Tensor[N, M]):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((M, N), "float32")
            D = T.alloc_shared((N, M), "float32")
            T.copy(A, S)
            T.transpose(S, D)
            T.copy(D, B)

    a = random_tensor((M, N), "float32", 2)
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

    a = random_tensor((M, N), "float32", 2)
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

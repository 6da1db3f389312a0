"""T.view / T.reshape (core/language/view.py, pass resolve_views): a new buffer over the
same data, against torch's view / reshape.

Threadgroup views read by other threads than wrote the source (the barrier planner must
see the alias), stores through a view, per-thread and device views, dtype views of the
same width (bits reinterpreted), a view of a view, and the refused forms: fragment views,
a dtype of another width, a shape of another size.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def test_shared_reshape_read_across_threads(run):
    @T.prim_func
    def transpose_view(A: T.Tensor((64,), "float32"), B: T.Tensor((4, 16), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            S = T.alloc_shared((64,), "float32")
            S[tx] = A[tx]
            V = T.reshape(S, (16, 4))
            for i, j in T.Parallel(4, 16):
                B[i, j] = V[j, i]

    kernel = core.compile(transpose_view, out_idx=[1])
    assert "threadgroup_barrier" in kernel.msl
    a = random_tensor((64,), "float32", 1)
    assert_close(run(kernel, a), a.view(16, 4).T, op_class="exact", what="reshape")


def test_store_through_a_view(run):
    @T.prim_func
    def through(A: T.Tensor((8, 8), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((64,), "float32")
            V = T.view(S, (8, 8))
            for i, j in T.Parallel(8, 8):
                V[j, i] = A[i, j] + 1.0
            T.copy(S, B)

    kernel = core.compile(through, out_idx=[1])
    a = random_tensor((8, 8), "float32", 2)
    assert_close(run(kernel, a), (a.T + 1.0).reshape(64), op_class="exact",
                 what="store through view")


def test_dtype_views_reinterpret_the_bits(run):
    @T.prim_func
    def bits(A: T.Tensor((64,), "float32"), H: T.Tensor((32,), "float16"),
             B: T.Tensor((64,), "int32"), C: T.Tensor((64,), "int32"),
             D: T.Tensor((32,), "int16")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            S = T.alloc_shared((64,), "float32")
            T.copy(A, S)
            T.copy(T.view(S, dtype="int32"), B)           # threadgroup view
            Ai = T.view(A, (8, 8), "int32")                 # device view
            C[tx] = Ai[tx // 8, tx % 8]
            Hs = T.alloc_shared((32,), "float16")
            T.copy(H, Hs)
            D16 = T.view(Hs, (4, 8), T.int16)
            for i, j in T.Parallel(4, 8):
                D[i * 8 + j] = D16[i, j]

    kernel = core.compile(bits, out_idx=[2, 3, 4])
    a = random_tensor((64,), "float32", 3)
    h = random_tensor((32,), "float16", 4)
    b, c, d = run(kernel, a, h)
    assert_close(b, a.view(torch.int32), op_class="exact", what="shared dtype view")
    assert_close(c, a.view(torch.int32), op_class="exact", what="device dtype view")
    assert_close(d, h.view(torch.int16), op_class="exact", what="half as int16")


def test_device_reshape_copy_stays_vectorized(run):
    @T.prim_func
    def dev(A: T.Tensor((256,), "float32"), B: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((16, 16), "float32")
            T.copy(T.reshape(A, (16, 16)), S)
            for i, j in T.Parallel(16, 16):
                B[i, j] = S[j, i]

    kernel = core.compile(dev, out_idx=[1])
    assert "float4" in kernel.msl
    a = random_tensor((256,), "float32", 5)
    assert_close(run(kernel, a), a.view(16, 16).T, op_class="exact", what="device reshape")


def test_local_view_and_view_of_a_view(run):
    @T.prim_func
    def local(A: T.Tensor((64, 8), "float32"), B: T.Tensor((64, 8), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            L = T.alloc_local((8,), "float32")
            for k in T.serial(8):
                L[k] = A[tx, k]
            L2 = T.reshape(L, (2, 4))
            L3 = T.view(L2, (4, 2))
            for k in T.serial(8):
                B[tx, k] = L2[k % 2, k // 2] * 10.0 + L3[k // 2, k % 2]

    kernel = core.compile(local, out_idx=[1])
    a = random_tensor((64, 8), "float32", 6)
    perm = [(k % 2) * 4 + k // 2 for k in range(8)]
    assert_close(run(kernel, a), a[:, perm] * 10.0 + a, op_class="elementwise",
                 what="local views")


def test_fragment_views_are_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.view.*'F' is a fragment"):
        @T.prim_func
        def frag(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                F = T.alloc_fragment((64,), "float32")
                T.copy(A, F)
                T.copy(T.view(F, (8, 8)), A)


def test_a_dtype_of_another_width_is_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.view.*same width"):
        @T.prim_func
        def wide(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                S = T.alloc_shared((64,), "float32")
                T.copy(A, S)
                T.view(S, (128,), "float16")


def test_a_shape_of_another_size_is_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.reshape.*holds 48 elements"):
        @T.prim_func
        def size(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                S = T.alloc_shared((64,), "float32")
                T.copy(A, S)
                T.reshape(S, (6, 8))

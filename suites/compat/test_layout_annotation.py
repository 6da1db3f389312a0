"""T.annotate_layout and fragment indexing beyond the loop variables, as TileLang's Metal
kernels write them, on the emulator with every check, against torch.

Layouts on threadgroup and device buffers are checked (shape, bijection) and leave the
buffers row-major (core/language/layout.py): results are those of the logical indices.
Fragment layouts are metaltile's own and an annotation of one is a clear error.
"""

import pytest
import torch

import core
from core.errors import KernelDefinitionError, LoweringError
import core.language as T
from core import layout as tl_layout
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def test_swizzled_shared_tiles_in_a_gemm(run):
    M, N, K, bM, bN, bK = 40, 24, 32, 16, 16, 16

    @T.prim_func
    def gemm(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_shared = T.alloc_shared((bM, bK), "float16")
            B_shared = T.alloc_shared((bK, bN), "float16")
            C_local = T.alloc_fragment((bM, bN), "float32")
            T.annotate_layout({A_shared: tl_layout.make_swizzled_layout(A_shared),
                               B_shared: T.make_swizzled_layout(B_shared)})
            T.clear(C_local)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[by * bM, ko * bK], A_shared)
                T.copy(B[ko * bK, bx * bN], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * bM, bx * bN])

    a, b = random_tensor((M, K), "float16", 1), random_tensor((K, N), "float16", 2)
    c = run(core.compile(gemm, out_idx=[2]), a, b)
    assert_close(c, a.double() @ b.double(), dtype="float16", reduction_length=K,
                 op_class="accumulation")


def dq_layout(dQ):
    """Flash-attention backward's atomic-friendly order of dQ (L, D), in our words: 8 x 8
    blocks, and within a block the rows interleaved."""
    return T.Layout(dQ.shape, lambda l, d: [l // 8, d // 8, (d % 2), 4 * (l % 8) + (d % 8) // 2])


def test_device_buffer_layout_shared_by_two_kernels(run):
    """dQ accumulated with atomics under a T.Layout, converted by a second kernel that
    annotates it alike (TileLang's flash attention backward pattern): the result is the
    logical sum."""
    L, D, parts = 16, 16, 3

    @T.prim_func
    def accumulate(X: T.Tensor((parts, L, D), "float32"), dQ: T.Tensor((L, D), "float32"),
                   Out: T.Tensor((L, D), "float16")):
        with T.Kernel(parts, threads=64) as bp:
            T.annotate_layout({dQ: dq_layout(dQ)})
            for i, j in T.Parallel(L, D):
                T.atomic_add(dQ[i, j], X[bp, i, j])
        with T.Kernel(1, threads=64):
            T.annotate_layout({dQ: dq_layout(dQ)})
            T.copy(dQ, Out)

    x = random_tensor((parts, L, D), "float32", 3)
    dq = torch.zeros(L, D)
    out = run(core.compile(accumulate, out_idx=[2]), x, dq)
    assert_close(out, x.double().sum(0), dtype="float16", reduction_length=parts,
                 op_class="accumulation")


@pytest.mark.parametrize("annotation, message", [
    (lambda x, s, f: {f: T.make_swizzled_layout(f)}, "is a local.fragment buffer"),
    (lambda x, s, f: {s: T.Fragment((8, 8), lambda i, j: (i, j))}, "is not a T.Layout"),
    (lambda x, s, f: {s: T.Layout((8, 8), lambda i, j: (i // 2, j))},
     "onto 32 places; a layout must be a bijection"),
    (lambda x, s, f: {s: T.Layout((8, 4), lambda i, j: (i, j))}, "the shapes must match"),
])
def test_layout_errors(annotation, message):
    def build():
        @T.prim_func
        def bad(X: T.Tensor((8, 8), "float32"), Y: T.Tensor((8, 8), "float32")):
            with T.Kernel(1, threads=32):
                s = T.alloc_shared((8, 8), "float32")
                f = T.alloc_fragment((8, 8), "float32")
                T.annotate_layout(annotation(X, s, f))
                T.copy(X, s)
                T.copy(s, f)
                T.copy(f, Y)
        return core.compile(bad, out_idx=[1])

    with pytest.raises(KernelDefinitionError, match=message) as err:
        build()
    assert "T.annotate_layout" in str(err.value)


def test_a_layout_of_another_symbolic_dim_is_refused():
    """Two different symbolic dims may differ at run time, so a layout written for one does not
    annotate a buffer of the other."""
    M, K = T.dynamic("M"), T.dynamic("K")

    def build():
        @T.prim_func
        def scale(A: T.Tensor((M, 8), "float32"), B: T.Tensor((M, 8), "float32")):
            with T.Kernel(T.ceildiv(M, 4), threads=32) as bx:
                T.annotate_layout({A: T.Layout((K, 8), lambda i, j: (i, j))})
                for i, j in T.Parallel(4, 8):
                    if bx * 4 + i < M:
                        B[bx * 4 + i, j] = A[bx * 4 + i, j] * 2.0
        return core.compile(scale, out_idx=[1])

    with pytest.raises(KernelDefinitionError, match=r"T.Layout of shape \(K, 8\) annotates "
                                                    r"buffer 'A' of shape \(M, 8\)"):
        build()


# ---- fragment indexing beyond the loop variables ----------------------------------------

def test_layout_of_a_device_buffer_with_a_symbolic_dim(run):
    """A layout of a buffer whose length is symbolic is accepted (its bijection cannot be
    enumerated) and, like every layout, leaves the logical results."""
    M, N = T.dynamic("M"), 8

    @T.prim_func
    def scale(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(M, 4), threads=32) as bx:
            T.annotate_layout({A: T.make_swizzled_layout(A)})
            for i, j in T.Parallel(4, N):
                if bx * 4 + i < M:
                    B[bx * 4 + i, j] = A[bx * 4 + i, j] * 2.0

    a = random_tensor((10, N), "float32", 3)
    assert torch.equal(run(core.compile(scale, out_idx=[1]), a), a * 2)


def test_constant_index_of_a_one_element_fragment(run):
    """`mx[0]` inside T.Parallel(N): a (1,) reduction result, held by every thread."""
    N = 96

    @T.prim_func
    def softmax1d(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((N,), "float32")
            mx = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X, x)
            T.reduce_max(x, mx, dim=0)
            for i in T.Parallel(N):
                x[i] = T.exp(x[i] - mx[0])
            T.reduce_sum(x, s, dim=0)
            for i in T.Parallel(N):
                x[i] = x[i] / s[0]
            T.copy(x, Y)

    x = random_tensor((N,), "float32", 4)
    y = run(core.compile(softmax1d, out_idx=[1]), x)
    assert_close(y, torch.softmax(x.double(), 0), reduction_length=N,
                 op_class="transcendental")


def test_lower_rank_writes_in_a_unit_parallel(run):
    """`acc[j]` inside T.Parallel(1, D), accumulated over a serial loop (TileLang's
    decode kernels), and read back in T.Parallel(D)."""
    R, D = 5, 48

    @T.prim_func
    def colsum(X: T.Tensor((R, D), "float32"), Y: T.Tensor((D,), "float32")):
        with T.Kernel(1, threads=32):
            acc = T.alloc_fragment((D,), "float32")
            T.clear(acc)
            for r in T.serial(R):
                for i, j in T.Parallel(1, D):
                    acc[j] = acc[j] + X[r + i, j]
            for j in T.Parallel(D):
                acc[j] = acc[j] * 0.5
            T.copy(acc, Y)

    x = random_tensor((R, D), "float32", 5)
    y = run(core.compile(colsum, out_idx=[1]), x)
    assert_close(y, x.double().sum(0) * 0.5, reduction_length=R, op_class="accumulation")


def test_a_write_in_another_layout_is_a_clear_error():
    @T.prim_func
    def two_layouts(X: T.Tensor((4, 32), "float32"), Y: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32):
            a = T.alloc_fragment((4, 32), "float32")
            acc = T.alloc_fragment((32,), "float32")
            T.copy(X, a)
            T.clear(acc)
            for i, j in T.Parallel(4, 32):
                a[i, j] = a[i, j] * 2.0
                acc[j] = a[i, j]
            T.copy(acc, Y)

    with pytest.raises((KernelDefinitionError, LoweringError), match="acc"):
        core.compile(two_layouts, out_idx=[1])

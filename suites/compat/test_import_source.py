"""T.import_source / T.call_extern (core/language/extern.py): user MSL in the library and
calls to it, against torch.

A helper function imported once and called from two kernels of one program, a
metal_stdlib function called by name, a call in a T.Parallel loop (kept scalar), and the
refused forms.
"""

import pytest

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

SOURCE = """
inline float scale_add(float x, float s) { return x * s + 1.0f; }
inline int clamp_index(int i, int n) { return i < 0 ? 0 : (i >= n ? n - 1 : i); }
"""


def test_imported_helpers_in_two_kernels(run):
    n = 128

    @T.prim_func
    def two(A: T.Tensor((n,), "float32"), I: T.Tensor((n,), "int32"),
            B: T.Tensor((n,), "float32"), C: T.Tensor((n,), "float32")):
        with T.Kernel(2, threads=n // 2) as bx:
            T.import_source(SOURCE)
            i = bx * (n // 2) + T.get_thread_binding()
            B[i] = T.call_extern("float32", "scale_add", A[i], 3.0)
        with T.Kernel(2, threads=n // 2) as bx:
            T.import_source(SOURCE)
            i = bx * (n // 2) + T.get_thread_binding()
            C[i] = A[T.call_extern("int32", "clamp_index", I[i], n)]

    kernel = core.compile(two, out_idx=[2, 3])
    assert kernel.msl.count("inline float scale_add") == 1
    a = random_tensor((n,), "float32", 1)
    idx = (random_tensor((n,), "int32", 2) % (2 * n)) - n // 2
    b, c = run(kernel, a, idx)
    assert_close(b, a.double() * 3.0 + 1.0, dtype=a.dtype, what="scale_add")
    assert_close(c, a[idx.clamp(0, n - 1).long()], op_class="exact", what="clamp_index")


def test_a_metal_stdlib_function_by_name(run):
    @T.prim_func
    def fused(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            B[tx] = T.call_extern("float32", "fma", A[tx], A[tx], 0.5)

    a = random_tensor((64,), "float32", 3)
    assert_close(run(core.compile(fused, out_idx=[1]), a), a.double() * a.double() + 0.5,
                 dtype=a.dtype, what="fma")


def test_a_call_in_a_parallel_loop_stays_scalar(run):
    @T.prim_func
    def par(A: T.Tensor((256,), "float32"), B: T.Tensor((256,), "float32")):
        with T.Kernel(1, threads=64):
            T.import_source(SOURCE)
            for i in T.Parallel(256):
                B[i] = T.call_extern("float32", "scale_add", A[i], 2.0)

    kernel = core.compile(par, out_idx=[1])
    assert "scale_add(A[" in kernel.msl   # an opaque call is never vectorized
    a = random_tensor((256,), "float32", 4)
    assert_close(run(kernel, a), a.double() * 2.0 + 1.0, dtype=a.dtype, what="parallel")


def test_a_name_that_is_not_an_identifier_is_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.call_extern.*MSL identifier"):
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                tx = T.get_thread_binding()
                A[tx] = T.call_extern("float32", "x); evil(", A[tx])


def test_a_source_that_is_not_a_string_is_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.import_source.*must be a str"):
        @T.prim_func
        def bad(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.import_source(42)

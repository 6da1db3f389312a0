"""Pass `verify`: an ill-formed kernel is rejected before any lowering, with a
KernelDefinitionError naming the kernel and the construct and saying what is allowed;
a well-formed one goes through unchanged."""

import pytest
import tvm_ffi

import core.language as T
from core.errors import KernelDefinitionError
from core.transform import pipeline


@T.prim_func
def element_outside_parallel(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
    with T.Kernel(1, threads=64):
        x = T.alloc_fragment((64,), "float32")
        T.copy(A, x)
        x[0] = A[T.get_thread_binding()]    # every thread holds x whole: copies would differ
        T.copy(x, B)


@T.prim_func
def runtime_extent(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32"), n: T.int32):
    with T.Kernel(1, threads=64):
        for i in T.Parallel(n):
            B[i] = A[i]


@T.prim_func
def nested_kernels(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
    with T.Kernel(1, threads=64):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = A[i]


@T.prim_func
def too_much_shared(A: T.Tensor((96, 96), "float32"), B: T.Tensor((96, 96), "float32")):
    with T.Kernel(1, threads=128):
        S = T.alloc_shared((96, 96), "float32")     # 36864 bytes: past 32 KiB
        T.copy(A, S)
        T.copy(S, B)


@T.prim_func
def parallel_on_the_host(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
    for i in T.Parallel(64):
        B[i] = A[i]
    with T.Kernel(1, threads=64):
        for i in T.Parallel(64):
            B[i] = A[i]


@T.prim_func
def copy_extents_differ(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
    with T.Kernel(1, threads=128):
        x = T.alloc_fragment((16, 64), "float32")
        T.copy(A[0:8, 0:64], x)
        T.copy(x, B[0:16, 0:64])


ILL_FORMED = [  # kernel, construct (after the kernel's name), what the reason says
    (element_outside_parallel, "fragment 'x'", "outside T.Parallel, where every thread holds "
                                               "the whole fragment"),
    (runtime_extent, "T.Parallel", "extent n is not a compile-time constant"),
    (nested_kernels, "T.Kernel", "T.Kernel blocks cannot be nested"),
    (too_much_shared, "T.alloc_shared", "totals 36864 bytes; Apple GPUs allow at most 32768"),
    (parallel_on_the_host, "host loop", "outside every `with T.Kernel"),
    (copy_extents_differ, "T.copy", "source 'A' tile (8, 64) and destination 'x' tile "
                                    "(16, 64) differ"),
]


@pytest.mark.parametrize("func,construct,reason", ILL_FORMED,
                         ids=[f.attrs["global_symbol"] for f, _, _ in ILL_FORMED])
def test_an_ill_formed_kernel_is_rejected_naming_kernel_and_construct(func, construct,
                                                                      reason):
    pipeline.run(func, stop_after="host_program")           # nothing before verify objects
    with pytest.raises(KernelDefinitionError) as info:
        pipeline.run(func, stop_after="verify")
    err = info.value
    name = func.attrs["global_symbol"]
    assert (err.kernel, err.construct) == (name, construct)
    assert str(err).startswith(f"kernel '{name}', {construct}: ")
    assert reason in err.reason


def test_a_well_formed_kernel_goes_through_unchanged():
    @T.prim_func
    def fine(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(4, threads=128) as bx:
            x = T.alloc_fragment((16, 64), "float32")
            T.copy(A[bx * 16, 0], x)
            for i, j in T.Parallel(16, 64):
                x[i, j] = x[i, j] * 2.0
            T.copy(x, B[bx * 16, 0])
    before = pipeline.run(fine, stop_after="host_program")
    assert tvm_ffi.structural_equal(pipeline.run(fine, stop_after="verify"), before)

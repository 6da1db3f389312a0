"""Malformed kernels and bad calls: each fails before any code runs with a project error
naming the kernel, the construct, what is wrong and what is allowed."""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError, LaunchError, MetaltileError

CASES = {}


def case(*expected):
    def register(builder):
        CASES[builder.__name__] = (builder, expected)
        return builder
    return register


@case("statement outside T.Kernel", "at the host level only T.Kernel blocks")
def outside_kernel():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        A[0] = 1.0
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = 2.0
    return bad


@case("kernel 'bad', store", "arithmetic (Mul) on bool values",
      "cast to an integer type first")
def bool_arithmetic():
    @T.prim_func
    def bad(A: T.Tensor((64,), "bool"), C: T.Tensor((64,), "bool")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(64):
                C[i] = A[i] * T.cast(2, "bool")
    return bad


@case("kernel 'bad', parameter 't'", "annotated with the string 'float32'", "T.float32")
def string_annotation():
    @T.prim_func
    def bad(A: T.Tensor((64,), "float32"), t: "float32"):  # noqa: F821 - the error under test
        with T.Kernel(1, threads=32):
            for i in T.Parallel(64):
                A[i] = A[i] + t
    return bad


@case("is not inside a `with T.Kernel(...)` block")
def no_kernel():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        A[0] = 1.0
    return bad


@case("cannot be nested", "T.Kernel")
def nested_kernel():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8):
            with T.Kernel(1, threads=8):
                for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                    A[i] = 2.0
    return bad


@case("fragment 'F'", "outside T.Parallel", "depends on the thread", "T.alloc_local")
def fragment_outside_parallel():
    # every thread holds F whole: a per-thread value into one element would differ per copy
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8):
            F = T.alloc_fragment((8,), "float32")
            T.fill(F, 0.0)
            F[0] = A[T.get_thread_binding()]
            T.copy(F, A)
    return bad


@case("fragment 'F'", "F[j, i]", "indexed by the loop variables")
def fragment_permuted():
    @T.prim_func
    def bad(A: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=64):
            F = T.alloc_fragment((8, 8), "float32")
            for i, j in T.Parallel(8, 8):
                F[j, i] = 1.0
            T.copy(F, A)
    return bad


@case("T.Parallel", "not a compile-time constant")
def parallel_symbolic():
    @T.prim_func
    def bad(A: T.Tensor((64,), "float32"), n: T.int32):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(n):
                A[i] = 1.0
    return bad


@case("T.Parallel loops cannot be nested")
def parallel_nested():
    @T.prim_func
    def bad(A: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i, 0] = 0.0
                for j in T.Parallel(8):
                    A[i, j] = 1.0
    return bad


@case("T.copy", "not allowed inside T.Parallel")
def tile_op_in_parallel():
    @T.prim_func
    def bad(A: T.Tensor((8, 8), "float32"), B: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((8, 8), "float32")
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                T.copy(A, S)
            T.copy(S, B)
    return bad


@case("T.copy", "(16, 8)", "(8, 8)", "must match")
def copy_extent_mismatch():
    @T.prim_func
    def bad(A: T.Tensor((16, 8), "float32"), B: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((8, 8), "float32")
            T.copy(A[0:16, 0:8], S)
            T.copy(S, B)
    return bad


@case("T.copy", "neither 'A' nor 'B' gives the tile's extents")
def copy_no_extents():
    @T.prim_func
    def bad(A: T.Tensor((16, 8), "float32"), B: T.Tensor((16, 8), "float32")):
        with T.Kernel(1, threads=64):
            T.copy(A[0, 0], B[0, 0])
    return bad


@case("fragment 'F'", "fragments are copied and filled whole")
def partial_fragment_copy():
    @T.prim_func
    def bad(A: T.Tensor((16, 8), "float32")):
        with T.Kernel(1, threads=64):
            F = T.alloc_fragment((16, 8), "float32")
            T.clear(F)
            T.copy(F[0:8, 0:8], A[0, 0])
    return bad


@case("threadgroup memory", "40960 bytes", "at most 32768")
def too_much_shared():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((80, 128), "float32")
            T.fill(S, 0.0)
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = S[0, i]
    return bad


@case("T.Kernel", "2048 threads", "at most 1024")
def too_many_threads():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=(64, 32)):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = 1.0
    return bad


@case("T.Tensor", "float64", "allowed: float32")
def unsupported_dtype():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float64")):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = 1.0
    return bad


@case("scalar parameter 's'", "int8 is not allowed", "int32, int64, float32")
def bad_scalar_dtype():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32"), s: T.int8):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = T.cast(s, "float32")
    return bad


@case("T.Kernel takes 1 to 3 grid dimensions")
def four_grid_dims():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, 1, 1, 1, threads=8):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = 1.0
    return bad


@case("T.alloc_shared", "compile-time constants")
def symbolic_shared_shape():
    n = T.dynamic("n")

    @T.prim_func
    def bad(A: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=8):
            S = T.alloc_shared((n,), "float32")
            T.copy(A, S)
    return bad


@case("T.exp", "floating-point argument", "int32")
def exp_of_int():
    @T.prim_func
    def bad(A: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = T.exp(A[i])
    return bad


@case("T.copy destination", "is not a buffer or a buffer tile")
def copy_into_scalar():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32"), n: T.int32):
        with T.Kernel(1, threads=8):
            T.copy(A, n)
    return bad


@case("T.Pipelined", "num_stages=-1")
def negative_stages():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8):
            for k in T.Pipelined(4, num_stages=-1):  # noqa: B007 - malformed on purpose
                for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                    A[i] = 1.0
    return bad


@case("T.copy operand 'S'", "exceeds the on-chip buffer's extent 8")
def copy_beyond_shared():
    @T.prim_func
    def bad(A: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=8):
            S = T.alloc_shared((8,), "float32")
            T.copy(A[0:16], S[0:16])
    return bad


@case("threads=0", "positive int")
def zero_threads():
    @T.prim_func
    def bad(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=0):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = 1.0
    return bad


@pytest.mark.parametrize("name", sorted(CASES))
def test_malformed_kernel(name):
    builder, expected = CASES[name]
    with pytest.raises(MetaltileError) as info:
        core.compile(builder(), out_idx=None)
    assert isinstance(info.value, KernelDefinitionError), type(info.value)
    message = str(info.value)
    assert "kernel 'bad'" in message or name in ("unsupported_dtype",) or \
        "kernel" in message, message
    for part in expected:
        assert part in message, f"{part!r} not in {message!r}"


def test_at_least_fifteen_malformed_kernels():
    assert len(CASES) >= 15


# ---- launch-time checks ------------------------------------------------------------------

N = T.dynamic("N")


@T.prim_func
def axpy(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32"), a: T.float32,
         Out: T.Tensor((N,), "float32")):
    with T.Kernel(T.ceildiv(N, 64), threads=64) as bx:
        for i in T.Parallel(64):
            if bx * 64 + i < N:
                Out[bx * 64 + i] = X[bx * 64 + i] * a + Y[bx * 64 + i]


@pytest.mark.parametrize("args,expected", [
    (lambda: (torch.zeros(8), torch.zeros(8)), "expected 3 arguments (X, Y, a), got 2"),
    (lambda: (torch.zeros(8), torch.zeros(8, dtype=torch.float16), 1.0),
     "parameter 'Y'"),
    (lambda: (torch.zeros(8), torch.zeros(9), 1.0), "symbolic dim 'N' is already 8"),
    (lambda: (torch.zeros(16)[::2], torch.zeros(8), 1.0), "not contiguous"),
    (lambda: (torch.zeros(8), torch.zeros(8), "x"), "scalar parameter 'a' (float32)"),
    (lambda: (torch.zeros(8, 1), torch.zeros(8), 1.0), "rank 2"),
    (lambda: ([0.0] * 8, torch.zeros(8), 1.0), "expected a torch tensor"),
])
def test_launch_checks(args, expected):
    kernel = core.compile(axpy, out_idx=[-1])
    with pytest.raises(LaunchError) as info:
        kernel(*args(), backend="emu")
    assert expected in str(info.value) and "kernel 'axpy'" in str(info.value)


def test_bad_out_idx_and_int_overflow():
    with pytest.raises(LaunchError, match="out_idx 2 does not name a tensor parameter"):
        core.compile(axpy, out_idx=[2])

    @T.prim_func
    def k(A: T.Tensor((8,), "int32"), s: T.int32):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):  # noqa: B007 - the malformed kernel under test
                A[i] = s
    with pytest.raises(LaunchError, match="does not fit int32"):
        core.compile(k)(torch.zeros(8, dtype=torch.int32), 2**31, backend="emu")

"""Bad input to eager kernel functions: each a clear project error naming the function,
the parameter or construct, and the expected/actual values."""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError, LaunchError, MetaltileError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@core.jit
def add(A, B, block: int):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    B: T.Tensor((M, N), T.float32)
    C = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(N, block), M, threads=block) as (bx, by):
        for i in T.Parallel(block):
            if bx * block + i < N:
                C[by, bx * block + i] = A[by, bx * block + i] + B[by, bx * block + i]
    return C


@core.jit
def unbound(A):
    M, K = T.const("M K")
    A: T.Tensor((M, 4), T.float32)
    C = T.empty((M, 4), T.float32)
    with T.Kernel(M, threads=32) as m:
        for i in T.Parallel(4):
            C[m, i] = A[m, i] * K
    return C


@core.jit
def returns_param(A):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    with T.Kernel(1, threads=32):
        for i in T.Parallel(32):
            if i < N:
                A[i] = A[i] + 1.0
    return A


@core.jit
def returns_number(A):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    with T.Kernel(1, threads=32):
        for i in T.Parallel(32):
            if i < N:
                A[i] = A[i] + 1.0
    return 3


def _capacity(spec):
    @core.jit
    def cap(A):
        N, K = T.const("N"), T.dynamic("K")
        A: T.Tensor((N,), T.float32)
        Out = T.empty((K,), T.float32)
        T.annotate_capacity_dims(spec)
        with T.Kernel(K, threads=32) as r:
            for i in T.Parallel(1):
                Out[r + i] = A[0]
        return Out
    return cap


@core.jit
def tir_break(A):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(1, threads=1):
        for i in T.serial(N):
            if i > 3:
                break
            B[i] = A[i]
    return B


def _lengths(count_shape, count_dtype, reported=1, name="Out"):
    @core.jit
    def rep(A):
        N, K = T.const("N"), T.dynamic("K")
        A: T.Tensor((N,), T.float32)
        Out = T.empty((K,), T.float32)
        count = T.empty(count_shape, count_dtype)
        T.annotate_capacity_dims({"Out": (4,)}, lengths={name: count})
        with T.Kernel(1, threads=1):
            for i in T.serial(4):
                Out[i] = A[0]
            count[0] = reported
        return Out
    return rep


@core.jit
def with_options(A, options):
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    C = T.empty((M, N), T.float32)
    with T.Kernel(M, threads=32) as m:
        for i in T.Parallel(32):
            if i < N:
                C[m, i] = A[m, i]
    return C


X = torch.zeros(8, 64)

CASES = {
    "shape_disagrees": (lambda: add(X, torch.zeros(8, 32), 32), LaunchError,
                        ["kernel 'add'", "parameter 'B'", "dim 1 is 32",
                         "T.const 'N' is 64 from parameter 'A' dim 1"]),
    "rank_disagrees": (lambda: add(X, torch.zeros(8), 32), LaunchError,
                       ["parameter 'B'", "rank 1", "T.Tensor((M, N), float32)"]),
    "missing_tensor": (lambda: add(X, block=32), LaunchError,
                       ["kernel 'add'", "parameter 'B'", "is missing", "tensor"]),
    "not_a_tensor": (lambda: add(X, [1, 2], 32), LaunchError,
                     ["parameter 'B'", "expected a torch tensor", "got list"]),
    "python_param_type": (lambda: add(X, X, 32.5), KernelDefinitionError,
                          ["kernel 'add'", "parameter 'block'", "expected an int",
                           "got float 32.5"]),
    "tensor_for_python_param": (lambda: add(X, X, X), KernelDefinitionError,
                                ["parameter 'block'", "compile-time parameter",
                                 "got a torch tensor"]),
    "python_param_unhashable": (lambda: with_options(X, {"b": 32}), KernelDefinitionError,
                                ["kernel 'with_options'", "parameter 'options'",
                                 "a dict cannot be a compile-time parameter"]),
    "dtype_disagrees": (lambda: add(X.half(), X.half(), 32), LaunchError,
                        ["kernel 'add'", "parameter 'A'", "torch.float16",
                         "declared float32"]),
    "const_never_bound": (lambda: unbound(torch.zeros(4, 4)), KernelDefinitionError,
                          ["kernel 'unbound'", "T.const 'K'", "not bound by any argument",
                           "unbound.compile(K=...)"]),
    "compile_const_missing": (lambda: add.compile(M=8, block=32), KernelDefinitionError,
                              ["T.const 'N'", "has no value", "N=..."]),
    "compile_const_not_int": (lambda: add.compile(M=8, N=2.5, block=32),
                              KernelDefinitionError, ["T.const 'N'", "positive int",
                                                      "2.5"]),
    "returns_parameter": (lambda: returns_param(torch.zeros(8)), KernelDefinitionError,
                          ["kernel 'returns_param'", "return",
                           "returns parameter 'A' at position 0", "T.empty"]),
    "returns_number": (lambda: returns_number(torch.zeros(8)), KernelDefinitionError,
                       ["return", "returns int 3", "T.empty"]),
    "capacity_unknown_tensor": (lambda: _capacity({"Outt": (4,)})(torch.zeros(2)),
                                KernelDefinitionError,
                                ["T.annotate_capacity_dims('Outt')", "'Outt' is not a tensor",
                                 "Out"]),
    "capacity_wrong_rank": (lambda: _capacity({"Out": (4, None)})(torch.zeros(2)),
                            KernelDefinitionError, ["2 capacity dims", "rank 1"]),
    "capacity_negative": (lambda: _capacity({"Out": (-4,)})(torch.zeros(2)),
                          KernelDefinitionError, ["capacity -4", "non-negative int"]),
    "capacity_not_int": (lambda: _capacity({"Out": (4.5,)})(torch.zeros(2)),
                         KernelDefinitionError, ["capacity 4.5", "non-negative int"]),
    "lengths_without_capacity": (lambda: _lengths((1,), T.int32, name="A")(torch.zeros(2)),
                                 KernelDefinitionError,
                                 ["lengths='A'", "has a length tensor but no capacity dims"]),
    "lengths_wrong_dtype": (lambda: _lengths((1,), T.float32)(torch.zeros(2)),
                            KernelDefinitionError,
                            ["length tensor 'count' is float32", "int32 or int64 of shape (1,)"]),
    "lengths_wrong_shape": (lambda: _lengths((2,), T.int32)(torch.zeros(2)),
                            KernelDefinitionError, ["length tensor 'count'", "shape (1,)"]),
    "reported_beyond_capacity": (lambda: _lengths((1,), T.int32, 9)(torch.zeros(2),
                                                                    backend="emu"),
                                 LaunchError, ["kernel 'rep'", "output 'Out'",
                                               "reported length 9", "capacity 4"]),
    "break_in_tir_loop": (lambda: tir_break(torch.zeros(8)), KernelDefinitionError,
                          ["kernel 'tir_break'", "`break` inside a TIR loop"]),
    "const_outside_eager": (lambda: T.const("M"), KernelDefinitionError,
                            ["T.const", "@core.jit function"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(name):
    call, cls, parts = CASES[name]
    with pytest.raises(MetaltileError) as info:
        call()
    assert isinstance(info.value, cls), (type(info.value), str(info.value))
    for part in parts:
        assert part in str(info.value), f"{part!r} not in {str(info.value)!r}"


def test_capacity_missing_for_data_dependent_output():
    @core.jit
    def nocap(A):
        N, K = T.const("N"), T.dynamic("K")
        A: T.Tensor((N,), T.float32)
        Out = T.empty((K,), T.float32)
        with T.Kernel(K, threads=32) as r:
            for i in T.Parallel(1):
                Out[r + i] = A[0]
        return Out

    with pytest.raises(LaunchError) as info:
        nocap(torch.zeros(2), backend="emu")
    assert "output 'Out'" in str(info.value) and "T.annotate_capacity_dims" in str(info.value)


def test_prim_func_capacity_unknown_name_when_defined():
    with pytest.raises(KernelDefinitionError) as info:
        @T.prim_func
        def k(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
            T.annotate_capacity_dims({"C": (4,)})
            with T.Kernel(1, threads=4):
                for i in T.Parallel(4):
                    B[i] = A[i]

    assert "kernel 'k'" in str(info.value)
    assert "'C' is not a tensor of the function; tensors: A, B" in str(info.value)


@core.jit
def tir_while(A):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B = T.empty((N,), T.float32)
    with T.Kernel(1, threads=1) as bx:
        while bx < N:
            B[bx] = A[bx]
    return B


def test_while_on_tir_condition():
    with pytest.raises(KernelDefinitionError) as info:
        tir_while(torch.zeros(4))
    assert "kernel 'tir_while'" in str(info.value) and "TIR condition" in str(info.value)


@core.jit
def strided_rows(A):
    M = T.const("M")
    A: T.StridedTensor[[M, 4], [8, 1], T.float32]
    B = T.empty((M, 4), T.float32)
    with T.Kernel(M, threads=4) as m:
        for j in T.Parallel(4):
            B[m, j] = A[m, j] * 2.0
    return B


def test_strided_tensor_declares_strides():
    func = strided_rows.get_tir(M=3)
    assert [int(s) for s in func.params[0].ty.strides] == [8, 1]


def test_parallel_loop_at_host_level():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        for i in T.Parallel(4):
            with T.Kernel(1, threads=4):
                B[i] = A[i]

    with pytest.raises(KernelDefinitionError) as info:
        core.compile(k, out_idx=[1])
    assert "outside every `with T.Kernel(...)` block" in str(info.value)
    assert "only serial loops" in str(info.value)


def test_host_scalar_carried_across_iterations():
    @T.prim_func
    def k(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        s = 0
        for it in T.serial(4):
            s = it * 2
        with T.Kernel(1, threads=4):
            for i in T.Parallel(4):
                B[i] = A[i] * T.cast(s, "float32")

    with pytest.raises(KernelDefinitionError) as info:
        core.compile(k, out_idx=[1])
    assert "host scalar 's'" in str(info.value)
    assert "carried across host-loop iterations" in str(info.value)


def test_strided_tensor_runs_on_a_view(run):
    base = random_tensor((3, 8), "float32", 1)
    view = base[:, 4:8]                                  # strides (8, 1), not contiguous
    out = run(strided_rows.compile(M=3), view)
    assert_close(out, view * 2)
    with pytest.raises(LaunchError) as info:
        strided_rows(random_tensor((3, 4), "float32", 2), backend="emu")   # strides (4, 1)
    assert "parameter 'A'" in str(info.value) and "strides (4, 1)" in str(info.value)

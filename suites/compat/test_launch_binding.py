"""Launch binding as TileLang's Metal binding does it (TileLang PR #2969): symbolic dims
bind by variable identity, not by name, and a parameter declared with trailing dims of 1
takes a tensor that leaves them out."""

from __future__ import annotations

import pytest

import core
import core.language as T
from core.errors import LaunchError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

N_FIRST = T.dynamic("N")   # two distinct variables that share a name: two dims
N_SECOND = T.dynamic("N")


@T.prim_func
def same_name_vars(A: T.Tensor((N_SECOND,), "float32"), B: T.Tensor((N_FIRST,), "float32"),
                   OUT: T.Tensor((N_FIRST,), "float32")):
    with T.Kernel(N_FIRST, threads=1) as bx:
        OUT[bx] = B[bx] * 2.0 + A[N_SECOND - 1]   # one kernel reads both


def test_same_name_distinct_vars_are_two_dims(run):
    kernel = core.compile(same_name_vars, out_idx=[2])
    a, b = random_tensor((9,), "float32", 1), random_tensor((5,), "float32", 2)
    out = run(kernel, a, b)
    assert out.shape == (5,)
    assert_close(out, b * 2.0 + a[8], "float32")
    a3 = random_tensor((3,), "float32", 3)
    assert_close(run(kernel, a3, b), b * 2.0 + a3[2], "float32")


def test_same_name_var_still_one_dim_where_it_is_one_var():
    kernel = core.compile(same_name_vars)   # OUT passed in, as TileLang's tests do
    with pytest.raises(LaunchError) as info:
        kernel(random_tensor((9,), "float32", 4), random_tensor((5,), "float32", 5),
               random_tensor((6,), "float32", 6))
    assert str(info.value) == ("kernel 'same_name_vars', parameter 'OUT': dim 0 is 6 but "
                               "symbolic dim 'N_1' is already 5 from parameter 'B' dim 0")


@core.jit
def column(w, block: int = 64):
    T_ = T.const("T_")
    w: T.Tensor[[T_, 1], T.float32]
    OUT = T.empty([T_], dtype=T.float32)
    with T.Kernel(T.ceildiv(T_, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < T_:
                OUT[bx * block + i] = w[bx * block + i, 0] * 2.0
    return OUT


def test_trailing_one_may_be_left_out_eager(run):
    w = random_tensor((7,), "float32", 7)
    assert_close(run(column, w), w * 2.0, "float32")                 # (T,) for (T, 1)
    assert_close(run(column, w.reshape(7, 1)), w * 2.0, "float32")   # (T, 1) itself
    assert column.specialize(w) is column.specialize(w.reshape(7, 1))


def _fixed_column(rows=7, tail=1):
    @T.prim_func
    def fixed(W: T.Tensor((rows, tail), "float32"), OUT: T.Tensor((rows,), "float32")):
        with T.Kernel(rows, threads=1) as bx:
            OUT[bx] = W[bx, 0] * 2.0
    return fixed


def test_trailing_one_may_be_left_out_prim_func(run):
    kernel = core.compile(_fixed_column(), out_idx=[1])
    w = random_tensor((7,), "float32", 8)
    assert_close(run(kernel, w), w * 2.0, "float32")


@pytest.mark.parametrize("make,shape,parts", [
    (lambda: core.compile(_fixed_column(), out_idx=[1]), (3,),
     ["kernel 'fixed', parameter 'W'", "dim 0 is 3, declared 7"]),         # the prefix
    (lambda: core.compile(_fixed_column(tail=2), out_idx=[1]), (7,),
     ["parameter 'W'", "rank 1", "declared rank 2"]),                     # not a 1
    (lambda: column, (7, 2), ["kernel 'column', parameter 'w'", "dim 1 is 2"]),
    (lambda: column, (7, 1, 1), ["parameter 'w'", "rank 3"]),
])
def test_trailing_one_errors(make, shape, parts):
    with pytest.raises(LaunchError) as info:
        make()(random_tensor(shape, "float32", 9), backend="emu")
    for part in parts:
        assert part in str(info.value), f"{part!r} not in {str(info.value)!r}"


# ---- capacity dims of inputs (TileLang PR #2969) -------------------------------------------

@core.jit
def masked(a, cap, m, block: int = 32):
    a: T.Tensor[[cap], T.float32]
    OUT = T.empty([cap], dtype=T.float32)
    T.annotate_capacity_dims({"a": (0,)})   # dim 0 of input a: the tensor may be smaller
    with T.Kernel(T.ceildiv(cap, block), threads=block) as bx:
        for i in T.Parallel(block):
            if bx * block + i < m:           # the kernel masks its accesses
                OUT[bx * block + i] = a[bx * block + i] * 2.0
    return OUT


def test_eager_input_capacity_dim_takes_a_smaller_tensor(run):
    a = random_tensor((15,), "float32", 10)
    out = run(masked, a, 64, 15)
    assert out.shape == (64,)
    assert_close(out[:15], a * 2.0, "float32")
    a64 = random_tensor((64,), "float32", 11)
    assert_close(run(masked, a64, 64, 64), a64 * 2.0, "float32")


def _masked_prim_func(capacity):
    @T.prim_func
    def rows(W: T.Tensor((64, 4), "float32"), m: T.int32, OUT: T.Tensor((64, 4), "float32")):
        with T.Kernel(64, threads=4) as bx:
            for j in T.Parallel(4):
                if bx < m:
                    OUT[bx, j] = W[bx, j] + 1.0
    return rows.with_attr("tilelang_capacity_dims", capacity)


def test_prim_func_attribute_capacity_dim(run):
    kernel = core.compile(_masked_prim_func({"W": (0,)}), out_idx=[2])
    w = random_tensor((15, 4), "float32", 12)
    assert_close(run(kernel, w, 15)[:15], w + 1.0, "float32")
    with pytest.raises(LaunchError, match="parameter 'W': dim 1 is 3, declared 4"):
        kernel(random_tensor((15, 3), "float32", 13), 15, backend="emu")  # dim 1 exact


def test_unmarked_dims_stay_exact():
    kernel = core.compile(_masked_prim_func({}), out_idx=[2])
    with pytest.raises(LaunchError, match="parameter 'W': dim 0 is 15, declared 64"):
        kernel(random_tensor((15, 4), "float32", 14), 15, backend="emu")


@pytest.mark.parametrize("capacity,parts", [
    ({"V": (0,)}, ["kernel 'rows'", "function attribute 'tilelang_capacity_dims'",
                   "unknown tensor parameter name(s) ['V']", "['OUT', 'W']"]),
    ({"W": (2,)}, ["'W': dim 2 is not a dim of a tensor of rank 2"]),
])
def test_capacity_attribute_errors(capacity, parts):
    from core.errors import KernelDefinitionError
    with pytest.raises(KernelDefinitionError) as info:
        core.compile(_masked_prim_func(capacity), out_idx=[2])
    for part in parts:
        assert part in str(info.value), f"{part!r} not in {str(info.value)!r}"


def test_eager_input_capacity_entry_must_be_dim_indices():
    from core.errors import KernelDefinitionError

    @core.jit
    def bad(a):
        N = T.const("N")
        a: T.Tensor((N,), T.float32)
        OUT = T.empty((N,), T.float32)
        T.annotate_capacity_dims({"a": (None,)})
        with T.Kernel(1, threads=32):
            for i in T.Parallel(32):
                if i < N:
                    OUT[i] = a[i]
        return OUT

    with pytest.raises(KernelDefinitionError, match="kernel 'bad', T.annotate_capacity_dims"
                       r"\('a'\): 'a' is an input tensor: its entry lists dim indices"):
        bad(random_tensor((8,), "float32", 15))

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

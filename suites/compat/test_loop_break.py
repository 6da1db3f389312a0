"""T.loop_break (core/language/control.py): `break;` out of the innermost serial loop,
against torch.

A per-thread search that stops at the first negative element, a break of an inner loop
that leaves the outer one running, and the refused forms: no loop, a T.Parallel nest, and
a breaking loop that needs a threadgroup barrier inside it.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError, LoweringError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def _leading_non_negative(a):
    """How many elements of each row come before the first negative one."""
    neg = a < 0
    first = torch.where(neg.any(1), neg.int().argmax(1), torch.tensor(a.shape[1]))
    return first.to(torch.int32)


def test_search_stops_at_the_first_negative(run):
    rows, n = 64, 16

    @T.prim_func
    def search(A: T.Tensor((rows, n), "float32"), B: T.Tensor((rows,), "int32")):
        with T.Kernel(1, threads=rows):
            tx = T.get_thread_binding()
            count = T.alloc_var("int32", 0)
            for k in T.serial(n):
                if A[tx, k] < 0.0:
                    T.loop_break()
                count = count + 1
            B[tx] = count

    kernel = core.compile(search, out_idx=[1])
    assert "break;" in kernel.msl
    a = random_tensor((rows, n), "float32", 1) + 0.8
    assert_close(run(kernel, a), _leading_non_negative(a), op_class="exact", what="search")


def test_an_inner_break_leaves_the_outer_loop_running(run):
    rows, m, n = 32, 4, 8

    @T.prim_func
    def nested(A: T.Tensor((rows, m, n), "float32"), B: T.Tensor((rows, m), "int32")):
        with T.Kernel(2, threads=rows // 2) as bx:
            tx = T.get_thread_binding()
            r = bx * (rows // 2) + tx
            for i in T.serial(m):
                count = T.alloc_var("int32", 0)
                for k in range(n):
                    if A[r, i, k] < 0.0:
                        T.loop_break()
                    count = count + 1
                B[r, i] = count

    kernel = core.compile(nested, out_idx=[1])
    a = random_tensor((rows, m, n), "float32", 2) + 0.6
    want = _leading_non_negative(a.reshape(rows * m, n)).reshape(rows, m)
    assert_close(run(kernel, a), want, op_class="exact", what="nested break")


def test_a_break_outside_a_loop_is_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.loop_break.*no loop to leave"):
        @T.prim_func
        def no_loop(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.loop_break()


def test_a_break_in_a_parallel_nest_is_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.loop_break.*T.Parallel"):
        @T.prim_func
        def par(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                for i in T.Parallel(64):
                    if A[i] < 0.0:
                        T.loop_break()
                    A[i] = 1.0


def test_a_breaking_loop_that_needs_a_barrier_is_refused():
    @T.prim_func
    def exchange(A: T.Tensor((64, 8), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            S = T.alloc_shared((64,), "float32")
            acc = T.alloc_var("float32", 0.0)
            for k in T.serial(8):
                S[tx] = A[tx, k]
                acc = acc + S[63 - tx]
                if acc < 0.0:
                    T.loop_break()
            B[tx] = acc

    with pytest.raises(LoweringError, match=r"T.loop_break.*barrier"):
        core.compile(exchange, out_idx=[1])

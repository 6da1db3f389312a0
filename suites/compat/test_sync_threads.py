"""T.sync_threads (core/language/sync.py): an explicit threadgroup barrier, against torch.

Data exchanged through threadgroup memory behind the user's barrier (and no second one
from the planner), a hand-written tree reduction with a barrier per step, and the refused
forms: a named barrier (barrier_id / arrive_count) and a barrier not every thread reaches.
"""

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError, LoweringError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


def test_exchange_through_shared_memory(run):
    n = 128

    @T.prim_func
    def reverse(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=n):
            tx = T.get_thread_binding()
            S = T.alloc_shared((n,), "float32")
            S[tx] = A[tx]
            T.sync_threads()
            B[tx] = S[n - 1 - tx]

    kernel = core.compile(reverse, out_idx=[1])
    assert kernel.msl.count("threadgroup_barrier(mem_flags::mem_threadgroup);") == 1
    a = random_tensor((n,), "float32", 1)
    assert_close(run(kernel, a), a.flip(0), op_class="exact", what="reverse")


def test_tree_reduction_by_hand(run):
    n, blocks = 256, 3

    @T.prim_func
    def tree_sum(A: T.Tensor((blocks, n), "float32"), B: T.Tensor((blocks,), "float32")):
        with T.Kernel(blocks, threads=n) as bx:
            tx = T.get_thread_binding()
            S = T.alloc_shared((n,), "float32")
            S[tx] = A[bx, tx]
            T.sync_threads()
            for k in T.unroll(8):
                if tx < (n >> 1) >> k:
                    S[tx] = S[tx] + S[tx + ((n >> 1) >> k)]
                T.sync_threads()
            if tx == 0:
                B[bx] = S[0]

    kernel = core.compile(tree_sum, out_idx=[1])
    a = random_tensor((blocks, n), "float32", 2)
    assert_close(run(kernel, a), a.double().sum(1), dtype=torch.float32, reduction_length=n,
                 op_class="accumulation", what="tree sum")


def test_named_barriers_are_refused():
    with pytest.raises(KernelDefinitionError, match=r"T.sync_threads.*named barriers"):
        @T.prim_func
        def named(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.sync_threads(1, 64)
                A[T.get_thread_binding()] = 0.0


def test_a_barrier_only_some_threads_reach_is_refused():
    @T.prim_func
    def divergent(A: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            S = T.alloc_shared((64,), "float32")
            S[tx] = A[tx]
            if tx < 32:
                T.sync_threads()
            A[tx] = S[63 - tx]

    with pytest.raises(LoweringError, match=r"condition depends on the thread"):
        core.compile(divergent)

"""Trace-time Python values in kernel control flow, TIR ternaries, stepped T.serial /
T.unroll loops."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor


@pytest.mark.parametrize("double", [True, False])
def test_python_values_decide_control_flow_at_trace_time(run, double):
    M = 50

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(M):
                B[i] = A[i] * 2.0 if double else A[i] + 1.0
            if double:
                for i in T.Parallel(M):
                    B[i] = B[i] + 0.25

    a = random_tensor((M,), "float32", 1)
    out = run(core.compile(k, out_idx=[1]), a)
    assert_close(out, a.double() * 2 + 0.25 if double else a.double() + 1, "float32")


def test_ternary_on_a_kernel_value_is_a_select(run):
    M = 40

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(M):
                B[i] = A[i] if i < 13 else 0.0

    a = random_tensor((M,), "float32", 2)
    expected = torch.where(torch.arange(M) < 13, a, torch.zeros(M))
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float32")


def test_serial_and_unroll_with_steps(run):
    M = 60

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            for i in T.serial(tx * 2, M, 64):
                for r in T.unroll(0, 2, 1):
                    B[i + r] = A[i + r] * 3.0
            for j in T.Unroll(tx * 2, tx * 2 + 2, 2):   # this thread's even element
                if j < M:
                    B[j] = B[j] + 1.0

    a = random_tensor((M,), "float32", 3)
    expected = a.double() * 3
    expected[0::2] += 1
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float32")


def test_non_positive_step_is_an_error():
    with pytest.raises(KernelDefinitionError, match="T.serial.*loop step 0 is not positive"):
        @T.prim_func
        def k(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                for i in T.serial(0, 8, 0):
                    A[i] = 0.0


@pytest.mark.parametrize("flag,option", [(1, None), (0, [3]), ("yes", ()), (None, "x")])
def test_any_python_value_decides_at_trace_time(run, flag, option):
    M = 33

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(M):
                B[i] = A[i] * 2.0 if flag else A[i] - 1.0
            if option:
                for i in T.Parallel(M):
                    B[i] = B[i] + 10.0

    a = random_tensor((M,), "float32", 4)
    expected = (a.double() * 2 if flag else a.double() - 1) + (10 if option else 0)
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float32")


def test_ternary_on_a_kernel_value_keeps_the_branch_dtype(run):
    M = 40

    @T.prim_func
    def k(A: T.Tensor((M,), "float16"), B: T.Tensor((M,), "float16")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(M):
                B[i] = A[i] if i % 3 == 0 else 0.0

    a = random_tensor((M,), "float16", 5)
    expected = torch.where(torch.arange(M) % 3 == 0, a, torch.zeros(M).half())
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float16")


@pytest.mark.parametrize("body,message", [
    ("buffers", r"x if cond else y .*: the first branch is the buffer 'A'; a ternary on a "
                r"kernel value selects between two scalar values"),
    ("string", r"x if cond else y .*: the second branch is a str"),
    ("if_buffer", r"if statement .*: the condition is the buffer 'A', neither a Python "
                  r"value nor a TIR boolean expression"),
    ("ambiguous", r"if statement .*: the condition .* has no truth value"),
])
def test_bad_conditions_are_named(body, message):
    import numpy as np
    M, values = 32, np.ones(3)

    with pytest.raises(KernelDefinitionError, match=message):
        @T.prim_func
        def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
            with T.Kernel(1, threads=32):
                if body == "buffers":
                    for i in T.Parallel(M):
                        (A if i < 5 else B)[i] = 1.0
                if body == "string":
                    for i in T.Parallel(M):
                        B[i] = A[i] if A[i] > 0.0 else "x"
                if body == "if_buffer":
                    if A:
                        B[0] = 1.0
                if body == "ambiguous":
                    if values:
                        B[0] = 1.0

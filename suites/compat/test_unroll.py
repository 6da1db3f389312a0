"""Unroll requests reach Apple's compiler: `T.unroll(n)` (and `T.serial(n, unroll=True)`)
prints `#pragma clang loop unroll(full)` before the loop, `T.serial(n, unroll=k)` an unroll
count, `unroll=False` a disable; a plain loop prints none. The emulator builds the same
pragmas with clang and computes the same sums."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

R, N = 8, 64


@T.prim_func
def sums(A: T.Tensor((R, N), "float32"), B: T.Tensor((4, N), "float32")):
    with T.Kernel(1, threads=N):
        tx = T.get_thread_binding()
        acc = T.alloc_local((4,), "float32")
        for q in T.serial(4):
            acc[q] = 0.0
        for i in T.unroll(R):
            acc[0] += A[i, tx]
        for i in T.serial(R, unroll=2):
            acc[1] += A[i, tx] * 2.0
        for i in T.serial(R, unroll=False):
            acc[2] += A[i, tx] * 3.0
        for i in T.serial(R):
            acc[3] += A[i, tx] * 4.0
        for q in T.serial(4):
            B[q, tx] = acc[q]


def test_unroll_requests_become_clang_loop_pragmas(run):
    kernel = core.compile(sums, out_idx=[1])
    body = kernel.msl
    assert body.count("#pragma clang loop unroll(full)") == 1
    assert body.count("#pragma clang loop unroll_count(2)") == 1
    assert body.count("#pragma clang loop unroll(disable)") == 1
    for pragma in ("unroll(full)", "unroll_count(2)", "unroll(disable)"):
        after = body.split(f"#pragma clang loop {pragma}\n", 1)[1]
        assert after.lstrip().startswith("for (int i"), pragma   # on the loop it asks for
    a = random_tensor((R, N), "float32", 3)
    want = torch.stack([a.double().sum(0) * k for k in (1, 2, 3, 4)])
    assert_close(run(kernel, a), want, "float32", reduction_length=R,
                 op_class="accumulation")


def test_an_unroll_factor_is_an_unroll_count():
    @T.prim_func
    def k(A: T.Tensor((R, N), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N):
            tx = T.get_thread_binding()
            acc = T.alloc_local((1,), "float32")
            acc[0] = 0.0
            for i in T.unroll(R, unroll_factor=4):
                acc[0] += A[i, tx]
            B[tx] = acc[0]

    assert "#pragma clang loop unroll_count(4)" in core.compile(k, out_idx=[1]).msl


def test_an_unroll_factor_must_be_a_positive_int():
    with pytest.raises(KernelDefinitionError, match=r"T.unroll.*unroll_factor=0 must be a "
                                                    r"positive int"):
        @T.prim_func
        def k(A: T.Tensor((R,), "float32")):
            with T.Kernel(1, threads=1):
                for i in T.unroll(R, unroll_factor=0):
                    A[i] = 0.0

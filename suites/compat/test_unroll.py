"""Unroll requests reach Apple's compiler: `T.unroll(n)` (and `T.serial(n, unroll=True)`)
prints `#pragma clang loop unroll(full)` before the loop, `T.serial(n, unroll=k)` an unroll
count, `unroll=False` a disable. A loop without a request prints `#pragma unroll` when it is
short (TileLang #3195): a constant trip count of at most METAL.auto_unroll_trips and at most
METAL.auto_unroll_steps innermost bodies in its nest; any other loop prints none. The
emulator builds the same pragmas with clang and computes the same sums."""

from __future__ import annotations

import pytest
import torch

import core
import core.language as T
from core.target import METAL
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


@T.prim_func
def nests(A: T.Tensor((N,), "float32"), B: T.Tensor((6, N), "float32"), n: T.int32):
    with T.Kernel(1, threads=N):
        tx = T.get_thread_binding()
        acc = T.alloc_local((6,), "float32")
        for q in T.serial(6):                  # 6 trips: rolled
            acc[q] = 0.0
        for i in T.serial(3):                  # short
            acc[0] += A[tx] * T.Cast("float32", i + 1)
        for _i in T.serial(5):                 # 5 trips: rolled
            acc[1] += A[tx]
        for _i in T.serial(4):                 # 64 bodies: all three short
            for _j in T.serial(4):
                for _k in T.serial(4):
                    acc[2] += A[tx]
        for _h in T.serial(2):                 # 128 bodies: rolled, its inner nest short
            for _i in T.serial(4):
                for _j in T.serial(4):
                    for _k in T.serial(4):
                        acc[3] += A[tx]
        for _i in T.serial(2):                 # a runtime trip count inside: both rolled
            for _j in T.serial(n):
                acc[4] += A[tx]
        for _i in T.serial(2):                 # siblings add: 2 * (4 + 4) bodies, short
            acc[5] += A[tx]
            for _j in T.serial(4):
                acc[5] += A[tx]
            for _j in T.serial(4):
                acc[5] += A[tx]
        for q in T.serial(6):
            B[q, tx] = acc[q]


def _loops(msl: str) -> list:
    """(trip bound, the pragma line before it or None) of every `for` of the kernel, in
    order."""
    lines = [ln.strip() for ln in msl.splitlines()]
    out = []
    for k, ln in enumerate(lines):
        if ln.startswith("for (int "):
            bound = ln.split("<", 1)[1].split(";", 1)[0].strip()
            out.append((bound, lines[k - 1] if lines[k - 1].startswith("#pragma") else None))
    return out


def test_short_constant_loops_print_pragma_unroll(run):
    assert (METAL.auto_unroll_trips, METAL.auto_unroll_steps) == (4, 64)   # the cases below
    kernel = core.compile(nests, out_idx=[1])
    u = "#pragma unroll"
    assert _loops(kernel.msl) == [
        ("6", None), ("3", u), ("5", None), ("4", u), ("4", u), ("4", u),
        ("2", None), ("4", u), ("4", u), ("4", u), ("2", None), ("n", None),
        ("2", u), ("4", u), ("4", u), ("6", None)]
    a = random_tensor((N,), "float32", 11)
    times = torch.tensor([6.0, 5.0, 64.0, 128.0, 2 * 3, 18.0], dtype=torch.float64)
    assert_close(run(kernel, a, 3), times[:, None] * a.double()[None, :], "float32",
                 reduction_length=128, op_class="accumulation")


def test_a_request_wins_over_the_short_loop_rule():
    @T.prim_func
    def k(A: T.Tensor((4, N), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N):
            tx = T.get_thread_binding()
            acc = T.alloc_local((1,), "float32")
            acc[0] = 0.0
            for i in T.serial(4, unroll=False):
                acc[0] += A[i, tx]
            B[tx] = acc[0]

    loops = _loops(core.compile(k, out_idx=[1]).msl)
    assert loops == [("4", "#pragma clang loop unroll(disable)")]


def test_the_loops_around_simdgroup_matrix_ops_are_unrolled(run):
    """TileLang #3195's case: a GEMM's per-simdgroup fragment loops (4 x 4 8x8 tiles for a
    64x64 tile over 4 simdgroups) are short; the k loop around them is not."""
    @T.prim_func
    def mm(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
           C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, 1, threads=128) as (bx, by):
            As = T.alloc_shared((64, 32), "float16")
            Bs = T.alloc_shared((32, 64), "float16")
            Cf = T.alloc_fragment((64, 64), "float32")
            T.clear(Cf)
            for k in T.Pipelined(2):
                T.copy(A[0, k * 32], As)
                T.copy(B[k * 32, 0], Bs)
                T.gemm(As, Bs, Cf)
            T.copy(Cf, C)

    kernel = core.compile(mm, out_idx=[2])
    lines = [ln.strip() for ln in kernel.msl.splitlines()]
    mma = next(k for k, ln in enumerate(lines) if ln.startswith("simdgroup_multiply_accumulate"))
    assert lines[mma - 2] == lines[mma - 4] == "#pragma unroll"      # the i and j loops
    a, b = random_tensor((64, 64), "float16", 12), random_tensor((64, 64), "float16", 13)
    assert_close(run(kernel, a, b), a.double() @ b.double(), "float32", reduction_length=64,
                 op_class="accumulation")

"""Kernels TileLang accepts that metaltile used to refuse or report (issue "TileLang on
Metal, round 3"): each written as a TileLang user writes it, run on the emulator with every
check and compared with torch."""

from __future__ import annotations

import re

import pytest
import torch

import core
import core.language as T
from core.errors import KernelDefinitionError
from harness.check import barriers
from harness.check.compare import assert_close
from harness.gen.inputs import random_tensor

pytestmark = pytest.mark.backend("emu")   # some tests read the emulator's findings

GUARD = re.compile(r"if \(\((v\w*) == 0\)\) \{")   # the thread index is v (v_2 unnamed)


def _guards(msl) -> int:
    return sum(bool(GUARD.fullmatch(line.strip())) for line in msl.splitlines())


# ---- a thread-invariant store outside T.Parallel: one writer -----------------------------

def _row_sum(R, N, threads=128):
    # TileLang's default 128 threads; every thread computes the same sum
    @T.prim_func
    def k(A: T.Tensor((R, N), "float32"), OUT: T.Tensor((R,), "float32")):
        with T.Kernel(R, threads=threads) as bx:
            s = T.alloc_local((1,), "float32")
            s[0] = 0.0
            for j in T.serial(N):
                s[0] = s[0] + A[bx, j]
            OUT[bx] = s[0]
    return k


def test_thread_invariant_store_has_one_writer(run):
    kernel = core.compile(_row_sum(5, 48), out_idx=[1])
    lines = [line.strip() for line in kernel.msl.splitlines()]
    at = next(i for i, line in enumerate(lines) if GUARD.fullmatch(line))
    # thread 0 stores, the others do not
    assert lines[at + 1] == "OUT[bx] = s;" and lines[at + 2] == "}"
    a = random_tensor((5, 48), "float32", 1)
    assert_close(run(kernel, a), a.double().sum(1), "float32")


def test_consecutive_invariant_stores_share_the_guard_and_the_writer_reads_back(run):
    R = 6

    @T.prim_func
    def k(A: T.Tensor((R, 8), "float32"), B: T.Tensor((R,), "float32"),
          C: T.Tensor((R,), "float32")):
        with T.Kernel(R, threads=64) as bx:
            x = A[bx, 3] * 2.0
            B[bx] = x
            C[bx] = B[bx] + 1.0          # only the writer reads B: no device barrier needed

    kernel = core.compile(k, out_idx=[1, 2])
    assert _guards(kernel.msl) == 1
    a = random_tensor((R, 8), "float32", 2)
    b, c = run(kernel, a)
    assert_close(b, a.double()[:, 3] * 2, "float32")
    assert_close(c, a.double()[:, 3] * 2 + 1, "float32")


def test_invariant_threadgroup_store_then_every_thread_reads_it(run):
    N = 64

    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N):
            S = T.alloc_shared((1,), "float32")
            S[0] = A[0] + A[1]           # every thread alike: thread 0 stores
            for i in T.Parallel(N):
                B[i] = A[i] * S[0]

    kernel = core.compile(k, out_idx=[1])
    assert _guards(kernel.msl) == 1
    a = random_tensor((N,), "float32", 3)
    assert_close(run(kernel, a), a.double() * (a.double()[0] + a.double()[1]), "float32")
    report = barriers.check_barriers(kernel, [a])
    assert report.ok and len(report.barriers) == 1 and not report.redundant


def test_thread_dependent_stores_are_left_as_written():
    R = 4

    @T.prim_func
    def k(A: T.Tensor((R, 32), "float32"), B: T.Tensor((R,), "float32"),
          C: T.Tensor((R, 32), "float32")):
        with T.Kernel(R, threads=32) as bx:
            tx = T.get_thread_binding()
            C[bx, tx] = A[bx, tx]        # a different element per thread
            if tx == 3:                  # the kernel chose its writer
                B[bx] = A[bx, 0]

    kernel = core.compile(k, out_idx=[1, 2])
    assert _guards(kernel.msl) == 0
    a = random_tensor((R, 32), "float32", 4)
    b, c = kernel(a)
    assert kernel.last_run.findings == []
    assert_close(b, a[:, 0].double(), "float32")
    assert_close(c, a.double(), "float32")


def test_a_store_of_a_per_thread_value_is_still_a_race():
    @T.prim_func
    def k(A: T.Tensor((32,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            B[0] = A[tx]                 # a real race: the threads store different values

    kernel = core.compile(k, out_idx=[1])
    assert _guards(kernel.msl) == 0
    kernel(random_tensor((32,), "float32", 5))
    assert any(f.kind == "race" for f in kernel.last_run.findings)


def test_single_thread_kernel_gets_no_guard(run):
    kernel = core.compile(_row_sum(3, 16, threads=1), out_idx=[1])
    assert "if (" not in kernel.msl
    a = random_tensor((3, 16), "float32", 6)
    assert_close(run(kernel, a), a.double().sum(1), "float32")


def test_tilelang_amd_codegen_pipelined_sum(run):
    # the store of testing/python/amd/test_tilelang_hip_codegen.py's pipelined sum, with a
    # local accumulator (a fragment there)
    M, K, blk = 4, 256, 64

    @T.prim_func
    def k(x: T.Tensor((M, K), "float32"), out: T.Tensor((M,), "float32")):
        with T.Kernel(M, threads=64) as pid:
            acc = T.alloc_local((1,), "float32")
            xs = T.alloc_shared((blk,), "float32")
            T.clear(acc)
            for kk in T.Pipelined(K // blk, num_stages=1):
                T.copy(x[pid, kk * blk], xs)
                for j in T.serial(blk):
                    acc[0] = acc[0] + xs[j]
            out[pid] = acc[0]

    kernel = core.compile(k, out_idx=[1])
    assert _guards(kernel.msl) == 1
    a = random_tensor((M, K), "float32", 7)
    assert_close(run(kernel, a), a.double().sum(1), "float32")
    assert barriers.check_barriers(kernel, [a]).redundant == []


# ---- Python truthiness of trace-time values assigned to a name -----------------------------

@pytest.mark.parametrize("swizzle_panel", [0, 4])
def test_a_python_value_assigned_to_a_name_decides_by_truthiness(run, swizzle_panel):
    M, swizzle_order = 32, "mlx"

    @T.prim_func
    def k(A: T.Tensor((M,), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=32):
            use_mlx_swizzle = swizzle_panel and swizzle_order == "mlx"   # 0 or True
            scale = 3.0 if use_mlx_swizzle else 1.0
            if use_mlx_swizzle:
                for i in T.Parallel(M):
                    B[i] = A[i] * scale
            else:
                for i in T.Parallel(M):
                    B[i] = A[i] + scale

    a = random_tensor((M,), "float32", 8)
    expected = a.double() * 3 if swizzle_panel else a.double() + 1
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float32")


# ---- parsing: slice stores, `as (bx,)`, `and` / T.if_then_else on TIR conditions ----------

def test_slice_store_is_an_element_wise_copy(run):
    R, N = 3, 48

    @T.prim_func
    def k(A: T.Tensor((R, N), "float32"), B: T.Tensor((R, N), "float32"),
          C: T.Tensor((R, 16), "float32")):
        with T.Kernel(R, threads=32) as bx:
            S = T.alloc_shared((N,), "float32")
            S[0:N] = A[bx, 0:N]
            B[bx, 0:N] = S[0:N]
            C[bx, 0:16] = 2.0            # a scalar: a fill

    a = random_tensor((R, N), "float32", 9)
    b, c = run(core.compile(k, out_idx=[1, 2]), a)
    assert_close(b, a.double(), "float32")
    assert_close(c, a.double()[:, :16] * 0 + 2, "float32")


def test_slice_store_of_a_tuple_is_a_clear_error():
    with pytest.raises(KernelDefinitionError, match=r"kernel 'k', B\[a:b\] = .*tuple"):
        @T.prim_func
        def k(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=16):
                B[0:16] = A                  # a buffer: a copy; fine
                B[0:2] = (1.0, 2.0)          # neither a slice nor a scalar


def test_kernel_as_one_element_tuple_unpacks_the_block_index(run):
    N = 32

    @T.prim_func
    def k(A: T.Tensor((4, N), "float32"), B: T.Tensor((4, N), "float32")):
        with T.Kernel(4, threads=N) as (bx,):
            for i in T.Parallel(N):
                B[bx, i] = A[bx, i] + bx

    a = random_tensor((4, N), "float32", 10)
    expected = a.double() + torch.arange(4).double()[:, None]
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float32")


@core.jit
def _eager_conditions(A):
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    B = T.empty((N,), "float32")
    C = T.empty((N,), "float32")
    with T.Kernel(1, threads=32) as (bx,):
        for i in T.Parallel(N):
            B[i] = T.if_then_else((i == 0) and (A[i] > 0), 1.0, A[i])
            C[i] = T.if_then_else(i != 0, A[i] * 2.0, -1.0)
    return B, C


@core.jit
def _eager_slice_copy(A):
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    B = T.empty((N,), "float32")
    with T.Kernel(1, threads=32):
        B[0:N] = A[0:N]
    return B


@core.jit
def _eager_two_names_for_one_block_index(A):
    N = T.const("N")
    A: T.Tensor((N,), "float32")
    B = T.empty((N,), "float32")
    with T.Kernel(1, threads=32) as (bx, by):
        for i in T.Parallel(N):
            B[i] = A[i] + bx + by
    return B


def test_eager_with_names_more_block_indices_than_the_grid_has():
    with pytest.raises(KernelDefinitionError, match=r"names 2 values but the context gives 1"):
        _eager_two_names_for_one_block_index(random_tensor((32,), "float32", 13))


def test_eager_tir_conditions_build_the_tir_expression():
    from suites.eager.conftest import run_eager
    a = random_tensor((64,), "float32", 11)
    a[0] = abs(a[0]) + 0.5
    b, c = run_eager(_eager_conditions, a)
    idx = torch.arange(64)
    assert_close(b, torch.where((idx == 0) & (a > 0), 1.0, a).double(), "float32")
    assert_close(c, torch.where(idx != 0, a * 2, -1.0).double(), "float32")
    assert_close(run_eager(_eager_slice_copy, a), a.double(), "float32")


def test_prim_func_tir_conditions_with_and():
    N = 32

    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=N):
            for i in T.Parallel(N):
                B[i] = T.if_then_else((i == 0) and (A[i] > 0), 1.0, A[i])

    a = random_tensor((N,), "float32", 12)
    a[0] = abs(a[0]) + 0.5
    kernel = core.compile(k, out_idx=[1])
    b = kernel(a)
    assert kernel.last_run.findings == []
    assert_close(b, torch.where(torch.arange(N) == 0, 1.0, a).double(), "float32")


# ---- a section one thread runs (`for z in T.Parallel(1)`) ----------------------------------

def _top_k(N, K):
    # a selection sort of the K largest into a shared index array: iteration kk reads the
    # indices thread 0 chose in iterations 0 .. kk - 1
    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), I: T.Tensor((K,), "int32")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((N,), "float32")
            idx = T.alloc_shared((K,), "int32")
            for i in T.Parallel(N):
                S[i] = A[i]
            for _z in T.Parallel(1):
                for kk in T.serial(K):
                    best = T.alloc_var("int32")
                    best_v = T.alloc_var("float32")
                    best = 0
                    best_v = -T.infinity("float32")
                    for j in T.serial(N):
                        taken = T.alloc_var("int32")
                        taken = 0
                        for p in T.serial(kk):
                            if idx[p] == j:
                                taken = 1
                        if taken == 0 and S[j] > best_v:
                            best = j
                            best_v = S[j]
                    idx[kk] = best
            for i in T.Parallel(K):
                I[i] = idx[i]
    return k


@pytest.mark.parametrize("K", [4, 8])   # I is written by one thread (K=4) or two
def test_one_thread_section_reads_its_own_earlier_writes(run, K):
    N = 64
    kernel = core.compile(_top_k(N, K), out_idx=[1])
    a = random_tensor((N,), "float32", 14)
    got = run(kernel, a)
    assert torch.equal(got.long(), torch.topk(a, K).indices)
    assert_close(a[got.long()], torch.topk(a, K).values.double(), "float32")
    report = barriers.check_barriers(kernel, [a])
    assert report.ok and not report.redundant and report.barriers
    assert all(b.necessary for b in report.barriers)


# ---- a fragment element written outside T.Parallel: every thread holds it ------------------

def test_replicated_fragment_element_accumulated_outside_parallel(run):
    # examples/deepseek_mhc/example_mhc_pre.py's norm: `rms = T.alloc_fragment(1, ...)`
    # accumulated by every thread in a serial loop, then read in T.Parallel
    S, NT, H = 4, 6, 24

    @T.prim_func
    def k(sq: T.Tensor((S, NT), "float32"), mul: T.Tensor((S, NT, H), "float32"),
          out: T.Tensor((NT, H), "float32")):
        with T.Kernel(NT, threads=96) as i:
            rms = T.alloc_fragment(1, "float32")
            mixes = T.alloc_fragment(H, "float32")
            T.clear(mixes)
            rms[0] = 0
            for i_split in T.serial(S):
                rms[0] += sq[i_split, i]
            rms[0] = T.rsqrt(rms[0] / H + 1e-6)
            for j in T.Parallel(H):
                mixes[j] = 0
                for i_split in T.serial(S):
                    mixes[j] += mul[i_split, i, j]
                mixes[j] *= rms[0]
            T.copy(mixes, out[i, 0])

    sq = random_tensor((S, NT), "float32", 15).abs()
    mul = random_tensor((S, NT, H), "float32", 16)
    expected = mul.double().sum(0) * torch.rsqrt(sq.double().sum(0) / H + 1e-6)[:, None]
    assert_close(run(core.compile(k, out_idx=[2]), sq, mul), expected, "float32")


def test_replicated_fragment_lse_from_reductions_stored_by_one_writer(run):
    # lse[0] = log(sum) + max from two reductions that every thread holds, then stored
    R, N = 5, 512

    @T.prim_func
    def k(A: T.Tensor((R, N), "float32"), OUT: T.Tensor((R,), "float32")):
        with T.Kernel(R, threads=128) as bx:
            x = T.alloc_fragment((N,), "float32")
            m = T.alloc_fragment((1,), "float32")
            s = T.alloc_fragment((1,), "float32")
            lse = T.alloc_fragment((1,), "float32")
            T.copy(A[bx, 0], x)
            T.reduce_max(x, m, dim=0)
            for j in T.Parallel(N):
                x[j] = T.exp(x[j] - m[0])
            T.reduce_sum(x, s, dim=0)
            lse[0] = T.log(s[0]) + m[0]
            OUT[bx] = lse[0]

    kernel = core.compile(k, out_idx=[1])
    # thread 0 stores OUT[bx], once (the kernel's other `v == 0` guards are the reductions':
    # lane 0 of the first simdgroup writes each combined result for all to read)
    assert re.search(r"if \(\(v == 0\)\) \{\s*OUT\[bx\] = lse;\s*\}", kernel.msl)
    assert kernel.msl.count("OUT[") == 1
    a = random_tensor((R, N), "float32", 17)
    assert_close(run(kernel, a), torch.logsumexp(a.double(), 1), "float32")


def test_a_per_thread_value_into_a_replicated_fragment_is_a_clear_error():
    @T.prim_func
    def k(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            r = T.alloc_fragment((1,), "float32")
            r[0] = A[T.get_thread_binding()]
            for i in T.Parallel(64):
                B[i] = r[0]

    with pytest.raises(KernelDefinitionError,
                       match=r"kernel 'k', fragment 'r'.*depends on the thread"):
        core.compile(k, out_idx=[1])


def test_replicated_fragment_elements_as_loop_bounds_and_conditions(run):
    # examples/gemm_streamk's start_iter[0] / end_iter[0]: (1,) fragments every thread
    # computes, then a serial loop between them and a condition on an accumulator
    N = 64

    @T.prim_func
    def k(A: T.Tensor((N,), "float32"), R: T.Tensor((2,), "int32"),
          B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32):
            start = T.alloc_fragment((1,), "int32")
            end = T.alloc_fragment((1,), "int32")
            acc = T.alloc_fragment((1,), "float32")
            start[0] = R[0]
            end[0] = T.min(R[1], N)
            acc[0] = 0.0
            for j in T.serial(start[0], end[0]):
                if acc[0] < 1000.0:
                    acc[0] += A[j]
            B[0] = acc[0]

    a = random_tensor((N,), "float32", 18)
    r = torch.tensor([3, 40], dtype=torch.int32)
    assert_close(run(core.compile(k, out_idx=[2]), a, r), a.double()[3:40].sum()[None],
                 "float32")


def test_kernel_as_two_names_for_one_block_index_is_a_clear_error():
    with pytest.raises(KernelDefinitionError,
                       match=r"kernel 'k', `... as \(...\)`.*names 2 values"):
        @T.prim_func
        def k(A: T.Tensor((32,), "float32")):
            with T.Kernel(1, threads=32) as (bx, by):
                for i in T.Parallel(32):
                    A[i] = A[i] + bx + by


def test_replicated_fragment_read_at_any_element_in_parallel(run):
    R, N = 4, 32

    @T.prim_func
    def k(A: T.Tensor((R, N), "float32"), B: T.Tensor((R, N), "float32")):
        with T.Kernel(R, threads=64) as bx:
            stats = T.alloc_fragment((2,), "float32")     # [sum, max], every thread's own
            stats[0] = 0.0
            stats[1] = -T.infinity("float32")
            for j in T.serial(N):
                stats[0] += A[bx, j]
                stats[1] = T.max(stats[1], A[bx, j])
            for i in T.Parallel(N):
                B[bx, i] = (A[bx, i] - stats[1]) * stats[0]

    a = random_tensor((R, N), "float32", 19)
    ad = a.double()
    expected = (ad - ad.max(1, keepdim=True).values) * ad.sum(1, keepdim=True)
    assert_close(run(core.compile(k, out_idx=[1]), a), expected, "float32")

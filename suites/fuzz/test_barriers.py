"""harness/check/barriers.py: barrier necessity (docs/architecture.md, "The harness") on real compiled kernels."""

import dataclasses

import pytest
import torch

import core
import core.language as T
from core.jit import Kernel
from core.runtime import emu
from harness.gen.inputs import random_tensor
from harness.check import barriers

BARRIER = "threadgroup_barrier(mem_flags::mem_threadgroup);"


def _transpose(n=24, threads=128):
    @T.prim_func
    def k(A: T.Tensor((n, n), "float32"), B: T.Tensor((n, n), "float32")):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((n, n), "float32")
            T.copy(A, S)
            for i, j in T.Parallel(n, n):
                B[i, j] = S[j, i] * 2.0
    return k


def _same_thread_reuse():
    @T.prim_func
    def k(A: T.Tensor((32, 32), "float32"), B: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((32, 32), "float32")
            T.copy(A, S)
            for i, j in T.Parallel(32, 32):
                B[i, j] = S[i, j] + 1.0
    return k


def test_one_necessary_barrier():
    kernel = core.compile(_transpose(), out_idx=[1])
    report = barriers.check_barriers(kernel, [random_tensor((24, 24), "float32", 1)])
    assert report.ok and not report.missing
    [verdict] = report.barriers
    assert verdict.necessary and verdict.race.kind == "race"
    assert verdict.kernel == "k" and BARRIER in verdict.text
    assert verdict.schedules == ("forward",)  # the race shows on the first schedule
    assert kernel.msl.splitlines()[verdict.line - 1].strip() == verdict.text
    assert verdict.race.address_space == "threadgroup"


def test_redundant_barrier_is_reported():
    # No barrier is needed when each thread reads back what it wrote: add one by hand.
    kernel = core.compile(_same_thread_reuse(), out_idx=[1])
    assert "threadgroup_barrier" not in kernel.msl
    lines = kernel.msl.splitlines()
    # after S's declaration (words for its float4 accesses, then the pointer to them)
    at = next(i for i, line in enumerate(lines) if "threadgroup float* S" in line)
    msl = "\n".join(lines[:at + 1] + ["  " + BARRIER] + lines[at + 1:])
    padded = Kernel(dataclasses.replace(kernel.compiled, msl=msl), kernel.out_idx)
    report = barriers.check_barriers(padded, [random_tensor((32, 32), "float32", 2)],
                                     more_args=[[random_tensor((32, 32), "float32", 3)]])
    assert not report.ok and not report.missing
    [verdict] = report.redundant
    assert verdict.line == at + 2 and verdict.race is None and verdict.reached
    # every schedule, then the other inputs, before "redundant"
    assert verdict.schedules == (*barriers.SCHEDULES, "forward with inputs 2")
    assert "REDUNDANT" in report.summary()


def test_barrier_in_code_that_never_runs_is_unreached():
    kernel = core.compile(_transpose(), out_idx=[1])
    lines = kernel.msl.splitlines()
    [at] = [i for i, line in enumerate(lines) if BARRIER in line]
    dead = ["  for (int z = 1; z < 1; ++z) {", "    " + BARRIER, "  }"]
    msl = "\n".join(lines[:at + 1] + dead + lines[at + 1:])
    padded = Kernel(dataclasses.replace(kernel.compiled, msl=msl), kernel.out_idx)
    report = barriers.check_barriers(padded, [random_tensor((24, 24), "float32", 4)])
    first, second = report.barriers
    assert first.necessary and first.reached
    assert not second.necessary and not second.reached and report.unreached == [second]
    assert "never reached" in str(second)


def test_missing_barrier_is_reported():
    kernel = core.compile(_transpose(), out_idx=[1], disable=("thread_sync",))
    report = barriers.check_barriers(kernel, [random_tensor((24, 24), "float32", 5)], schedules=("forward",))
    assert report.barriers == () and report.missing and not report.ok
    assert all(f.kind == "race" for f in report.missing)


def test_removing_a_barrier_keeps_line_numbers():
    msl = f"kernel void a() {{\n  x = 1;\n  {BARRIER}\n  y = 2; {BARRIER}\n}}\n"
    assert barriers.barrier_lines(msl) == [3, 4]
    second = barriers.without_barrier(msl, 1)
    assert second.count("\n") == msl.count("\n")
    assert barriers.barrier_lines(second) == [3]
    assert "y = 2; /* barrier removed */;" in second
    assert barriers.kernel_of_line(msl, 4) == "a"


def test_check_case_on_a_family_case(test_families):
    params = {"n": 16, "threads": 64, "dtype": "float16"}
    report = barriers.check_case("staged_transpose", params, seed=3)
    assert report.ok and len(report.necessary) == 1
    broken = barriers.check_case("staged_transpose", params, disable=("thread_sync",),
                                 schedules=("forward",))
    assert broken.missing


@pytest.mark.parametrize("text", ["", "kernel void"])
def test_kernel_of_line_without_a_kernel(text):
    assert barriers.kernel_of_line(text, 1) == ""


def _conditional_store():
    # Thread (i, j) overwrites element (3 - i, j), copied in by another thread, only
    # where A > 1: whether a barrier is needed depends on the data.
    @T.prim_func
    def k(A: T.Tensor((4, 4), "float32"), B: T.Tensor((4, 4), "float32"),
          C: T.Tensor((4, 4), "float32")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((4, 4), "float32")
            T.copy(B, S)
            for i, j in T.Parallel(4, 4):
                if A[3 - i, j] > 1.0:
                    S[3 - i, j] = A[3 - i, j]
            T.copy(S, C)
    return k


def test_data_dependent_barriers_need_inputs_that_take_the_branch():
    kernel = core.compile(_conditional_store(), out_idx=[2])
    args = [torch.zeros(4, 4), random_tensor((4, 4), "float32", 6)]   # A > 1 nowhere: no store, no race
    assert len(barriers.check_barriers(kernel, args).redundant) == 2
    report = barriers.check_barriers(kernel, args, more_args=barriers.extremes(args))
    assert report.ok and len(report.necessary) == 2
    assert all(b.schedules[-1] == "forward with inputs 2" for b in report.barriers)


def test_extremes_push_every_element_both_ways():
    args = [random_tensor((8,), "float32", 7), random_tensor((8,), "int8", 8, low=-50, high=50),
            random_tensor((8,), "uint8", 9, low=0, high=50), random_tensor((8,), "bool", 10), 3]
    high, low = barriers.extremes(args)
    assert bool((high[0] >= 100).all()) and bool((low[0] <= -100).all())
    assert bool((high[1] >= 120).all()) and bool((low[1] <= -121).all())
    assert bool((high[2] >= 248).all()) and bool((low[2] <= 7).all())
    assert bool(high[3].all()) and not bool(low[3].any())
    assert high[4] == low[4] == 3
    assert [a.dtype for a in high[:4]] == [a.dtype for a in args[:4]]


DEAD_READS = """\
#include <metal_stdlib>
using namespace metal;

[[kernel, max_total_threads_per_threadgroup(32)]] void k(
    const device float* A [[buffer(0)]],
    device float* B [[buffer(1)]],
    uint3 tgid [[threadgroup_position_in_grid]],
    uint3 tpos [[thread_position_in_threadgroup]]) {
  const int v = int(tpos.x);
  threadgroup float S[1];
  if (v < 1) {
    S[0] = A[0];
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float y = S[0] * 2.0f;
  if (v < 1) {
    B[0] = y;
  }
}
"""


def test_a_barrier_guarding_reads_nobody_uses_is_still_necessary():
    # Every thread reads S[0], only thread 0 uses the value: the optimizer deletes the
    # other reads, so the plain MSL shows no race without the barrier; MSL still races.
    @T.prim_func
    def k(A: T.Tensor((1,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(1):
                B[i] = A[i] * 2.0
    kernel = core.compile(k, out_idx=[1])
    kernel = Kernel(dataclasses.replace(kernel.compiled, msl=DEAD_READS), kernel.out_idx)
    a = random_tensor((1,), "float32", 11)
    plain = emu.run_msl(barriers.without_barrier(DEAD_READS, 0), "k", threadgroup=(32, 1, 1),
                        buffers=[a, torch.zeros(1)])
    assert not plain.findings
    assert "threadgroup volatile float S[1];" in barriers.observable(DEAD_READS)
    [verdict] = barriers.check_barriers(kernel, [a]).barriers
    assert verdict.necessary and verdict.race.address_space == "threadgroup"


def test_observable_leaves_address_taken_arrays_alone():
    msl = ("  threadgroup float S[64];\n  threadgroup float T[64];\n"
           "  threadgroup bfloat U[64];\n  simdgroup_load(m, &S[0], 8);\n"
           "  x = *(threadgroup float4*)(T + 4);\n  U[0] = bfloat(0.0f);\n")
    assert barriers.observable(msl) == msl


def _finding_keys(findings):
    return sorted((f.kind, f.kernel, f.group, f.thread, f.address_space, f.buffer_or_offset,
                   f.line, f.count) for f in findings)


def test_a_barrier_switched_off_at_run_time_is_the_barrier_blanked():
    # The check's one build: the launch skips the barrier on a line. Findings, buffers and
    # counters are those of the MSL with the statement blanked (the old way, one build
    # per barrier), and the next launch has the barrier again.
    kernel = core.compile(_transpose(), out_idx=[1])
    msl = barriers.observable(kernel.msl)
    [line] = barriers.barrier_lines(msl)
    a = random_tensor((24, 24), "float32", 7)
    run = dict(grid=(1, 1, 1), threadgroup=(128, 1, 1), checks=("races",))
    blanked_out = torch.zeros(24, 24)
    blanked = emu.run_msl(barriers.without_barrier(msl, 0), "k", buffers=[a, blanked_out], **run)
    off_out = torch.zeros(24, 24)
    with emu.barrier_switched_off(line):
        off = emu.run_msl(msl, "k", buffers=[a, off_out], **run)
    assert blanked.findings and _finding_keys(off.findings) == _finding_keys(blanked.findings)
    assert off.stats["barriers"] == blanked.stats["barriers"] == 0
    assert {k: v for k, v in off.stats.items() if k != "seconds"} == \
        {k: v for k, v in blanked.stats.items() if k != "seconds"}
    assert torch.equal(off_out.view(torch.int32), blanked_out.view(torch.int32))  # bits, NaNs too
    again = emu.run_msl(msl, "k", buffers=[a, torch.zeros(24, 24)], **run)
    assert not again.findings and again.stats["barriers"] == 1


def test_barrier_switched_off_takes_a_line():
    with pytest.raises(emu.LaunchError, match="1-based MSL line, got 0"):
        with emu.barrier_switched_off(0):
            pass


def test_the_check_builds_the_kernel_once(monkeypatch):
    # Two barriers back to back (each one alone redundant: the other orders the accesses),
    # three schedules each: one emulator build of the observable MSL.
    from core.runtime.emu import build
    kernel = core.compile(_transpose(), out_idx=[1])
    lines = kernel.msl.splitlines()
    [at] = [i for i, line in enumerate(lines) if BARRIER in line]
    msl = "\n".join(lines[:at + 1] + ["  " + BARRIER] + lines[at + 1:])
    padded = Kernel(dataclasses.replace(kernel.compiled, msl=msl), kernel.out_idx)
    built = []
    original = build.Builder.build
    monkeypatch.setattr(build.Builder, "build", lambda self, translation, *a, **k: (
        built.append(translation.source), original(self, translation, *a, **k))[1])
    report = barriers.check_barriers(padded, [random_tensor((24, 24), "float32", 8)])
    first, second = report.barriers
    assert report.redundant == [first, second] and first.reached and second.reached
    assert all(b.schedules == barriers.SCHEDULES for b in report.barriers)
    assert len(set(built)) == 1 and built[0] == barriers.observable(msl)

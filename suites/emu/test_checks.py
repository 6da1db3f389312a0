"""The checker: races (threadgroup and device), uninitialized reads, out-of-bounds
accesses, divergent barriers, crashes and hangs — each reported, never fatal to the caller."""

import numpy as np
import pytest

from core.errors import KernelCrashError, KernelTimeoutError, LaunchError
from emucase import clean, line_of, run

STAGE = r"""
kernel void reverse_tile(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                         uint tid [[thread_index_in_threadgroup]],
                         uint g [[threadgroup_position_in_grid]]) {
  threadgroup float tile[256];
  tile[tid] = x[g * 256 + tid];
  BARRIER
  y[g * 256 + tid] = tile[255 - tid];
}
"""
WITH_BARRIER = STAGE.replace("BARRIER", "threadgroup_barrier(mem_flags::mem_threadgroup);")
WITHOUT_BARRIER = STAGE.replace("BARRIER", "")


def test_staged_reverse_with_barrier_is_clean_and_correct(rng):
    x = rng.standard_normal(4 * 256).astype(np.float32)
    y = np.zeros_like(x)
    clean(WITH_BARRIER, "reverse_tile", 4, 256, x, y)
    np.testing.assert_array_equal(y, x.reshape(4, 256)[:, ::-1].reshape(-1))


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random"])
def test_missing_barrier_is_a_race_under_every_schedule(schedule, rng):
    x = rng.standard_normal(256).astype(np.float32)
    y = np.zeros_like(x)
    res = run(WITHOUT_BARRIER, "reverse_tile", 1, 256, x, y, schedule=schedule, seed=5)
    races = res.by_kind("race")
    assert races, "a missing barrier must be reported whatever the order"
    assert {f.address_space for f in races} == {"threadgroup"}
    assert all("'tile'" in f.buffer_or_offset for f in races)
    lines = {f.line for f in races}
    assert lines <= {line_of(WITHOUT_BARRIER, "tile[tid] ="), line_of(WITHOUT_BARRIER, "tile[255 - tid]")}


def test_unnecessary_barrier_gives_no_race():
    # Each thread reads only what it wrote itself: the barrier is redundant, and removing
    # it must not produce a race finding.
    src = r"""
kernel void own(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float t[64];
  t[tid] = float(tid);
  OPTIONAL
  y[tid] = t[tid] * 2.0f;
}
"""
    for variant in ("threadgroup_barrier(mem_flags::mem_threadgroup);", ""):
        y = np.zeros(64, np.float32)
        clean(src.replace("OPTIONAL", variant), "own", 1, 64, y)
        np.testing.assert_array_equal(y, 2 * np.arange(64))


def test_double_buffering_race_across_loop_iterations():
    # Iteration i+1 overwrites the buffer others may still read from iteration i.
    src = r"""
kernel void loop(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float t[32];
  float acc = 0.0f;
  for (int i = 0; i < 4; ++i) {
    t[tid] = x[i * 32 + tid];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    acc += t[31 - tid];
    TRAILING
  }
  y[tid] = acc;
}
"""
    x = np.arange(128, dtype=np.float32)
    y = np.zeros(32, np.float32)
    racy = run(src.replace("TRAILING", ""), "loop", 1, 32, x, y)
    assert racy.by_kind("race")
    clean(src.replace("TRAILING", "threadgroup_barrier(mem_flags::mem_threadgroup);"), "loop", 1, 32, x, y)
    np.testing.assert_array_equal(y, x.reshape(4, 32)[:, ::-1].sum(0))


def test_device_race_across_threadgroups():
    src = r"""
kernel void clash(device float* y [[buffer(0)]], uint g [[threadgroup_position_in_grid]],
                  uint tid [[thread_index_in_threadgroup]]) {
  if (tid == 0) y[0] = float(g);
}
"""
    res = run(src, "clash", 4, 32, np.zeros(1, np.float32))
    races = res.by_kind("race")
    assert len(races) == 1 and races[0].address_space == "device"
    assert "another threadgroup" in races[0].detail and "'y'" in races[0].buffer_or_offset


def test_device_race_within_a_threadgroup_and_mem_device_barrier():
    src = r"""
kernel void shift(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  y[tid] = float(tid);
  FLAGS
  float v = y[(tid + 1) % 64];
  FLAGS
  y[tid] = v;
}
"""
    res = run(src.replace("FLAGS", ""), "shift", 1, 64, np.zeros(64, np.float32))
    assert any("same barrier interval" in f.detail for f in res.by_kind("race"))
    # A threadgroup-memory barrier does not order device memory...
    res = run(src.replace("FLAGS", "threadgroup_barrier(mem_flags::mem_threadgroup);"), "shift", 1,
              64, np.zeros(64, np.float32))
    assert res.by_kind("race")
    # ...a device-memory barrier does.
    y = np.zeros(64, np.float32)
    clean(src.replace("FLAGS", "threadgroup_barrier(mem_flags::mem_device);"), "shift", 1, 64, y)
    np.testing.assert_array_equal(y, (np.arange(64) + 1) % 64)


def test_reads_of_one_input_by_every_threadgroup_are_not_races(rng):
    src = r"""
kernel void bcast(device const float* w [[buffer(0)]], device float* y [[buffer(1)]],
                  uint i [[thread_position_in_grid]]) {
  y[i] = w[0] + w[i % 4];
}
"""
    w = rng.standard_normal(4).astype(np.float32)
    y = np.zeros(256, np.float32)
    clean(src, "bcast", 8, 32, w, y)
    np.testing.assert_array_equal(y, w[0] + w[np.arange(256) % 4])  # one float add: exact


def test_uninitialized_threadgroup_read_is_reported_and_poisoned():
    src = r"""
kernel void partial(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float t[64];
  if (tid < 32) t[tid] = 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid] = t[tid];
}
"""
    y = np.zeros(64, np.float32)
    res = run(src, "partial", 1, 64, y)
    (f,) = res.findings
    assert f.kind == "uninit" and f.thread == (32, 0, 0) and f.count == 32
    assert f.line == line_of(src, "y[tid] = t[tid]") and "'t', byte 128" in f.buffer_or_offset
    assert (y[:32] == 1).all() and np.isnan(y[32:]).all()  # poison reads as NaN


def test_out_of_bounds_device_access_is_reported_not_fatal():
    src = r"""
kernel void over(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                 uint i [[thread_position_in_grid]]) {
  y[i] = x[i + 4];
}
"""
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    res = run(src, "over", 2, 32, x, y)
    (f,) = res.findings
    assert f.kind == "bounds" and f.count == 4 and "'x'" in f.buffer_or_offset
    assert "which holds 256 bytes" in f.detail
    np.testing.assert_array_equal(y[:60], x[4:])


def test_out_of_bounds_threadgroup_access_is_reported():
    src = r"""
kernel void tg_over(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float a[32];
  threadgroup float b[32];
  a[tid] = 1.0f;
  b[tid] = 2.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid] = a[tid + 1];
}
"""
    res = run(src, "tg_over", 1, 32, np.zeros(32, np.float32))
    (f,) = res.findings
    assert f.kind == "bounds" and f.address_space == "threadgroup" and f.thread == (31, 0, 0)


def test_barrier_not_reached_by_all_threads_is_reported_not_a_hang():
    src = r"""
kernel void early(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  if (tid >= 48) return;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  y[tid] = 1.0f;
}
"""
    y = np.zeros(64, np.float32)
    res = run(src, "early", 1, 64, y)
    (f,) = res.findings
    assert f.kind == "divergence" and "reached by 48 of 64 threads" in f.detail
    assert (y[:48] == 1).all()


def test_threads_at_different_barriers_are_reported():
    src = r"""
kernel void split(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  if (tid < 16) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  } else {
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  y[tid] = 1.0f;
}
"""
    res = run(src, "split", 1, 32, np.zeros(32, np.float32))
    assert any("different threadgroup_barrier calls" in f.detail for f in res.by_kind("divergence"))


def test_crash_is_a_clear_error_and_the_caller_survives():
    src = r"""
kernel void wild(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  device float* p = (device float*)(0x10ul + i);
  y[i] = *p;
}
"""
    with pytest.raises(KernelCrashError, match=r"kernel 'wild'.*invalid memory access.*threadgroup \(0, 0, 0\)"):
        run(src, "wild", 1, 4, np.zeros(4, np.float32))
    clean(WITH_BARRIER, "reverse_tile", 1, 256, np.zeros(256, np.float32), np.zeros(256, np.float32))


def test_fiber_stack_overflow_is_named_and_a_larger_stack_runs():
    # 12 KiB of locals on an 8 KiB stack (+ its cache-colour slack) reach the guard page
    # below the stack (the stacks of a worker share one mapping, a guard under each).
    src = r"""
kernel void deep(device float* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  float big[3072];
  for (uint i = 0; i < 3072; ++i) big[i] = float(i + tid);
  out[tid] = big[(tid * 37) % 3072];
}
"""
    out = np.zeros(64, np.float32)
    with pytest.raises(KernelCrashError, match=r"kernel 'deep'.*fiber stack overflow"):
        run(src, "deep", 1, 64, out, stack_bytes=8192)
    clean(src, "deep", 1, 64, out, stack_bytes=65536)
    tid = np.arange(64)
    np.testing.assert_array_equal(out, ((tid * 37) % 3072 + tid).astype(np.float32))


def test_endless_kernel_hits_the_watchdog():
    src = r"""
kernel void spin(device atomic_uint* flag [[buffer(0)]]) {
  while (atomic_load_explicit(&flag[0], memory_order_relaxed) == 0u) {}
  atomic_store_explicit(&flag[1], 1u, memory_order_relaxed);
}
"""
    with pytest.raises(KernelTimeoutError, match=r"kernel 'spin'.*did not finish within 2 s"):
        run(src, "spin", 1, 1, np.zeros(2, np.uint32), timeout=2, checks=())


def test_threadgroup_memory_over_32_kib_is_a_launch_error():
    src = r"""
kernel void big(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup float t[9000];
  t[tid] = 0.0f;
  y[tid] = t[tid];
}
"""
    with pytest.raises(LaunchError, match="36000 bytes.*at most 32768"):
        run(src, "big", 1, 1, np.zeros(1, np.float32))

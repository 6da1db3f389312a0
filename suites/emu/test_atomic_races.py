"""The checker's rules for atomics: an atomic never races with another atomic; a plain read
or write of the same bytes by another thread in the same barrier interval (or by another
threadgroup) races with it (core/runtime/emu/include/mt_atomic.h)."""

import numpy as np
import pytest

from emucase import clean, line_of, run

DEVICE = r"""
kernel void k(device atomic_float* acc [[buffer(0)]], device float* out [[buffer(1)]],
              uint t [[thread_index_in_threadgroup]], uint g [[threadgroup_position_in_grid]]) {
  atomic_fetch_add_explicit(&acc[g], 1.0f, memory_order_relaxed);
  BETWEEN
  if (t == 0) out[g] = PLAIN;
}
"""


def _device(between, plain, groups=2):
    src = DEVICE.replace("BETWEEN", between).replace("PLAIN", plain)
    acc = np.zeros(groups, np.float32)
    out = np.zeros(groups, np.float32)
    return src, run(src, "k", groups, 64, acc, out), acc, out


def test_atomics_of_many_threads_and_groups_are_not_races():
    src = r"""
kernel void k(device atomic_int* a [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  atomic_fetch_add_explicit(&a[0], 1, memory_order_relaxed);
  atomic_fetch_max_explicit(&a[1], int(i), memory_order_relaxed);
  (void)atomic_load_explicit(&a[0], memory_order_relaxed);
}
"""
    a = np.zeros(2, np.int32)
    clean(src, "k", 4, 64, a, workers=2)
    assert a.tolist() == [256, 255]


def test_plain_read_of_an_atomic_sum_after_a_device_barrier_is_clean():
    _, res, acc, out = _device("threadgroup_barrier(mem_flags::mem_device);",
                               "((device float*)acc)[g]")
    assert res.findings == []
    assert acc.tolist() == [64.0, 64.0] and out.tolist() == [64.0, 64.0]


def test_plain_read_racing_atomic_updates_is_a_race():
    src, res, _, _ = _device("", "((device float*)acc)[g]")
    races = [f for f in res.findings if f.kind == "race"]
    assert races and all(f.address_space == "device" for f in races)
    assert any("atomic update" in f.detail for f in races)
    assert {f.line for f in races} <= {line_of(src, "out[g] ="), line_of(src, "atomic_fetch_add")}


def test_plain_write_racing_atomics_of_another_threadgroup_is_a_race():
    src = r"""
kernel void k(device atomic_float* acc [[buffer(0)]], uint g [[threadgroup_position_in_grid]],
              uint t [[thread_index_in_threadgroup]]) {
  if (g == 0 && t == 0) ((device float*)acc)[0] = 0.0f;   // no barrier orders threadgroups
  if (g == 1) atomic_fetch_add_explicit(&acc[0], 1.0f, memory_order_relaxed);
}
"""
    res = run(src, "k", 2, 32, np.zeros(1, np.float32))
    races = [f for f in res.findings if f.kind == "race"]
    assert races, res.findings
    assert "another threadgroup" in races[0].detail


def test_threadgroup_atomics_then_plain_reads_need_the_barrier():
    body = r"""
kernel void k(device int* out [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
  threadgroup atomic_int count[2];
  if (t < 2) atomic_store_explicit(&count[t], 0, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&count[t % 2], 1, memory_order_relaxed);
  BETWEEN
  out[t] = ((threadgroup int*)count)[(t + 1) % 2];
}
"""
    out = np.zeros(64, np.int32)
    clean(body.replace("BETWEEN", "threadgroup_barrier(mem_flags::mem_threadgroup);"),
          "k", 1, 64, out)
    assert (out == 32).all()
    res = run(body.replace("BETWEEN", ""), "k", 1, 64, np.zeros(64, np.int32))
    races = [f for f in res.findings if f.kind == "race"]
    assert races and races[0].address_space == "threadgroup"
    assert "atomic" in races[0].detail


def test_plain_reads_beside_atomic_loads_are_clean_but_a_plain_write_is_not():
    body = r"""
kernel void k(device atomic_int* a [[buffer(0)]], device int* out [[buffer(1)]],
              uint t [[thread_index_in_threadgroup]]) {
  out[t] = atomic_load_explicit(&a[0], memory_order_relaxed) + ((device int*)a)[0];
  WRITE
}
"""
    a = np.array([5], np.int32)
    out = np.zeros(32, np.int32)
    clean(body.replace("WRITE", ""), "k", 1, 32, a, out)
    assert (out == 10).all()
    res = run(body.replace("WRITE", "if (t == 7) ((device int*)a)[0] = 1;"), "k", 1, 32,
              np.array([5], np.int32), np.zeros(32, np.int32))
    assert any(f.kind == "race" for f in res.findings)


@pytest.mark.parametrize("space", ["device", "threadgroup"])
def test_an_atomic_past_the_end_is_a_bounds_finding(space):
    if space == "device":
        src = r"""
kernel void k(device atomic_int* a [[buffer(0)]]) {
  atomic_fetch_add_explicit(&a[4], 1, memory_order_relaxed);
}
"""
    else:
        src = r"""
kernel void k(device int* out [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
  threadgroup atomic_int c[4];
  threadgroup int pad[64];
  pad[t] = 0;
  atomic_store_explicit(&c[t % 4], 0, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&c[4 + t % 4 * 0], 1, memory_order_relaxed);
  out[0] = 0;
}
"""
    res = run(src, "k", 1, 1, np.zeros(4, np.int32))
    assert [f.kind for f in res.findings] == ["bounds"], res.findings
    assert "atomic update" in res.findings[0].detail

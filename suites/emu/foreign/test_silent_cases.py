"""Two constructs that once ran wrongly without a word: a threadgroup array with an
initializer (every thread initializes the one shared array, a race reported at the
declaration), and an out-of-range index into a thread-private array (a bounds finding at
the MSL line, before the access, not a SIGSEGV)."""

from __future__ import annotations

import numpy as np
import pytest

from core.runtime import emu
from foreigncase import msl_line, run_clean

INITIALIZED = """\
#include <metal_stdlib>
using namespace metal;
kernel void acc(device float* out [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
  threadgroup float buf[32] = {0};
  buf[t] += 1.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[t] = buf[t];
}
"""


def test_a_threadgroup_initializer_runs_in_every_thread_and_is_reported_as_a_race():
    """Kernel-scope `threadgroup float buf[32] = {0};` (MLX ships it): every thread that
    reaches the declaration stores the initial values into the one shared array (C++'s
    block-scope rule), so the values are there for whoever reads after a barrier, and the
    threads' identical stores are a race under Metal's memory model: a finding at the
    declaration, not a build error."""
    out = np.full(32, 7.0, np.float32)
    res = emu.run_msl(INITIALIZED, "acc", 1, 32, [out])
    races = [f for f in res.findings if f.kind == "race"]
    assert races and {f.line for f in res.findings} >= {msl_line(INITIALIZED,
                                                                  "threadgroup float buf")}
    assert all("'buf'" in f.buffer_or_offset for f in races)
    assert {f.line for f in races} <= {msl_line(INITIALIZED, "threadgroup float buf"),
                                       msl_line(INITIALIZED, "buf[t] += 1.0f")}


def test_threadgroup_initializers_of_scalars_and_nested_arrays_hold_their_values():
    src = """\
#include <metal_stdlib>
using namespace metal;
kernel void acc(device float* out [[buffer(0)]], uint t [[thread_index_in_threadgroup]]) {
  threadgroup int count{3};
  threadgroup float grid2[2][4] = {{1, 2, 3, 4},
                                   {5, 6, 7, 8}};
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[t] = float(count) + grid2[t / 4 % 2][t % 4];
}
"""
    out = np.zeros(8, np.float32)
    res = emu.run_msl(src, "acc", 1, 8, [out])
    np.testing.assert_array_equal(out, np.arange(1, 9, dtype=np.float32) + 3)
    assert {f.kind for f in res.findings} == {"race"}
    assert {f.line for f in res.findings} <= {msl_line(src, "threadgroup int count"),
                                              msl_line(src, "threadgroup float grid2")}


def test_threadgroup_pointer_with_an_initializer_is_not_a_threadgroup_variable():
    src = """\
#include <metal_stdlib>
using namespace metal;
kernel void via_pointer(device float* out [[buffer(0)]],
                        uint t [[thread_index_in_threadgroup]]) {
  threadgroup float buf[32];
  threadgroup float* p = &buf[0];
  p[t] = float(t) * 2.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[t] = p[31 - t];
}
"""
    out = np.zeros(32, np.float32)
    run_clean(src, "via_pointer", 1, 32, [out])
    np.testing.assert_array_equal(out, (31 - np.arange(32)) * 2.0)


PRIVATE = """\
#include <metal_stdlib>
using namespace metal;
kernel void window(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
                   constant int& shift [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  float w[4];
  for (int k = 0; k < 4; ++k) w[k] = x[i * 4 + k];
  w[int(i) - shift] = 0.0f;
  y[i] = w[0] + w[1] + w[2] + w[3];
}
"""


def test_in_range_private_array_indices_run_clean():
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(8, np.float32)
    run_clean(PRIVATE, "window", 1, 4, [x, y, np.array([0], np.int32)])
    expect = x.reshape(8, 4).sum(1)
    expect[:4] -= x.reshape(8, 4)[np.arange(4), np.arange(4)]
    np.testing.assert_array_equal(y[:4], expect[:4])


@pytest.mark.parametrize("shift, bad", [(1, -1), (-4, 4)])
def test_out_of_range_private_array_index_is_a_bounds_finding_at_its_line(shift, bad):
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(8, np.float32)
    res = emu.run_msl(PRIVATE, "window", grid=1, threadgroup=4,
                      buffers=[x, y, np.array([shift], np.int32)])
    (f,) = res.findings
    assert f.kind == "bounds" and f.address_space == "thread"
    assert f.line == msl_line(PRIVATE, "w[int(i) - shift] = 0.0f;")
    assert f"index {bad} is out of bounds for the array type 'float[4]'" in f.detail
    assert f.thread == (0, 0, 0)   # the forward schedule runs thread 0 first


def test_an_uninitialized_thread_variable_shows_as_poison_not_zero():
    # MSL leaves it unspecified; the emulator starts thread variables as clang's pattern
    # (float/half NaN, integer bytes 0xAA), so a result built from one is visibly wrong
    src = """\
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* y [[buffer(0)]], device int* z [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  float v;
  int n;
  if (i % 2 == 0) { v = 1.5f; n = 3; }
  y[i] = v;
  z[i] = n;
}
"""
    y = np.zeros(4, np.float32)
    z = np.zeros(4, np.int32)
    res = emu.run_msl(src, "k", grid=1, threadgroup=4, buffers=[y, z])
    assert res.findings == []
    np.testing.assert_array_equal(y[0::2], 1.5)
    assert np.isnan(y[1::2]).all()
    np.testing.assert_array_equal(z, [3, np.uint32(0xAAAAAAAA).view(np.int32), 3,
                                      np.uint32(0xAAAAAAAA).view(np.int32)])

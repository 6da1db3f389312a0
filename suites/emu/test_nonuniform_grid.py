"""Grids given in threads (`run_msl(threads=...)`, Metal's dispatchThreads) that are not
whole threadgroups: the last threadgroup of a dimension holds the threads left, and its
threads see its own size (threads_per_threadgroup, thread_index_in_threadgroup, a partial
last simdgroup), as MLX's host code launches its split-K accumulation
(harness/bench/peers/mlx_qmm.py) and Apple GPUs run it."""

import numpy as np
import pytest

from core.errors import LaunchError
from emucase import clean, run

POSITIONS = r"""
kernel void where(device uint4* out [[buffer(0)]],
                  uint2 gid [[thread_position_in_grid]],
                  uint2 size [[threads_per_threadgroup]],
                  uint2 grid [[threads_per_grid]],
                  uint tid [[thread_index_in_threadgroup]],
                  uint sgs [[simdgroups_per_threadgroup]]) {
  out[gid.y * grid.x + gid.x] = uint4(size.x, size.y, tid, sgs * 65536 + grid.x);
}
"""

GROUP_SUM = r"""
kernel void group_sum(device const float* x [[buffer(0)]], device float* sums [[buffer(1)]],
                      device float* y [[buffer(2)]],
                      uint gid [[thread_position_in_grid]],
                      uint g [[threadgroup_position_in_grid]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint n [[threads_per_threadgroup]],
                      uint lane [[thread_index_in_simdgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float partial[2];
  float s = simd_sum(x[gid]);
  if (lane == 0) partial[sg] = s;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float total = partial[0] + ((n + 31) / 32 > 1 ? partial[1] : 0.0f);
  if (tid == 0) sums[g] = total;
  y[gid] = x[gid] - total / n;
}
"""


def test_the_last_threadgroups_hold_the_threads_left():
    out = np.zeros((40, 72, 4), np.uint32)
    res = clean(POSITIONS, "where", 1, (32, 32), out, threads=(72, 40))
    x = np.arange(72)[None, :].repeat(40, 0)
    y = np.arange(40)[:, None].repeat(72, 1)
    size_x = np.where(x >= 64, 8, 32)
    size_y = np.where(y >= 32, 8, 32)
    assert np.array_equal(out[..., 0], size_x)
    assert np.array_equal(out[..., 1], size_y)
    # the linear index within the threadgroup runs over its own width
    assert np.array_equal(out[..., 2], x % 32 + (y % 32) * size_x)
    simdgroups = -(-(size_x * size_y) // 32)
    assert np.array_equal(out[..., 3], simdgroups * 65536 + 72)
    # 6 threadgroups: two of 32 x 32, one 8 x 32, two 32 x 8, one 8 x 8; no thread outside
    # the 72 x 40
    assert res.stats["groups"] == 6 and res.stats["threads"] == 72 * 40
    assert res.stats["simdgroups"] == 2 * 32 + 8 + 2 * 8 + 2


def test_a_partial_threadgroup_meets_at_barriers_and_simd_sums():
    # 100 threads in groups of 64: the second holds 36, its second simdgroup 4 lanes
    x = np.arange(100, dtype=np.float32)
    sums = np.zeros(2, np.float32)
    y = np.zeros(100, np.float32)
    res = clean(GROUP_SUM, "group_sum", 1, 64, x, sums, y, threads=100)
    assert np.array_equal(sums, [x[:64].sum(), x[64:].sum()])
    # one float32 division and subtraction each, as numpy rounds them: exact
    mean = np.float32(x[64:].sum()) / np.float32(36)
    assert np.array_equal(y[64:], x[64:] - mean)
    assert res.stats["barriers"] == 2 and res.stats["threads"] == 100
    assert res.stats["simd_reduce_ops"] == 4                # 2 simdgroups a group


def test_whole_threadgroups_given_in_threads_are_the_grid_launch():
    a, b = np.zeros((40, 64, 4), np.uint32), np.zeros((40, 64, 4), np.uint32)
    by_threads = clean(POSITIONS, "where", 1, (32, 8), a, threads=(64, 40))
    by_groups = clean(POSITIONS, "where", (2, 5), (32, 8), b)
    assert np.array_equal(a, b)
    assert by_threads.stats == by_groups.stats


def test_a_race_in_a_partial_threadgroup_is_found():
    body = r"""
kernel void racy(device float* y [[buffer(0)]], uint tid [[thread_index_in_threadgroup]],
                 uint n [[threads_per_threadgroup]]) {
  threadgroup float t[64];
  t[tid] = float(tid);
  y[tid] = t[n - 1 - tid];       // no barrier between the write and another's read
}
"""
    y = np.zeros(64, np.float32)
    res = run(body, "racy", 1, 64, y, threads=40)
    assert any(f.kind == "race" for f in res.findings), res.findings


def test_grid_and_threads_together_are_refused():
    with pytest.raises(LaunchError, match="not both"):
        run(POSITIONS, "where", (2, 1), (32, 1), np.zeros((1, 64, 4), np.uint32),
            threads=(64, 1))

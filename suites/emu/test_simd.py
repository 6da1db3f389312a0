"""Barriers and simdgroup collectives: shuffles, broadcasts, reductions, scans, votes,
with full and partial simdgroups and every schedule."""

import numpy as np
import pytest

from emucase import clean, line_of, run
from harness.check.compare import assert_close

SHUFFLES = r"""
kernel void shuffles(device const int* x [[buffer(0)]], device int* out [[buffer(1)]],
                     uint tid [[thread_index_in_threadgroup]]) {
  int v = x[tid];
  device int* o = out + tid * 12;
  o[0] = simd_shuffle(v, 3);
  o[1] = simd_shuffle_xor(v, 5);
  o[2] = simd_shuffle_up(v, 2);
  o[3] = simd_shuffle_down(v, 2);
  o[4] = simd_broadcast(v, 7);
  o[5] = simd_sum(v);
  o[6] = simd_max(v);
  o[7] = simd_min(v);
  o[8] = simd_prefix_inclusive_sum(v);
  o[9] = simd_prefix_exclusive_sum(v);
  o[10] = simd_broadcast_first(v);
  o[11] = simd_shuffle_rotate_down(v, 1);
}
"""


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random"])
def test_shuffles_and_reductions_full_simdgroups(schedule, rng):
    n = 64
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros((n, 12), np.int32)
    clean(SHUFFLES, "shuffles", 1, n, x, out, schedule=schedule, seed=7)
    lane = np.arange(n) % 32
    base = np.arange(n) - lane
    sg = x.reshape(2, 32)
    np.testing.assert_array_equal(out[:, 0], x[base + 3])
    np.testing.assert_array_equal(out[:, 1], x[base + (lane ^ 5)])
    np.testing.assert_array_equal(out[:, 2], np.where(lane >= 2, x[base + lane - 2], x))
    np.testing.assert_array_equal(out[:, 3], np.where(lane < 30, x[np.minimum(base + lane + 2, n - 1)], x))
    np.testing.assert_array_equal(out[:, 4], x[base + 7])
    np.testing.assert_array_equal(out[:, 5], np.repeat(sg.sum(1), 32))
    np.testing.assert_array_equal(out[:, 6], np.repeat(sg.max(1), 32))
    np.testing.assert_array_equal(out[:, 7], np.repeat(sg.min(1), 32))
    np.testing.assert_array_equal(out[:, 8], np.cumsum(sg, 1).reshape(-1))
    np.testing.assert_array_equal(out[:, 9], (np.cumsum(sg, 1) - sg).reshape(-1))
    np.testing.assert_array_equal(out[:, 10], x[base])
    np.testing.assert_array_equal(out[:, 11], x[base + (lane + 1) % 32])


def test_partial_last_simdgroup_reduces_over_its_lanes(rng):
    n = 48  # simdgroup 1 has 16 lanes
    x = rng.integers(-50, 50, n).astype(np.int32)
    out = np.zeros((n, 12), np.int32)
    clean(SHUFFLES, "shuffles", 1, n, x, out)
    np.testing.assert_array_equal(out[32:, 5], np.full(16, x[32:].sum()))
    np.testing.assert_array_equal(out[32:, 6], np.full(16, x[32:].max()))
    # rotate wraps inside the 16 existing lanes
    np.testing.assert_array_equal(out[32:, 11], x[32 + (np.arange(16) + 1) % 16])


def test_shuffle_from_a_missing_lane_is_a_divergence_finding():
    src = r"""
kernel void far(device int* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  out[tid] = simd_shuffle_xor(int(tid), 16);
}
"""
    out = np.zeros(48, np.int32)  # simdgroup 1 has lanes 0..15 only
    res = run(src, "far", 1, 48, out)
    div = res.by_kind("divergence")
    assert len(div) == 1 and "reads lane 16" in div[0].detail and "not active" in div[0].detail
    assert div[0].thread == (32, 0, 0) and div[0].count == 16 and div[0].line == line_of(src, "simd_shuffle_xor")
    np.testing.assert_array_equal(out[:32], np.arange(32) ^ 16)
    np.testing.assert_array_equal(out[32:], np.arange(32, 48))  # own value back


def test_simd_sum_float_and_half_and_vectors(rng):
    src = r"""
kernel void sums(device const float* x [[buffer(0)]], device float* f [[buffer(1)]],
                 device half* h [[buffer(2)]], device float4* v [[buffer(3)]],
                 uint tid [[thread_index_in_threadgroup]]) {
  f[tid] = simd_sum(x[tid]);
  h[tid] = simd_sum(half(x[tid]));
  v[tid] = simd_sum(float4(x[tid], 2.0f * x[tid], 1.0f, -x[tid]));
}
"""
    x = rng.standard_normal(32).astype(np.float32)
    f, h, v = np.zeros(32, np.float32), np.zeros(32, np.float16), np.zeros((32, 4), np.float32)
    clean(src, "sums", 1, 32, x, f, h, v)
    assert_close(f, np.full(32, x.sum(dtype=np.float64)), "float32", reduction_length=32,
                 op_class="accumulation")
    hx = x.astype(np.float16)
    acc = hx[0]
    for value in hx[1:]:
        acc = np.float16(acc + value)  # half sums round at every step, in lane order
    np.testing.assert_array_equal(h, np.full(32, acc))
    total = x.sum(dtype=np.float64)
    assert_close(v[0], np.array([total, 2 * total, 32, -total]), "float32", reduction_length=32,
                 op_class="accumulation")


def test_votes(rng):
    src = r"""
kernel void votes(device const int* x [[buffer(0)]], device uint* out [[buffer(1)]],
                  uint tid [[thread_index_in_threadgroup]]) {
  bool p = x[tid] > 0;
  out[tid * 4 + 0] = simd_all(p);
  out[tid * 4 + 1] = simd_any(p);
  out[tid * 4 + 2] = uint(ulong(simd_ballot(p)));
  out[tid * 4 + 3] = simd_is_first();
}
"""
    x = np.where(rng.random(32) < 0.5, 1, -1).astype(np.int32)
    out = np.zeros((32, 4), np.uint32)
    clean(src, "votes", 1, 32, x, out)
    assert (out[:, 0] == int((x > 0).all())).all()
    assert (out[:, 1] == int((x > 0).any())).all()
    assert (out[:, 2] == sum(1 << i for i in range(32) if x[i] > 0)).all()
    np.testing.assert_array_equal(out[:, 3], (np.arange(32) == 0).astype(np.uint32))


def test_simd_calls_after_an_operator_that_could_end_a_type(rng):
    # `a & f(`, `a * f(` and `a > f(` are expressions, not declarations of an overload
    # returning a reference, pointer or template type (translate.rewrite_site_overloads)
    src = r"""
kernel void ops(device const int* x [[buffer(0)]], device int* out [[buffer(1)]],
                uint tid [[thread_index_in_threadgroup]]) {
  int a = x[tid];
  out[tid * 3 + 0] = (a & simd_shuffle_xor(a, 1));
  out[tid * 3 + 1] = a * simd_sum(a);
  out[tid * 3 + 2] = (a > simd_max(a - 1)) ? 1 : 0;
}
"""
    x = rng.integers(-50, 50, 32).astype(np.int32)
    out = np.zeros((32, 3), np.int32)
    clean(src, "ops", 1, 32, x, out)
    np.testing.assert_array_equal(out[:, 0], x & x[np.arange(32) ^ 1])
    np.testing.assert_array_equal(out[:, 1], x * x.sum())
    np.testing.assert_array_equal(out[:, 2], (x > x.max() - 1).astype(np.int32))


def test_active_threads_mask_names_the_lanes_that_call_it():
    # under `if (x[tid] > 0)` only those lanes are active; every lane of a partial last
    # simdgroup (threads 32..47) is active, the missing ones are not
    src = r"""
kernel void active(device const int* x [[buffer(0)]], device uint* out [[buffer(1)]],
                   uint tid [[thread_index_in_threadgroup]]) {
  out[tid * 2 + 0] = uint(ulong(simd_active_threads_mask()));
  out[tid * 2 + 1] = 0u;
  if (x[tid] > 0) out[tid * 2 + 1] = uint(ulong(simd_active_threads_mask()));
}
"""
    chosen = np.arange(48) % 3 == 0
    x = np.where(chosen, 1, -1).astype(np.int32)
    out = np.zeros((48, 2), np.uint32)
    clean(src, "active", 1, 48, x, out)
    full = [0xFFFFFFFF] * 32 + [0xFFFF] * 16
    np.testing.assert_array_equal(out[:, 0], np.array(full, np.uint32))
    taken = [sum(1 << (i % 32) for i in range(g * 32, min(48, g * 32 + 32)) if chosen[i])
             for g in range(2)]
    expect = [taken[i // 32] if chosen[i] else 0 for i in range(48)]
    np.testing.assert_array_equal(out[:, 1], np.array(expect, np.uint32))


REDUCE_256 = r"""
kernel void block_sum(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                      uint tid [[thread_index_in_threadgroup]],
                      uint g [[threadgroup_position_in_grid]],
                      uint lane [[thread_index_in_simdgroup]],
                      uint sg [[simdgroup_index_in_threadgroup]],
                      uint nsg [[simdgroups_per_threadgroup]]) {
  threadgroup float partial[32];
  float v = simd_sum(x[g * 256 + tid]);
  if (lane == 0) partial[sg] = v;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (sg == 0) {
    float s = lane < nsg ? partial[lane] : 0.0f;
    s = simd_sum(s);
    if (lane == 0) out[g] = s;
  }
}
"""


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random"])
def test_block_reduction_over_many_groups(schedule, rng):
    x = rng.standard_normal(64 * 256).astype(np.float32)
    out = np.zeros(64, np.float32)
    res = clean(REDUCE_256, "block_sum", 64, 256, x, out, schedule=schedule, seed=11)
    assert_close(out, x.reshape(64, 256).sum(1, dtype=np.float64), "float32",
                 reduction_length=256, op_class="accumulation")
    assert res.stats["barriers"] == 64
    assert res.stats["groups"] == 64 and res.stats["threads"] == 64 * 256
    assert res.stats["simd_ops"] == 64 * (8 + 1)


def test_runs_are_deterministic_per_schedule_and_seed(rng):
    # The result of a racy kernel depends on the order: same seed, same bytes.
    src = r"""
kernel void order(device uint* out [[buffer(0)]], uint tid [[thread_index_in_threadgroup]]) {
  threadgroup uint last[1];
  last[0] = tid;
  simdgroup_barrier(mem_flags::mem_threadgroup);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  out[tid] = last[0];
}
"""
    seen = {}
    for schedule, seed in [("forward", 0), ("reverse", 0), ("random", 1), ("random", 1), ("random", 2)]:
        out = np.zeros(64, np.uint32)
        run(src, "order", 1, 64, out, schedule=schedule, seed=seed, checks=())
        seen.setdefault((schedule, seed), []).append(out[0])
    assert seen[("forward", 0)] == [63] and seen[("reverse", 0)] == [0]
    assert len(set(seen[("random", 1)])) == 1


def test_simdgroup_barrier_orders_lanes_of_one_simdgroup():
    src = r"""
kernel void neighbours(device float* out [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  threadgroup float t[32];
  t[lane] = float(lane);
  simdgroup_barrier(mem_flags::mem_threadgroup);
  out[lane] = t[(lane + 1) % 32];
}
"""
    out = np.zeros(32, np.float32)
    clean(src, "neighbours", 1, 32, out)
    np.testing.assert_array_equal(out, (np.arange(32) + 1) % 32)


def test_divergent_collectives_on_one_line_run_for_their_own_lanes(rng):
    # Lanes 0..15 take simd_sum, lanes 16..31 simd_max: two different calls on one line,
    # each over the lanes that reach it, as a GPU runs the two arms one after the other.
    src = r"""
kernel void arms(device const int* x [[buffer(0)]], device int* out [[buffer(1)]],
                 uint lane [[thread_index_in_simdgroup]]) {
  out[lane] = lane < 16 ? simd_sum(x[lane]) : simd_max(x[lane]);
}
"""
    x = rng.integers(-100, 100, 32).astype(np.int32)
    out = np.zeros(32, np.int32)
    clean(src, "arms", 1, 32, x, out)
    np.testing.assert_array_equal(out[:16], np.full(16, x[:16].sum()))
    np.testing.assert_array_equal(out[16:], np.full(16, x[16:].max()))


BUTTERFLY = r"""
kernel void row_sum(device const float* x [[buffer(0)]], device float* out [[buffer(1)]],
                    uint tid [[thread_index_in_threadgroup]]) {
  float v = x[tid];
#ifdef BUTTERFLY
  for (ushort mask = 16; mask > 0; mask >>= 1) v += simd_shuffle_xor(v, mask);
#else
  v = simd_sum(v);
#endif
  out[tid] = v;
}
"""


def test_simd_ops_are_counted_by_kind(rng):
    # SHUFFLES per simdgroup: 5 shuffles (shuffle, xor, up, down, rotate), 2 broadcasts
    # (broadcast, broadcast_first), 3 reductions (sum, max, min), 2 prefix scans.
    x = rng.integers(-1000, 1000, 64).astype(np.int32)
    res = clean(SHUFFLES, "shuffles", 1, 64, x, np.zeros((64, 12), np.int32))
    simdgroups = 2
    kinds = {"simd_shuffle_ops": 5, "simd_broadcast_ops": 2, "simd_reduce_ops": 3,
             "simd_scan_ops": 2, "simd_vote_ops": 0, "simd_matrix_load_ops": 0,
             "simd_matrix_store_ops": 0}
    assert {k: res.stats[k] for k in kinds} == {k: simdgroups * n for k, n in kinds.items()}
    assert res.stats["simd_ops"] == simdgroups * 12
    votes = r"""
kernel void votes(device const int* x [[buffer(0)]], device uint* out [[buffer(1)]],
                  uint tid [[thread_position_in_grid]]) {
  bool p = x[tid] > 0;
  out[tid] = uint(simd_all(p)) + uint(simd_any(p)) + uint(ulong(simd_ballot(p)) != 0);
}
"""
    x = np.resize(x, 96)
    out = np.zeros(96, np.uint32)
    res = clean(votes, "votes", 3, 32, x, out)
    p = (x > 0).reshape(3, 32).astype(np.uint32)
    assert (out == np.repeat(p.min(1) + 2 * p.max(1), 32)).all()
    assert res.stats["simd_vote_ops"] == 3 * 3 and res.stats["simd_ops"] == 3 * 3


@pytest.mark.parametrize("form, shuffles, reductions", [("BUTTERFLY", 5, 0), ("SUM", 0, 1)])
def test_a_butterfly_counts_shuffles_and_simd_sum_one_reduction(form, shuffles, reductions,
                                                                 rng):
    x = rng.standard_normal(128).astype(np.float32)
    out = np.zeros_like(x)
    res = clean(f"#define {form}\n" + BUTTERFLY, "row_sum", 1, 128, x, out)
    assert_close(out, np.repeat(x.reshape(4, 32).sum(1, dtype=np.float64), 32), "float32",
                 reduction_length=32, op_class="accumulation")
    assert res.stats["simd_shuffle_ops"] == 4 * shuffles
    assert res.stats["simd_reduce_ops"] == 4 * reductions
    assert res.stats["simd_ops"] == 4 * (shuffles + reductions)


QUADS = r"""
kernel void quads(device const int* x [[buffer(0)]], device int* out [[buffer(1)]],
                  uint tid [[thread_index_in_threadgroup]]) {
  int v = x[tid];
  device int* o = out + tid * 9;
  o[0] = quad_sum(v);
  o[1] = quad_max(v);
  o[2] = quad_min(v);
  o[3] = quad_shuffle(v, 2);
  o[4] = quad_shuffle_xor(v, 1);
  o[5] = quad_shuffle_up(v, 1);
  o[6] = quad_shuffle_down(v, 1);
  o[7] = quad_broadcast(v, 3);
  o[8] = quad_prefix_inclusive_sum(v);
}
"""


@pytest.mark.parametrize("schedule", ["forward", "random"])
def test_quad_functions_work_within_groups_of_four_lanes(schedule, rng):
    """MSL's quad-group functions (MLX's quantized kernels reduce with quad_sum): each quad
    of 4 consecutive lanes combines and exchanges on its own."""
    n = 64
    x = rng.integers(-1000, 1000, n).astype(np.int32)
    out = np.zeros((n, 9), np.int32)
    clean(QUADS, "quads", 1, n, x, out, schedule=schedule, seed=3)
    q = np.arange(n) % 4
    base = np.arange(n) - q
    quads = x.reshape(-1, 4)
    np.testing.assert_array_equal(out[:, 0], np.repeat(quads.sum(1), 4))
    np.testing.assert_array_equal(out[:, 1], np.repeat(quads.max(1), 4))
    np.testing.assert_array_equal(out[:, 2], np.repeat(quads.min(1), 4))
    np.testing.assert_array_equal(out[:, 3], x[base + 2])
    np.testing.assert_array_equal(out[:, 4], x[base + (q ^ 1)])
    np.testing.assert_array_equal(out[:, 5], np.where(q >= 1, x[np.maximum(base + q - 1, 0)], x))
    np.testing.assert_array_equal(out[:, 6], np.where(q < 3, x[np.minimum(base + q + 1, n - 1)], x))
    np.testing.assert_array_equal(out[:, 7], x[base + 3])
    np.testing.assert_array_equal(out[:, 8], np.cumsum(quads, 1).reshape(-1))

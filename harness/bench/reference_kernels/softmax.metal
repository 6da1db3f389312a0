// Hand-written row softmax, the bench's reference for the generated `softmax` kernels:
//
//   Y[row, :] = exp(s X[row, :] - m) / sum(exp(s X[row, :] - m)),  m = max(s X[row, :])
//
// with s = SCALE, computed in float. Two kernels, one threadgroup per row each:
//
// softmax_row     the row held in registers (thread t holds the 4-vectors t, t + THREADS,
//                 ... ITEMS of them, the last round masked): read once, written once. The
//                 maximum and the sum each cost one simd_max/simd_sum per simdgroup, one slot
//                 per simdgroup, one barrier, and every simdgroup combining the slots itself
//                 (lane k reads slot k, one more simd_max/simd_sum): two barriers per row.
// softmax_looped  for rows too long for registers: one streaming pass keeps a running
//                 maximum and a sum rescaled whenever the maximum grows (online softmax),
//                 then the per-thread (max, sum) pairs are combined the same way across the
//                 simdgroup and across simdgroups (one barrier); a second pass reads the row
//                 again and
//                 writes exp(s x - m) / sum. The row is read twice and nothing is held.
//
// Put in front by harness/bench/measure.py, as for rmsnorm.metal: the typedefs T, T4, the
// conversion to_T4, the #defines N (a multiple of 4), THREADS, SIMD_WIDTH, SCALE.

#include <metal_stdlib>
using namespace metal;

#define VECS (N / 4)
#define ITEMS ((VECS + THREADS - 1) / THREADS)
#define SIMDGROUPS (THREADS / SIMD_WIDTH)

inline float max4(float4 v) {
  return max(max(v.x, v.y), max(v.z, v.w));
}

inline float sum4(float4 v) {
  return (v.x + v.y) + (v.z + v.w);
}

[[kernel, max_total_threads_per_threadgroup(THREADS)]] void softmax_row(
    const device T* X [[buffer(0)]],
    device T* Y [[buffer(1)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_position_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float max_partial[SIMDGROUPS];
  threadgroup float sum_partial[SIMDGROUPS];
  const device T4* x = (const device T4*)(X + row * N);
  float4 v[ITEMS];
  float m = -FLT_MAX;
  for (int i = 0; i < ITEMS; ++i) {
    const int c = i * THREADS + int(tid);
    v[i] = c < VECS ? float4(x[c]) * SCALE : float4(-FLT_MAX);
    m = max(m, max4(v[i]));
  }
  m = simd_max(m);
  if (lane == 0) {
    max_partial[sg] = m;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  m = simd_max(lane < SIMDGROUPS ? max_partial[lane] : -FLT_MAX);
  float s = 0.0f;
  for (int i = 0; i < ITEMS; ++i) {
    const int c = i * THREADS + int(tid);
    v[i] = exp(v[i] - m);
    if (c < VECS) {
      s += sum4(v[i]);
    }
  }
  s = simd_sum(s);
  if (lane == 0) {
    sum_partial[sg] = s;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float inv = 1.0f / simd_sum(lane < SIMDGROUPS ? sum_partial[lane] : 0.0f);
  device T4* y = (device T4*)(Y + row * N);
  for (int i = 0; i < ITEMS; ++i) {
    const int c = i * THREADS + int(tid);
    if (c < VECS) {
      y[c] = to_T4(v[i] * inv);
    }
  }
}

[[kernel, max_total_threads_per_threadgroup(THREADS)]] void softmax_looped(
    const device T* X [[buffer(0)]],
    device T* Y [[buffer(1)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_position_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float max_partial[SIMDGROUPS];
  threadgroup float sum_partial[SIMDGROUPS];
  const device T4* x = (const device T4*)(X + row * N);
  float m = -FLT_MAX;
  float s = 0.0f;
  for (int c = int(tid); c < VECS; c += THREADS) {
    const float4 v = float4(x[c]) * SCALE;
    const float grown = max(m, max4(v));
    s = s * exp(m - grown) + sum4(exp(v - grown));
    m = grown;
  }
  // Combine (m, s) pairs: rescale each sum to the larger maximum, then add.
  float g = simd_max(m);
  s = simd_sum(s * exp(m - g));
  if (lane == 0) {
    max_partial[sg] = g;
    sum_partial[sg] = s;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float pm = lane < SIMDGROUPS ? max_partial[lane] : -FLT_MAX;
  const float ps = lane < SIMDGROUPS ? sum_partial[lane] : 0.0f;
  m = simd_max(pm);
  const float inv = 1.0f / simd_sum(ps * exp(pm - m));
  device T4* y = (device T4*)(Y + row * N);
  for (int c = int(tid); c < VECS; c += THREADS) {
    y[c] = to_T4(exp(float4(x[c]) * SCALE - m) * inv);
  }
}

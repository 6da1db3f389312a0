// Hand-written layer norm, the bench's reference for the generated `layernorm` kernels.
//
//   Y[row, :] = (X[row, :] - mean) * rsqrt(var + EPS) * W + B      (biased variance, float)
//
// The layout of rmsnorm.metal: one threadgroup per row, thread t holds the 4-vectors t,
// t + THREADS, ... of its row in registers, every device access one coalesced 4-wide
// access, the row read once. Two row sums (the mean, then the centred squares: the
// two-pass variance, which does not cancel like E[x^2] - E[x]^2), each one simd_sum per
// simdgroup, one slot per simdgroup, one barrier, and every simdgroup combining the slots
// itself (lane k reads slot k, one simd_sum): two barriers per row. Each sum has its own
// slots, so the second sum's writes never meet the first's reads.
//
// Put in front by harness/bench/measure.py, as for rmsnorm.metal: the typedefs T, T4, the
// conversion to_T4, the #defines N (a multiple of 4), THREADS, SIMD_WIDTH, EPS.

#include <metal_stdlib>
using namespace metal;

#define VECS (N / 4)
#define ITEMS ((VECS + THREADS - 1) / THREADS)
#define SIMDGROUPS (THREADS / SIMD_WIDTH)

[[kernel, max_total_threads_per_threadgroup(THREADS)]] void layernorm_row(
    const device T* X [[buffer(0)]],
    const device T* W [[buffer(1)]],
    const device T* B [[buffer(2)]],
    device T* Y [[buffer(3)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_position_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float mean_partial[SIMDGROUPS];
  threadgroup float var_partial[SIMDGROUPS];
  const device T4* x = (const device T4*)(X + row * N);
  float4 v[ITEMS];
  float acc = 0.0f;
  for (int i = 0; i < ITEMS; ++i) {
    const int c = i * THREADS + int(tid);
    v[i] = c < VECS ? float4(x[c]) : float4(0.0f);
    acc += v[i].x + v[i].y + v[i].z + v[i].w;
  }
  acc = simd_sum(acc);
  if (lane == 0) {
    mean_partial[sg] = acc;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float mean = simd_sum(lane < SIMDGROUPS ? mean_partial[lane] : 0.0f) / N;
  float sq = 0.0f;
  for (int i = 0; i < ITEMS; ++i) {
    const int c = i * THREADS + int(tid);
    v[i] -= mean;
    if (c < VECS) {
      sq += dot(v[i], v[i]);
    }
  }
  sq = simd_sum(sq);
  if (lane == 0) {
    var_partial[sg] = sq;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float inv = rsqrt(simd_sum(lane < SIMDGROUPS ? var_partial[lane] : 0.0f) / N + EPS);
  const device T4* w = (const device T4*)W;
  const device T4* b = (const device T4*)B;
  device T4* y = (device T4*)(Y + row * N);
  for (int i = 0; i < ITEMS; ++i) {
    const int c = i * THREADS + int(tid);
    if (c < VECS) {
      y[c] = to_T4(v[i] * inv * float4(w[c]) + float4(b[c]));
    }
  }
}

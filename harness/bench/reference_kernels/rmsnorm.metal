// Hand-written RMSNorm, the bench's reference for the generated `rmsnorm` kernels.
//
//   Y[row, :] = X[row, :] * rsqrt(mean(X[row, :]^2) + EPS) * W      (accumulated in float)
//
// One threadgroup per row, THREADS threads (any multiple of the simdgroup width). Thread t
// holds the 4-vectors t, t + THREADS, t + 2 THREADS, ... of its row in registers (ITEMS of
// them, the last round masked), so every device access is one coalesced 4-wide load or
// store and the row is read once. The row sum costs one simd_sum per simdgroup and one
// slot per simdgroup in threadgroup memory; after the one barrier every simdgroup combines
// the slots itself (lane k reads slot k, one more simd_sum), so no second barrier is needed
// to broadcast a result: one barrier, SIMDGROUPS writes and SIMDGROUPS^2 reads of
// threadgroup memory per row. (MLX's kernels let simdgroup 0 combine and broadcast through
// one more slot: one read per lane fewer, one barrier more.)
//
// Configured by what harness/bench/measure.py puts in front of this text: the typedefs T and T4
// (element type of X, W, Y and its 4-vector: float/float4, half/half4, ...), to_T4 (a
// float4 converted to T4), and the #defines N (row length, a multiple of 4), THREADS,
// SIMD_WIDTH, EPS.

#include <metal_stdlib>
using namespace metal;

#define VECS (N / 4)
#define ITEMS ((VECS + THREADS - 1) / THREADS)
#define SIMDGROUPS (THREADS / SIMD_WIDTH)

[[kernel, max_total_threads_per_threadgroup(THREADS)]] void rmsnorm_row(
    const device T* X [[buffer(0)]],
    const device T* W [[buffer(1)]],
    device T* Y [[buffer(2)]],
    uint row [[threadgroup_position_in_grid]],
    uint tid [[thread_position_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float partial[SIMDGROUPS];
  const device T4* x = (const device T4*)(X + row * N);
  float4 v[ITEMS];
  float acc = 0.0f;
  for (int i = 0; i < ITEMS; ++i) {
    const int c = i * THREADS + int(tid);
    v[i] = c < VECS ? float4(x[c]) : float4(0.0f);
    acc += dot(v[i], v[i]);
  }
  acc = simd_sum(acc);
  if (lane == 0) {
    partial[sg] = acc;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  const float inv = rsqrt(simd_sum(lane < SIMDGROUPS ? partial[lane] : 0.0f) / N + EPS);
  const device T4* w = (const device T4*)W;
  device T4* y = (device T4*)(Y + row * N);
  for (int i = 0; i < ITEMS; ++i) {
    const int c = i * THREADS + int(tid);
    if (c < VECS) {
      y[c] = to_T4(v[i] * inv * float4(w[c]));
    }
  }
}

// MSL in the style of Apple's MLX kernels (written for metaltile's tests, not MLX code):
// template kernels instantiated under [[host_name]] by a macro, METAL_FUNC helpers, type
// traits, a function constant, buffer parameters without [[buffer(i)]], a user overload of
// a simd function, a function added to metal::fast, ldexp, several attributes in a list.
#include <metal_stdlib>
#include <metal_simdgroup>

using namespace metal;

#ifndef METAL_FUNC
#define METAL_FUNC inline __attribute__((always_inline))
#endif
#define SIMD_SIZE 32

#define instantiate_kernel(name, func, ...) \
  template [[host_name(                     \
      name)]] [[kernel]] decltype(func<__VA_ARGS__>) func<__VA_ARGS__>;

constant bool has_w [[function_constant(20)]];

struct pair_t {
  float lo, hi;
};

// A user overload of a simd function: the emulator's call-site macros leave it alone.
METAL_FUNC pair_t simd_shuffle_down(pair_t v, ushort delta) {
  return pair_t{simd_shuffle_down(v.lo, delta), simd_shuffle_down(v.hi, delta)};
}

namespace metal {
namespace fast {
METAL_FUNC float square(float x) { return x * x; }
}  // namespace fast
}  // namespace metal

template <typename T, metal::enable_if_t<metal::is_floating_point_v<T>, bool> = true>
METAL_FUNC float widen(T x) {
  static_assert(!metal::is_integral_v<T>, "floating point only");
  return metal::is_same_v<T, float> ? x : static_cast<float>(x);
}

template <typename T, int N_READS = 4>
[[kernel, max_total_threads_per_threadgroup(1024)]] void rms_single_row(
    const device T* x,
    const device T* w,
    device T* out,
    constant float& eps,
    constant uint& axis_size,
    uint gid [[threadgroup_position_in_grid]],
    uint lid [[thread_position_in_threadgroup]],
    uint simd_lane_id [[thread_index_in_simdgroup]],
    uint simd_group_id [[simdgroup_index_in_threadgroup]]) {
  threadgroup float local_inv_mean[1];
  threadgroup float local_sums[SIMD_SIZE];

  float acc = 0;
  x += gid * size_t(axis_size) + lid * N_READS;
  out += gid * size_t(axis_size) + lid * N_READS;
  w += lid * N_READS;
  for (int i = 0; i < N_READS; i++) {
    if (lid * N_READS + i < axis_size) {
      acc += metal::fast::square(widen(x[i]));
    }
  }
  acc = simd_sum(acc);
  if (simd_group_id == 0) {
    local_sums[simd_lane_id] = 0;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd_lane_id == 0) {
    local_sums[simd_group_id] = acc;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (simd_group_id == 0) {
    acc = simd_sum(local_sums[simd_lane_id]);
    if (simd_lane_id == 0) {
      local_inv_mean[0] = metal::precise::rsqrt(acc / axis_size + eps);
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int i = 0; i < N_READS; i++) {
    if (lid * N_READS + i < axis_size) {
      float y = widen(x[i]) * local_inv_mean[0];
      out[i] = static_cast<T>(has_w ? y * widen(w[i]) : y);
    }
  }
}

// A pairwise reduction through the overloaded shuffle, scaled by 2^k with ldexp.
template <typename T>
[[kernel]] void pair_sum(
    const device T* lo [[buffer(0)]],
    const device T* hi [[buffer(1)]],
    device float* out [[buffer(2)]],
    constant int& k [[buffer(3)]],
    uint lane [[thread_index_in_simdgroup]],
    uint gid [[thread_position_in_grid]]) {
  pair_t v{widen(lo[gid]), widen(hi[gid])};
  for (ushort d = SIMD_SIZE / 2; d > 0; d /= 2) {
    pair_t o = simd_shuffle_down(v, d);
    v.lo += o.lo;
    v.hi += o.hi;
  }
  if (lane == 0) {
    out[2 * (gid / SIMD_SIZE)] = ldexp(v.lo, k);
    out[2 * (gid / SIMD_SIZE) + 1] = ldexp(v.hi, k);
  }
}

instantiate_kernel("rms_float32", rms_single_row, float)
instantiate_kernel("rms_float16", rms_single_row, half)
instantiate_kernel("rms_bfloat16_2", rms_single_row, bfloat, 2)
instantiate_kernel("pair_sum_float16", pair_sum, half)

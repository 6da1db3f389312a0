// MSL in the shape TileLang's Metal code generator writes (written for metaltile's tests):
// __restrict pointers, an attribute list on the kernel, the scalar-argument union and
// struct, a _Pragma unroll macro, (int) casts of built-in vector components, a constant
// scalar struct, float4 loads.
#include <metal_stdlib>
#include <metal_simdgroup>
#define TILELANG_PRAGMA_UNROLL _Pragma("clang loop unroll(full)")
using namespace metal;

union __TVMArgUnion {
 int v_int[2];
};

struct main_kernel_args_t {
  float alpha[2];
  int n[2];
};

[[kernel, max_total_threads_per_threadgroup(128)]] void main_kernel(
  const device float4* __restrict A [[ buffer(0) ]],
  const device float4* __restrict B [[ buffer(1) ]],
  device float4* __restrict C [[ buffer(2) ]],
  constant main_kernel_args_t& arg [[ buffer(3) ]],
  uint3 blockIdx [[threadgroup_position_in_grid]],
  uint3 __gridDim [[threadgroups_per_grid]],
  uint3 threadIdx [[thread_position_in_threadgroup]],
  uint __simd_group_id [[simdgroup_index_in_threadgroup]]
) {
  TILELANG_PRAGMA_UNROLL
  for (int i = 0; i < 2; ++i) {
    int idx = ((((int)blockIdx.x) * 256) + (i * 128)) + ((int)threadIdx.x);
    if (idx < arg.n[0]) {
      C[idx] = (A[idx] * arg.alpha[0]) + B[idx];
    }
  }
}

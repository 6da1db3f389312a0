// TileLang-style MSL: 8 halfs (or bfloats) travel in a uint4 carrier, and its elements are
// reached through `((thread half*)(&v))[i]`, the way TileLang prints 8-lane half vectors.
#include <metal_stdlib>
using namespace metal;

union __TVMArgUnion {
 int v_int[2];
};

#define LANES 8

[[kernel, max_total_threads_per_threadgroup(64)]] void scale_half8(
  const device half* __restrict X [[ buffer(0) ]],
  device half* __restrict Y [[ buffer(1) ]],
  const device bfloat* __restrict P [[ buffer(2) ]],
  device bfloat* __restrict Q [[ buffer(3) ]],
  constant float* scale [[ buffer(4) ]],
  uint blockIdx [[threadgroup_position_in_grid]],
  uint threadIdx [[thread_position_in_threadgroup]]
) {
  int base = (((int)blockIdx) * 64 + ((int)threadIdx)) * LANES;
  uint4 v = *(device uint4*)(X + base);
  uint4 w = *(device uint4*)(P + base);
  uint4 r;
  uint4 s;
  for (int i = 0; i < LANES; ++i) {
    ((thread half*)(&r))[i] = (half)(((float)((thread half*)(&v))[i]) * scale[0]);
    ((thread bfloat*)(&s))[i] = (bfloat)(((float)((thread bfloat*)(&w))[i]) * scale[0]);
  }
  *(device uint4*)(Y + base) = r;
  *(device uint4*)(Q + base) = s;
}

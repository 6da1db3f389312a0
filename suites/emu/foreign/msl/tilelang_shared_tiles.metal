// TileLang-style MSL: threadgroup arrays declared inside nested blocks (padded the way
// TileLang pads them), a rasterization block that shadows blockIdx, signature attributes
// split over lines and a buffer index given by a macro.
#include <metal_stdlib>
using namespace metal;

#define OUT_INDEX 1

kernel void transpose_tiles(
  const device float* __restrict A
      [[ buffer(0) ]],
  device float* __restrict B [[ buffer(OUT_INDEX) ]],
  uint2 blockIdx [[threadgroup_position_in_grid]],
  uint2 __gridDim [[threadgroups_per_grid]],
  uint2 threadIdx [[thread_position_in_threadgroup]]) {
  { const uint __bi = blockIdx.x + blockIdx.y * __gridDim.x;
    const uint2 blockIdx = uint2(__bi / __gridDim.y, __bi % __gridDim.y);
    if (true) {
      threadgroup float A_shared[16 * 16 + 4];
      {
        threadgroup float B_shared[16 * 16 + 4];
        A_shared[((int)threadIdx.y) * 16 + ((int)threadIdx.x)] =
            A[(((int)blockIdx.y) * 16 + ((int)threadIdx.y)) * 64 + ((int)blockIdx.x) * 16 +
              ((int)threadIdx.x)];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        B_shared[((int)threadIdx.y) * 16 + ((int)threadIdx.x)] =
            A_shared[((int)threadIdx.x) * 16 + ((int)threadIdx.y)];
        threadgroup_barrier(mem_flags::mem_threadgroup);
        B[(((int)blockIdx.x) * 16 + ((int)threadIdx.y)) * 64 + ((int)blockIdx.y) * 16 +
          ((int)threadIdx.x)] = B_shared[((int)threadIdx.y) * 16 + ((int)threadIdx.x)];
      }
    }
  }
}

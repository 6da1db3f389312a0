"""Constructs Apple's MLX kernels rely on, each in MSL written for these tests and run with
every check against numpy: array parameters in an address space (`constant const int64_t
strides[2]`), explicit casts between half and bfloat and between vectors, string literals
bound to `constant char*`, a library's own bfloat math in metal::fast next to the float
functions, MLX's bfloat math overloads reopening metal, metal::fast and metal::precise,
template vector constructors, buffers gated off by function constants, and
simdgroup_matrix::thread_elements() in the lane layout MLX's steel kernels use."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.errors import LaunchError
from core.runtime import emu
from foreigncase import close, run_clean
from harness.gen.inputs import random_tensor

HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"


def test_array_parameters_in_an_address_space():
    src = HEAD + """\
template <typename IdxT = int64_t>
METAL_FUNC IdxT elem_to_loc_2(uint2 elem, constant const int64_t strides[2]) {
  return elem.x * IdxT(strides[1]) + elem.y * IdxT(strides[0]);
}
kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
              constant const int64_t* strides [[buffer(2)]],
              uint2 pos [[thread_position_in_grid]], uint2 grid [[threads_per_grid]]) {
  y[pos.y * grid.x + pos.x] = x[elem_to_loc_2(pos, strides)];
}
"""
    x = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)
    y = np.zeros((4, 6), np.float32)
    # read x transposed: row stride 1, column stride 4
    run_clean(src, "k", (1, 1), (6, 4), [x, y, np.array([1, 4], np.int64)])
    close(y, x.T, op_class="exact")


def test_explicit_casts_between_half_bfloat_and_vectors_convert_values():
    src = HEAD + """\
kernel void k(device const half* h [[buffer(0)]], device bfloat* b [[buffer(1)]],
              device float4* v [[buffer(2)]], device half* back [[buffer(3)]],
              uint i [[thread_position_in_grid]]) {
  b[i] = static_cast<bfloat>(h[i]);
  back[i] = static_cast<half>(b[i]);
  const int4 n = int4(int(i), -int(i), 2 * int(i), 7);
  v[i] = static_cast<float4>(n);
}
"""
    h = np.linspace(-3, 3, 16).astype(np.float16)
    b = torch.zeros(16, dtype=torch.bfloat16)
    v = np.zeros((16, 4), np.float32)
    back = np.zeros(16, np.float16)
    run_clean(src, "k", 1, 16, [h, b, v, back])
    want_b = torch.from_numpy(h.astype(np.float32)).to(torch.bfloat16)
    close(b, want_b, op_class="exact")
    close(back, want_b.float().numpy().astype(np.float16), op_class="exact")
    i = np.arange(16)
    close(v, np.stack([i, -i, 2 * i, np.full(16, 7)], 1).astype(np.float32), op_class="exact")


def test_string_literals_bind_to_constant_char_pointers():
    src = HEAD + """\
struct logger {
  constexpr logger(constant char*, constant char*) constant {}
  template <typename... Args>
  void debug(constant char*, Args...) const constant {}
};
constant logger lg("lib", "kernels");
int length(constant char* s) { int n = 0; while (s[n] != 0) ++n; return n; }
kernel void k(device int* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  lg.debug("value %d", int(i));
  y[i] = length("threadgroup") + int(i);
}
"""
    y = np.zeros(4, np.int32)
    run_clean(src, "k", 1, 4, [y])
    np.testing.assert_array_equal(y, 11 + np.arange(4))


BF16_MATH = HEAD + """\
#define define_math(itype, otype, ctype, mode) \\
  METAL_FUNC otype cos(itype x) { \\
    return static_cast<otype>(__metal_cos(static_cast<ctype>(x), mode)); } \\
  METAL_FUNC otype exp(itype x) { \\
    return static_cast<otype>(__metal_exp(static_cast<ctype>(x), mode)); } \\
  METAL_FUNC otype abs(itype x) { \\
    return static_cast<otype>(__metal_fabs(static_cast<ctype>(x), mode)); }
namespace metal {
define_math(bfloat, bfloat, float, __METAL_MAYBE_FAST_MATH__)
namespace fast {
define_math(bfloat, bfloat, float, __METAL_FAST_MATH__)
}
namespace precise {
define_math(bfloat, bfloat, float, __METAL_PRECISE_MATH__)
}
}
kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
              device bfloat* z [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  const float v = x[i];
  y[3 * i + 0] = metal::fast::cos(v);
  y[3 * i + 1] = metal::precise::exp(v);
  y[3 * i + 2] = metal::abs(v);
  z[i] = metal::fast::cos(bfloat(v)) + metal::exp(bfloat(v));
}
"""


def test_a_library_bfloat_math_next_to_the_float_functions():
    # metal::fast::cos of a float stays the float function when a library adds its own
    # bfloat cos to metal::fast (as MLX's bf16_math.h does)
    x = np.linspace(-3, 3, 32).astype(np.float32)
    y = np.zeros(3 * 32, np.float32)
    z = torch.zeros(32, dtype=torch.bfloat16)
    run_clean(BF16_MATH, "k", 1, 32, [x, y, z])
    x64 = x.astype(np.float64)
    out = y.reshape(32, 3)
    close(out[:, 0], np.cos(x64), op_class="transcendental")
    close(out[:, 1], np.exp(x64), op_class="transcendental")
    close(out[:, 2], np.abs(x64), op_class="exact")
    xb = torch.from_numpy(x).to(torch.bfloat16).double()
    close(z, torch.cos(xb).to(torch.bfloat16).double() + torch.exp(xb).to(torch.bfloat16).double(),
          op_class="transcendental")


ARRAY_OF_BUFFERS = HEAD + """\
kernel void k(device float* y [[buffer(0)]],
              device const float* parts[3] [[buffer(1)]],
              constant uint& n [[buffer(4)]], uint i [[thread_position_in_grid]]) {
  if (i < n) y[i] = parts[0][i] + 10.0f * parts[1][i] + 100.0f * parts[2][i];
}
"""


def test_an_array_of_buffers_binds_consecutive_indices():
    sig = emu.kernel_signatures(ARRAY_OF_BUFFERS)["k"]
    assert sorted(sig.buffers) == [0, 1, 2, 3, 4]
    assert [sig.buffers[i].buffer_name(i) for i in (1, 3)] == ["parts[0]", "parts[2]"]
    a, b, c = (np.arange(8, dtype=np.float32) + k for k in range(3))
    y = np.zeros(8, np.float32)
    run_clean(ARRAY_OF_BUFFERS, "k", 1, 8, [y, a, b, c, np.array([8], np.uint32)])
    close(y, a + 10 * b.astype(np.float64) + 100 * c.astype(np.float64))


def test_an_out_of_bounds_element_of_an_array_of_buffers_is_named():
    buffers = [np.zeros(8, np.float32), *(np.zeros(4, np.float32) for _ in range(3)),
               np.array([8], np.uint32)]
    res = emu.run_msl(ARRAY_OF_BUFFERS, "k", grid=1, threadgroup=8, buffers=buffers)
    named = {f.buffer_or_offset.split(",")[0] for f in res.findings if f.kind == "bounds"}
    assert named == {"buffer 1 ('parts[0]')", "buffer 2 ('parts[1]')", "buffer 3 ('parts[2]')"}


def test_an_array_of_values_as_a_kernel_parameter_is_a_pointer_to_its_buffer():
    # C++ (and so MSL) adjusts an array parameter to a pointer to its element
    src = HEAD + """\
kernel void k(device float* y [[buffer(0)]], constant float scales[2] [[buffer(1)]],
              uint i [[thread_position_in_grid]]) {
  y[i] = scales[0] * float(i) + scales[1];
}
"""
    y = np.zeros(4, np.float32)
    run_clean(src, "k", 1, 4, [y, np.array([2.0, 0.5], np.float32)])
    close(y, 2.0 * np.arange(4) + 0.5)


def test_vec_constructors_with_template_element_types_convert_lane_by_lane():
    # MLX's gemv_wide: `vec<AccT, 4>(w4[i])` widens half4 to float4 inside a template; a
    # conversion operator spelled `operator vec<T, 2>()` stays an operator
    src = HEAD + """\
template <typename T> struct pair_of {
  T a, b;
  operator vec<T, 2>() const { return vec<T, 2>(a, b); }
};
template <typename T, typename AccT, int N>
METAL_FUNC vec<AccT, N> widen(vec<T, N> v) { return vec<AccT, N>(v) * AccT(2); }
kernel void k(device const half4* h [[buffer(0)]], device float4* out [[buffer(1)]],
              device float2* pairs [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  out[i] = widen<half, float, 4>(h[i]);
  pair_of<float> p = {float(i), -float(i)};
  const float2 q = p;
  pairs[i] = q;
}
"""
    h = random_tensor((8, 4), "float16", 3)
    out = torch.zeros(8, 4)
    pairs = torch.zeros(8, 2)
    run_clean(src, "k", 1, 8, [h, out, pairs])
    close(out, h.double() * 2, op_class="exact")
    i = torch.arange(8, dtype=torch.float64)
    close(pairs, torch.stack([i, -i], 1), op_class="exact")


def test_buffers_behind_a_false_function_constant_need_no_binding():
    # MLX's gemv_wide: `bias [[buffer(2), function_constant(do_axpby)]]`; with the constant
    # false Metal's pipeline has no buffer 2, and the host sets none
    src = HEAD + """\
constant bool do_axpby [[function_constant(1)]];
kernel void k(device const float* x [[buffer(0)]], device float* y [[buffer(1)]],
              device const float* bias [[buffer(2), function_constant(do_axpby)]],
              constant float& beta [[buffer(3), function_constant(do_axpby)]],
              uint i [[thread_position_in_grid]]) {
  y[i] = do_axpby ? x[i] + beta * bias[i] : 2 * x[i];
}
"""
    x = random_tensor((16,), "float32", 4)
    y = torch.zeros(16)
    run_clean(src, "k", 1, 16, [x, y], function_constants={1: False})
    close(y, x.double() * 2, op_class="exact")
    bias = random_tensor((16,), "float32", 5)
    run_clean(src, "k", 1, 16, [x, y, bias, np.array([0.5], np.float32)],
              function_constants={1: True})
    close(y, x.double() + 0.5 * bias.double(), op_class="elementwise")
    with pytest.raises(LaunchError, match="bias.*buffer\\(2\\)"):
        emu.run_msl(src, "k", grid=1, threadgroup=16, buffers=[x, y],
                    function_constants={1: True})


def test_simdgroup_matrix_thread_elements_in_the_lane_layout_mlx_relies_on():
    # MLX's steel MMA: each lane sets its two elements of the 8x8 operands through
    # thread_elements() (row (q & 4) + (l / 2) % 4, columns (q & 2) * 2 + (l % 2) * 2 and the
    # next, q = l / 4), multiplies, reads its two elements of the product back; a tile
    # set element-wise is also stored with simdgroup_store
    src = HEAD + """\
kernel void k(device const float* a [[buffer(0)]], device const float* b [[buffer(1)]],
              device float* d [[buffer(2)]], device float* a_back [[buffer(3)]],
              uint l [[thread_index_in_simdgroup]]) {
  const short q = l / 4, row = (q & 4) + (l / 2) % 4, col = (q & 2) * 2 + (l % 2) * 2;
  simdgroup_float8x8 A, B, C = make_filled_simdgroup_matrix<float, 8>(1.f), D;
  A.thread_elements()[0] = a[row * 8 + col];
  A.thread_elements()[1] = a[row * 8 + col + 1];
  reinterpret_cast<thread float2&>(B.thread_elements()) = float2(b[row * 8 + col],
                                                                 b[row * 8 + col + 1]);
  simdgroup_multiply_accumulate(D, A, B, C);
  const float2 mine = D.thread_elements();
  d[row * 8 + col] = mine.x;
  d[row * 8 + col + 1] = mine.y;
  simdgroup_store(A, a_back, 8);
}
"""
    a = random_tensor((8, 8), "float32", 6)
    b = random_tensor((8, 8), "float32", 7)
    d = torch.full((8, 8), float("nan"))
    a_back = torch.full((8, 8), float("nan"))
    res = run_clean(src, "k", 1, 32, [a, b, d, a_back])
    close(d, a.double() @ b.double() + 1, reduction_length=8, op_class="accumulation")
    close(a_back, a.double(), op_class="exact")
    # pooling the lanes' elements is no simd operation (on a GPU they are in registers)
    assert res.stats["simd_ops"] == res.stats["simd_matrix_store_ops"] == 1

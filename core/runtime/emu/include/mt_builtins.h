// mt_builtins.h — the `__metal_*` builtins that MSL libraries call directly.
//
// Apple's <metal_stdlib> implements its functions on compiler builtins named `__metal_<f>`,
// and some libraries call them directly (MLX's bf16_math.h defines bfloat overloads of the
// math and simd functions on them). Each builtin here is the MSL function of the same name
// without the prefix (MSL Specification, "Math Functions", "SIMD-group functions"),
// computed by this shim's own implementation of that function (mt_math.h, mt_simd.h):
//   __metal_fabs(x, mode) is fabs(x), __metal_atan2(y, x, mode) is atan2(y, x),
//   __metal_frexp(x, &e) is frexp(x, e), __metal_simd_sum(x) is simd_sum(x), and so on.
// The math mode argument (__METAL_MAYBE_FAST_MATH__, __METAL_FAST_MATH__,
// __METAL_PRECISE_MATH__) is accepted and does not change the result: every mode is
// computed exactly, as fast:: is (mt_math.h). Only the builtins named in this file exist;
// the source rewrite (translate.py) reads their names from here and refuses any other
// `__metal_*` name with the builtin and its MSL line, rather than leave clang to report
// an undeclared identifier.
//
// The simd builtins are meeting points like the functions they follow: called inside a
// user's own overload of a simd function (MLX's bfloat simd_sum), they meet at the call
// site of that overload (translate.py names the overload's site parameter __mt_at).
#pragma once
#include "mt_math.h"
#include "mt_runtime.h"
#include "mt_simd.h"

enum __mt_math_mode : int { __mt_math_maybe_fast = 0, __mt_math_fast = 1, __mt_math_precise = 2 };
#define __METAL_MAYBE_FAST_MATH__ __mt_math_maybe_fast
#define __METAL_FAST_MATH__ __mt_math_fast
#define __METAL_PRECISE_MATH__ __mt_math_precise

// Math: __metal_<f>(args..., mode) -> metal::<f>(args...).
#define __MT_METAL_MATH1(f)                                                       \
  template <class T>                                                              \
  __MT_INLINE auto __metal_##f(T x, __mt_math_mode = __mt_math_maybe_fast)        \
      -> decltype(metal::f(x)) {                                                  \
    return metal::f(x);                                                           \
  }
#define __MT_METAL_MATH2(f)                                                       \
  template <class T, class U>                                                     \
  __MT_INLINE auto __metal_##f(T x, U y, __mt_math_mode = __mt_math_maybe_fast)   \
      -> decltype(metal::f(x, y)) {                                               \
    return metal::f(x, y);                                                        \
  }
#define __MT_METAL_MATH3(f)                                                       \
  template <class T, class U, class V>                                            \
  __MT_INLINE auto __metal_##f(T x, U y, V z, __mt_math_mode = __mt_math_maybe_fast) \
      -> decltype(metal::f(x, y, z)) {                                            \
    return metal::f(x, y, z);                                                     \
  }

__MT_METAL_MATH1(fabs) __MT_METAL_MATH1(acos) __MT_METAL_MATH1(acosh) __MT_METAL_MATH1(asin)
__MT_METAL_MATH1(asinh) __MT_METAL_MATH1(atan) __MT_METAL_MATH1(atanh) __MT_METAL_MATH1(ceil)
__MT_METAL_MATH1(cos) __MT_METAL_MATH1(cosh) __MT_METAL_MATH1(cospi) __MT_METAL_MATH1(exp)
__MT_METAL_MATH1(exp10) __MT_METAL_MATH1(exp2) __MT_METAL_MATH1(floor) __MT_METAL_MATH1(fract)
__MT_METAL_MATH1(log) __MT_METAL_MATH1(log10) __MT_METAL_MATH1(log2) __MT_METAL_MATH1(rint)
__MT_METAL_MATH1(round) __MT_METAL_MATH1(rsqrt) __MT_METAL_MATH1(sin) __MT_METAL_MATH1(sinh)
__MT_METAL_MATH1(sinpi) __MT_METAL_MATH1(sqrt) __MT_METAL_MATH1(tan) __MT_METAL_MATH1(tanh)
__MT_METAL_MATH1(tanpi) __MT_METAL_MATH1(trunc)
__MT_METAL_MATH2(atan2) __MT_METAL_MATH2(divide) __MT_METAL_MATH2(fmax) __MT_METAL_MATH2(fmin)
__MT_METAL_MATH2(fmod) __MT_METAL_MATH2(pow) __MT_METAL_MATH2(powr)
__MT_METAL_MATH3(fma) __MT_METAL_MATH3(fmax3) __MT_METAL_MATH3(fmin3) __MT_METAL_MATH3(fmedian3)

// ldexp(x, k) with a mode; frexp and nextafter take none.
template <class T, class K>
__MT_INLINE auto __metal_ldexp(T x, K k, __mt_math_mode = __mt_math_maybe_fast)
    -> decltype(metal::ldexp(x, k)) {
  return metal::ldexp(x, k);
}
template <class T>
__MT_INLINE auto __metal_frexp(T x, int* e) -> decltype(metal::frexp(x, *e)) {
  return metal::frexp(x, *e);
}
template <class T>
__MT_INLINE auto __metal_nextafter(T x, T y) -> decltype(metal::nextafter(x, y)) {
  return metal::nextafter(x, y);
}

// Positions: the argument only names the result type.
template <class T>
__MT_INLINE T __metal_get_simdgroup_size(T) {
  return T(__mt_current_position()->threads_per_simdgroup);
}
template <class T>
__MT_INLINE T __metal_get_thread_index_in_simdgroup(T) {
  return T(__mt_current_position()->thread_index_in_simdgroup);
}

// SIMD-group functions. Outside a user's simd overload `__mt_at` is this constant (line 0,
// which no MSL line has) and the call's own site is used.
constexpr __mt_site __mt_at{0, 0};
#define __MT_HERE (__mt_at.line ? __mt_at : __mt_site{__LINE__, __COUNTER__})
#define __metal_simd_broadcast(...) (metal::simd_broadcast)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_shuffle(...) (metal::simd_shuffle)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_shuffle_xor(...) (metal::simd_shuffle_xor)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_shuffle_up(...) (metal::simd_shuffle_up)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_shuffle_down(...) (metal::simd_shuffle_down)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_shuffle_rotate_up(...) (metal::simd_shuffle_rotate_up)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_shuffle_rotate_down(...) \
  (metal::simd_shuffle_rotate_down)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_shuffle_and_fill_up(...) \
  (metal::simd_shuffle_and_fill_up)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_shuffle_and_fill_down(...) \
  (metal::simd_shuffle_and_fill_down)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_sum(...) (metal::simd_sum)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_product(...) (metal::simd_product)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_min(...) (metal::simd_min)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_max(...) (metal::simd_max)(__MT_HERE, __VA_ARGS__)
// The bitwise reductions also take float types (MLX's bfloat simd_xor passes a float):
// they combine the values' bit patterns.
namespace metal {
namespace __mt {
template <class T> struct same_size_uint;
template <> struct same_size_uint<float> { using type = uint; };
template <> struct same_size_uint<half> { using type = ushort; };
template <> struct same_size_uint<bfloat> { using type = ushort; };
template <class Op, class T>
__MT_INLINE T simd_bitwise(__mt_site at, T v) {
  if constexpr (is_float<T>::value) {
    using U = typename same_size_uint<T>::type;
    U bits;
    __builtin_memcpy(&bits, &v, sizeof bits);
    U r = simd_reduce<Op>(at, bits);
    T out;
    __builtin_memcpy(&out, &r, sizeof out);
    return out;
  } else {
    return simd_reduce<Op>(at, v);
  }
}
}  // namespace __mt
}  // namespace metal
#define __metal_simd_and(...) \
  (metal::__mt::simd_bitwise<metal::__mt::op_and>)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_or(...) \
  (metal::__mt::simd_bitwise<metal::__mt::op_or>)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_xor(...) \
  (metal::__mt::simd_bitwise<metal::__mt::op_xor>)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_prefix_inclusive_sum(...) \
  (metal::simd_prefix_inclusive_sum)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_prefix_exclusive_sum(...) \
  (metal::simd_prefix_exclusive_sum)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_prefix_inclusive_product(...) \
  (metal::simd_prefix_inclusive_product)(__MT_HERE, __VA_ARGS__)
#define __metal_simd_prefix_exclusive_product(...) \
  (metal::simd_prefix_exclusive_product)(__MT_HERE, __VA_ARGS__)

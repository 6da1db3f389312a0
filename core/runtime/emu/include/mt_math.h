// mt_math.h -- MSL math, common, geometric, integer and relational functions for the CPU
// emulator.
//
// Follows these sections of the Metal Shading Language Specification:
//   Common Functions: clamp, mix, saturate, sign, smoothstep, step.
//   Integer Functions: abs, absdiff, addsat, subsat, clamp, clz, ctz, hadd, rhadd, madhi,
//     max, min, mulhi, popcount.
//   Relational Functions: all, any, isfinite, isinf, isnan, isnormal, isordered,
//     isunordered, signbit, select (select(a, b, c) is c ? b : a, lane by lane).
//   Math Functions, with their fast:: and precise:: variants.
//   Geometric Functions: cross, distance, dot, length, length_squared, normalize.
// Scalars and 2/3/4-lane vectors, applied lane by lane. A vector function also takes a
// scalar where MSL converts one implicitly (max(v, 0.0f), clamp(v, lo, hi), mix(a, b, t)).
//
// Numerics of this emulator:
//   - float math uses the C library's single-precision functions (clang builtins), within
//     2 ulp of the exact value, inside Metal's precise:: bounds. sinpi/cospi/tanpi reduce the
//     argument exactly and compute in double. fast:: and precise:: are the same
//     functions: fast:: is computed exactly, not approximated (a fast-math kernel can differ
//     from the GPU by the GPU's fast-math error; the tolerance policy covers it).
//   - half and bfloat math is computed in float and rounded once to the type.
//   - fmax/fmin/max/min/clamp follow IEEE: a NaN operand is ignored if the other is a number.
//   - fract(x) is fmin(x - floor(x), largest value below 1 of the type); NaN and inf give NaN.
//   - fmod is the exact remainder with the sign of x (C fmod).
//
// Overloads: float, half and bfloat scalars are separate non-template functions, so C++
// overload rules decide mixed calls: max(half, float) is ambiguous (rejected, never silently
// widened); max(h, 2.0h) is half; a literal of another kind converts (max(x, 0) is float for
// a float x). Integer scalars are templates over the exact type (max(uchar, uchar) is
// uchar); mixing two integer types (max(uint, int)) is rejected. The bfloat forms are
// templates (`template <int = 0>`) with the same parameters: Apple's <metal_stdlib> has no
// bfloat math, and libraries define their own (MLX's bf16_math.h, in metal, metal::fast
// and metal::precise); a user's non-template function is then no redefinition, and wins.
//
// Only freestanding headers, no <cmath>: see mt_types.h.
#pragma once

#include "mt_types.h"

namespace metal {
namespace __mt {

template <class E>
struct is_float : std::false_type {};
template <>
struct is_float<float> : std::true_type {};
template <>
struct is_float<half> : std::true_type {};
template <>
struct is_float<bfloat> : std::true_type {};

template <class E>
constexpr bool is_int = std::is_integral<E>::value && !std::is_same<E, bool>::value;

template <class E>
using if_float = std::enable_if_t<is_float<E>::value, int>;
template <class E>
using if_int = std::enable_if_t<is_int<E>, int>;

// A parameter of type same_t<E> takes E from the other arguments, so a literal converts.
template <class T>
struct same {
  using type = T;
};
template <class T>
using same_t = typename same<T>::type;

// f applied lane by lane.
template <class E, int N, class F>
auto each(F f, ext<E, N> a) {
  ext<decltype(f(a[0])), N> r{};
  for (int i = 0; i < N; ++i) r[i] = f(a[i]);
  return r;
}
template <class E, int N, class F>
auto each(F f, ext<E, N> a, ext<E, N> b) {
  ext<decltype(f(a[0], b[0])), N> r{};
  for (int i = 0; i < N; ++i) r[i] = f(a[i], b[i]);
  return r;
}
template <class E, int N, class F>
auto each(F f, ext<E, N> a, ext<E, N> b, ext<E, N> c) {
  ext<E, N> r{};
  for (int i = 0; i < N; ++i) r[i] = f(a[i], b[i], c[i]);
  return r;
}
template <class E, int N, class F>
boolvec<N> each_bool(F f, ext<E, N> a) {
  boolvec<N> r;
  for (int i = 0; i < N; ++i) r[i] = f(a[i]);
  return r;
}
template <class E, int N, class F>
boolvec<N> each_bool(F f, ext<E, N> a, ext<E, N> b) {
  boolvec<N> r;
  for (int i = 0; i < N; ++i) r[i] = f(a[i], b[i]);
  return r;
}

// Vector forms of a scalar function, lane by lane; Constraint picks the element types.
// A scalar argument next to a vector is splatted: its type comes from the vector (same_t),
// so a literal converts.
#define __MT_LIFT1(name, Constraint)                                              \
  template <class E, int N, Constraint<E> = 0>                                    \
  __mt::ext<E, N> name(__mt::ext<E, N> x) {                                       \
    return __mt::each([](E a) { return name(a); }, x);                            \
  }
#define __MT_LIFT2(name, Constraint)                                              \
  template <class E, int N, Constraint<E> = 0>                                    \
  __mt::ext<E, N> name(__mt::ext<E, N> x, __mt::ext<E, N> y) {                    \
    return __mt::each([](E a, E b) { return name(a, b); }, x, y);                 \
  }                                                                               \
  template <class E, int N, Constraint<E> = 0>                                    \
  __mt::ext<E, N> name(__mt::ext<E, N> x, __mt::same_t<E> y) {                    \
    return name(x, __mt::ext<E, N>(y));                                           \
  }                                                                               \
  template <class E, int N, Constraint<E> = 0>                                    \
  __mt::ext<E, N> name(__mt::same_t<E> x, __mt::ext<E, N> y) {                    \
    return name(__mt::ext<E, N>(x), y);                                           \
  }
#define __MT_LIFT3(name, Constraint)                                              \
  template <class E, int N, Constraint<E> = 0>                                    \
  __mt::ext<E, N> name(__mt::ext<E, N> x, __mt::ext<E, N> y, __mt::ext<E, N> z) { \
    return __mt::each([](E a, E b, E c) { return name(a, b, c); }, x, y, z);      \
  }                                                                               \
  template <class E, int N, Constraint<E> = 0>                                    \
  __mt::ext<E, N> name(__mt::ext<E, N> x, __mt::ext<E, N> y, __mt::same_t<E> z) { \
    return name(x, y, __mt::ext<E, N>(z));                                        \
  }                                                                               \
  template <class E, int N, Constraint<E> = 0>                                    \
  __mt::ext<E, N> name(__mt::ext<E, N> x, __mt::same_t<E> y, __mt::same_t<E> z) { \
    return name(x, __mt::ext<E, N>(y), __mt::ext<E, N>(z));                       \
  }                                                                               \
  template <class E, int N, Constraint<E> = 0>                                    \
  __mt::ext<E, N> name(__mt::same_t<E> x, __mt::same_t<E> y, __mt::ext<E, N> z) { \
    return name(__mt::ext<E, N>(x), __mt::ext<E, N>(y), z);                       \
  }

// A float function given by an expression in float x (y, z); its half and bfloat forms
// compute in float and round once; its vector forms apply it lane by lane.
#define __MT_FLOAT1(name, expr)                                                   \
  inline float name(float x) { return expr; }                                     \
  inline half name(half x) { return half(name(float(x))); }                       \
  template <int = 0>                                                              \
  inline bfloat name(bfloat x) { return bfloat(name(float(x))); }                 \
  __MT_LIFT1(name, __mt::if_float)
#define __MT_FLOAT2(name, expr)                                                   \
  inline float name(float x, float y) { return expr; }                            \
  inline half name(half x, half y) { return half(name(float(x), float(y))); }     \
  template <int = 0>                                                              \
  inline bfloat name(bfloat x, bfloat y) {                                        \
    return bfloat(name(float(x), float(y)));                                      \
  }                                                                               \
  __MT_LIFT2(name, __mt::if_float)
#define __MT_FLOAT3(name, expr)                                                   \
  inline float name(float x, float y, float z) { return expr; }                   \
  inline half name(half x, half y, half z) {                                      \
    return half(name(float(x), float(y), float(z)));                              \
  }                                                                               \
  template <int = 0>                                                              \
  inline bfloat name(bfloat x, bfloat y, bfloat z) {                              \
    return bfloat(name(float(x), float(y), float(z)));                            \
  }                                                                               \
  __MT_LIFT3(name, __mt::if_float)

// The largest value below 1 of each float type, the upper bound of fract.
template <class E>
constexpr E below_one = E(0x1.fffffep-1f);
template <>
constexpr half below_one<half> = half(0x1.ffcp-1f);
template <>
constexpr bfloat below_one<bfloat> = bfloat(0x1.fep-1f);

template <class E>
E fract_of(E x) {
  float f = float(x) - __builtin_floorf(float(x));
  E r = E(f);
  return r != r || r < below_one<E> ? r : below_one<E>;
}

// sin(pi x) and cos(pi x) in double, after an exact reduction of x, so that integers and
// half-integers give exact zeros and ones (tanpi divides them: +-inf at the poles).
constexpr double pi = 3.14159265358979323846;
inline double sinpi_of(float x) {
  double r = double(x) - 2.0 * __builtin_round(double(x) * 0.5);  // in [-1, 1], exact
  if (r == __builtin_trunc(r)) return __builtin_copysign(0.0, double(x));
  return __builtin_sin(pi * r);
}
inline double cospi_of(float x) {
  double r = __builtin_fabs(double(x));
  r -= 2.0 * __builtin_floor(r * 0.5);  // in [0, 2), exact
  if (r == 0.5 || r == 1.5) return 0.0;
  return __builtin_cos(pi * r);
}

inline float smoothstep_of(float edge0, float edge1, float x) {
  float t = __builtin_fminf(__builtin_fmaxf((x - edge0) / (edge1 - edge0), 0.0f), 1.0f);
  return t * t * (3.0f - 2.0f * t);
}

}  // namespace __mt

// nextafter for the 16-bit float types: one step of the bit pattern.
namespace __mt {
template <class T, class Bits>
T next_after(T x, T y) {
  if (x != x || y != y) return T(float(x) + float(y));
  if (x == y) return y;
  Bits b;
  __builtin_memcpy(&b, &x, sizeof b);
  const Bits sign = Bits(Bits(1) << (8 * sizeof(Bits) - 1));
  if (x == T(0.0f)) b = Bits((y < x ? sign : Bits(0)) | Bits(1));  // smallest subnormal
  else if ((x < y) == (x > T(0.0f))) b = Bits(b + 1);              // away from zero
  else b = Bits(b - 1);
  T r;
  __builtin_memcpy(&r, &b, sizeof r);
  return r;
}
}  // namespace __mt

// ---- Float math: math, common and geometric functions, defined in precise::; metal:: and
// fast:: name the same functions (see below and the header comment).
namespace precise {
__MT_FLOAT1(abs, __builtin_fabsf(x))
__MT_FLOAT1(fabs, __builtin_fabsf(x))
__MT_FLOAT1(ceil, __builtin_ceilf(x))
__MT_FLOAT1(floor, __builtin_floorf(x))
__MT_FLOAT1(round, __builtin_roundf(x))  // halfway cases away from zero
__MT_FLOAT1(rint, __builtin_rintf(x))    // halfway cases to even
__MT_FLOAT1(trunc, __builtin_truncf(x))
__MT_FLOAT1(sqrt, __builtin_sqrtf(x))
__MT_FLOAT1(rsqrt, 1.0f / __builtin_sqrtf(x))
__MT_FLOAT1(exp, __builtin_expf(x))
__MT_FLOAT1(exp2, __builtin_exp2f(x))
__MT_FLOAT1(exp10, __builtin_powf(10.0f, x))
__MT_FLOAT1(log, __builtin_logf(x))
__MT_FLOAT1(log2, __builtin_log2f(x))
__MT_FLOAT1(log10, __builtin_log10f(x))
__MT_FLOAT1(sin, __builtin_sinf(x))
__MT_FLOAT1(cos, __builtin_cosf(x))
__MT_FLOAT1(tan, __builtin_tanf(x))
__MT_FLOAT1(asin, __builtin_asinf(x))
__MT_FLOAT1(acos, __builtin_acosf(x))
__MT_FLOAT1(atan, __builtin_atanf(x))
__MT_FLOAT1(sinh, __builtin_sinhf(x))
__MT_FLOAT1(cosh, __builtin_coshf(x))
__MT_FLOAT1(tanh, __builtin_tanhf(x))
__MT_FLOAT1(asinh, __builtin_asinhf(x))
__MT_FLOAT1(acosh, __builtin_acoshf(x))
__MT_FLOAT1(atanh, __builtin_atanhf(x))
__MT_FLOAT1(sinpi, float(__mt::sinpi_of(x)))
__MT_FLOAT1(cospi, float(__mt::cospi_of(x)))
__MT_FLOAT1(tanpi, float(__mt::sinpi_of(x) / __mt::cospi_of(x)))
__MT_FLOAT1(saturate, __builtin_fminf(__builtin_fmaxf(x, 0.0f), 1.0f))
__MT_FLOAT1(sign, x > 0.0f ? 1.0f : x < 0.0f ? -1.0f : x == 0.0f ? x : 0.0f)  // keeps -0; NaN -> 0

inline float fract(float x) { return __mt::fract_of(x); }
inline half fract(half x) { return __mt::fract_of(x); }
template <int = 0> inline bfloat fract(bfloat x) { return __mt::fract_of(x); }
__MT_LIFT1(fract, __mt::if_float)

__MT_FLOAT2(pow, __builtin_powf(x, y))
__MT_FLOAT2(powr, x < 0.0f ? __builtin_nanf("") : __builtin_powf(x, y))  // defined for x >= 0
__MT_FLOAT2(atan2, __builtin_atan2f(x, y))  // MSL's atan2(y, x): the macro's x is MSL's y
__MT_FLOAT2(fmax, __builtin_fmaxf(x, y))
__MT_FLOAT2(fmin, __builtin_fminf(x, y))
__MT_FLOAT2(max, __builtin_fmaxf(x, y))
__MT_FLOAT2(min, __builtin_fminf(x, y))
__MT_FLOAT2(copysign, __builtin_copysignf(x, y))
__MT_FLOAT2(fmod, __builtin_fmodf(x, y))
__MT_FLOAT2(fdim, __builtin_fdimf(x, y))
__MT_FLOAT2(step, y < x ? 0.0f : 1.0f)  // step(edge, x)

__MT_FLOAT2(divide, x / y)  // fast::divide / precise::divide: here always the exact quotient

__MT_FLOAT3(fma, __builtin_fmaf(x, y, z))
// max3/min3/median3 (MSL 2.1) and their f-forms: compositions of fmax/fmin, so a NaN
// operand is ignored as those ignore it.
__MT_FLOAT3(fmax3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
__MT_FLOAT3(fmin3, __builtin_fminf(__builtin_fminf(x, y), z))
__MT_FLOAT3(fmedian3, __builtin_fmaxf(__builtin_fminf(x, y),
                                      __builtin_fminf(__builtin_fmaxf(x, y), z)))
__MT_FLOAT3(max3, __builtin_fmaxf(__builtin_fmaxf(x, y), z))
__MT_FLOAT3(min3, __builtin_fminf(__builtin_fminf(x, y), z))
__MT_FLOAT3(median3, __builtin_fmaxf(__builtin_fminf(x, y),
                                     __builtin_fminf(__builtin_fmaxf(x, y), z)))
__MT_FLOAT3(clamp, __builtin_fminf(__builtin_fmaxf(x, y), z))  // clamp(x, minval, maxval)
__MT_FLOAT3(mix, x + (y - x) * z)                               // mix(x, y, a)
__MT_FLOAT3(smoothstep, __mt::smoothstep_of(x, y, z))           // smoothstep(edge0, edge1, x)

// Geometric functions, accumulated in float and rounded once to the element type.
template <class E, int N, __mt::if_float<E> = 0>
E dot(__mt::ext<E, N> a, __mt::ext<E, N> b) {
  float s = 0.0f;
  for (int i = 0; i < N; ++i) s += float(a[i]) * float(b[i]);
  return E(s);
}
template <class E, int N, __mt::if_float<E> = 0>
E length_squared(__mt::ext<E, N> v) {
  float s = 0.0f;
  for (int i = 0; i < N; ++i) s += float(v[i]) * float(v[i]);
  return E(s);
}
template <class E, int N, __mt::if_float<E> = 0>
E length(__mt::ext<E, N> v) {
  float s = 0.0f;
  for (int i = 0; i < N; ++i) s += float(v[i]) * float(v[i]);
  return E(__builtin_sqrtf(s));
}
template <class E, int N, __mt::if_float<E> = 0>
E distance(__mt::ext<E, N> a, __mt::ext<E, N> b) {
  float s = 0.0f;
  for (int i = 0; i < N; ++i) s += (float(a[i]) - float(b[i])) * (float(a[i]) - float(b[i]));
  return E(__builtin_sqrtf(s));
}
template <class E, int N, __mt::if_float<E> = 0>
__mt::ext<E, N> normalize(__mt::ext<E, N> v) {
  float s = 0.0f;
  for (int i = 0; i < N; ++i) s += float(v[i]) * float(v[i]);
  float inv = 1.0f / __builtin_sqrtf(s);
  return __mt::each([inv](E a) { return E(float(a) * inv); }, v);
}
template <class E, __mt::if_float<E> = 0>
__mt::ext<E, 3> cross(__mt::ext<E, 3> a, __mt::ext<E, 3> b) {
  __mt::ext<float, 3> p = {float(a.x), float(a.y), float(a.z)};
  __mt::ext<float, 3> q = {float(b.x), float(b.y), float(b.z)};
  __mt::ext<float, 3> c = p.yzx * q.zxy - p.zxy * q.yzx;
  return __mt::ext<E, 3>{E(c.x), E(c.y), E(c.z)};
}

// frexp(x, exp): x = m * 2^exp with 0.5 <= |m| < 1 (C's frexp; m of x's type).
inline float frexp(float x, int& e) { return __builtin_frexpf(x, &e); }
inline half frexp(half x, int& e) { return half(__builtin_frexpf(float(x), &e)); }
template <int = 0>
inline bfloat frexp(bfloat x, int& e) { return bfloat(__builtin_frexpf(float(x), &e)); }

// nextafter(x, y): the next value of x's type after x towards y (IEEE nextUp/nextDown;
// NaN if either is NaN; y if x == y).
inline float nextafter(float x, float y) { return __builtin_nextafterf(x, y); }
inline half nextafter(half x, half y) { return __mt::next_after<half, ushort>(x, y); }
template <int = 0>
inline bfloat nextafter(bfloat x, bfloat y) { return __mt::next_after<bfloat, ushort>(x, y); }

// ldexp(x, k) = x * 2^k, exactly (MSL 6.5).
inline float ldexp(float x, int k) { return __builtin_ldexpf(x, k); }
inline half ldexp(half x, int k) { return half(__builtin_ldexpf(float(x), k)); }
template <int = 0>
inline bfloat ldexp(bfloat x, int k) { return bfloat(__builtin_ldexpf(float(x), k)); }
template <class E, int N, __mt::if_float<E> = 0>
__mt::ext<E, N> ldexp(__mt::ext<E, N> x, __mt::ext<int, N> k) {
  __mt::ext<E, N> r;
  for (int i = 0; i < N; ++i) r[i] = ldexp(E(x[i]), int(k[i]));
  return r;
}

}  // namespace precise

// metal:: and fast:: name the same functions. precise and fast are namespaces of their own
// (not inline) so that MSL code can reopen them (MLX adds its bfloat math to metal, fast and
// precise alike, which an inline precise would make ambiguous in metal). Using-declarations,
// not a using-directive: a name a library declares in fast (MLX's bfloat cos) must not hide
// the float function from a qualified call (metal::fast::cos(x) for a float x), as it would
// hide a directive's.
#define __MT_PRECISE_NAMES \
  using precise::abs; using precise::fabs; using precise::ceil; using precise::floor; \
  using precise::round; using precise::rint; using precise::trunc; using precise::sqrt; \
  using precise::rsqrt; using precise::exp; using precise::exp2; using precise::exp10; \
  using precise::log; using precise::log2; using precise::log10; using precise::sin; \
  using precise::cos; using precise::tan; using precise::asin; using precise::acos; \
  using precise::atan; using precise::sinh; using precise::cosh; using precise::tanh; \
  using precise::asinh; using precise::acosh; using precise::atanh; using precise::sinpi; \
  using precise::cospi; using precise::tanpi; using precise::saturate; using precise::sign; \
  using precise::pow; using precise::powr; using precise::atan2; using precise::fmax; \
  using precise::fmin; using precise::max; using precise::min; using precise::copysign; \
  using precise::fmod; using precise::fdim; using precise::step; using precise::divide; \
  using precise::fma; using precise::fmax3; using precise::fmin3; using precise::fmedian3; \
  using precise::max3; using precise::min3; using precise::median3; using precise::clamp; \
  using precise::mix; using precise::smoothstep; using precise::fract; using precise::frexp; \
  using precise::nextafter; using precise::ldexp; using precise::dot; using precise::length; \
  using precise::length_squared; using precise::distance; using precise::normalize; \
  using precise::cross;
__MT_PRECISE_NAMES
namespace fast { __MT_PRECISE_NAMES }
#undef __MT_PRECISE_NAMES

// ---- Integer functions. Templates over the exact integer type.
template <class T, __mt::if_int<T> = 0>
T abs(T x) {
  if constexpr (std::is_signed<T>::value) return x < 0 ? T(-x) : x;
  else return x;
}
template <class T, __mt::if_int<T> = 0>
std::make_unsigned_t<T> absdiff(T x, T y) {  // |x - y| without modulo overflow
  using U = std::make_unsigned_t<T>;
  return x > y ? U(U(x) - U(y)) : U(U(y) - U(x));
}
template <class T, __mt::if_int<T> = 0>
T max(T x, T y) { return x > y ? x : y; }
template <class T, __mt::if_int<T> = 0>
T min(T x, T y) { return x < y ? x : y; }
template <class T, __mt::if_int<T> = 0>
T clamp(T x, T minval, T maxval) { return min(max(x, minval), maxval); }
template <class T, __mt::if_int<T> = 0>
T popcount(T x) { return T(__builtin_popcountll((unsigned long long)std::make_unsigned_t<T>(x))); }
template <class T, __mt::if_int<T> = 0>
T clz(T x) {  // clz(0) is the bit width
  constexpr int bits = 8 * sizeof(T);
  auto u = (unsigned long long)std::make_unsigned_t<T>(x);
  return T(u == 0 ? bits : __builtin_clzll(u) - (64 - bits));
}
template <class T, __mt::if_int<T> = 0>
T ctz(T x) {  // ctz(0) is the bit width
  constexpr int bits = 8 * sizeof(T);
  auto u = (unsigned long long)std::make_unsigned_t<T>(x);
  return T(u == 0 ? bits : __builtin_ctzll(u));
}
template <class T, __mt::if_int<T> = 0>
T mulhi(T x, T y) {  // high half of the full product
  using Wide = std::conditional_t<std::is_signed<T>::value, __int128, unsigned __int128>;
  return T((Wide(x) * Wide(y)) >> (8 * sizeof(T)));
}
template <class T, __mt::if_int<T> = 0>
T madhi(T a, T b, T c) { return T(mulhi(a, b) + c); }
template <class T, __mt::if_int<T> = 0>
T hadd(T x, T y) { return T((__int128(x) + __int128(y)) >> 1); }  // (x + y) >> 1, no overflow
template <class T, __mt::if_int<T> = 0>
T rhadd(T x, T y) { return T((__int128(x) + __int128(y) + 1) >> 1); }
template <class T, __mt::if_int<T> = 0>
T addsat(T x, T y) {  // x + y, saturated to T's range
  T r;
  if (!__builtin_add_overflow(x, y, &r)) return r;
  return y > 0 ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
}
template <class T, __mt::if_int<T> = 0>
T subsat(T x, T y) {  // x - y, saturated to T's range
  T r;
  if (!__builtin_sub_overflow(x, y, &r)) return r;
  return x >= y ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
}

__MT_LIFT1(abs, __mt::if_int)
__MT_LIFT2(max, __mt::if_int)
__MT_LIFT2(min, __mt::if_int)
__MT_LIFT3(clamp, __mt::if_int)
__MT_LIFT1(popcount, __mt::if_int)
__MT_LIFT1(clz, __mt::if_int)
__MT_LIFT1(ctz, __mt::if_int)
__MT_LIFT2(mulhi, __mt::if_int)
__MT_LIFT3(madhi, __mt::if_int)
__MT_LIFT2(hadd, __mt::if_int)
__MT_LIFT2(rhadd, __mt::if_int)
__MT_LIFT2(addsat, __mt::if_int)
__MT_LIFT2(subsat, __mt::if_int)
template <class E, int N, __mt::if_int<E> = 0>
__mt::ext<std::make_unsigned_t<E>, N> absdiff(__mt::ext<E, N> x, __mt::ext<E, N> y) {
  return __mt::each([](E a, E b) { return absdiff(a, b); }, x, y);
}

#undef __MT_FLOAT1
#undef __MT_FLOAT2
#undef __MT_FLOAT3
#undef __MT_LIFT1
#undef __MT_LIFT2
#undef __MT_LIFT3

// ---- Relational functions. Scalars give bool, vectors give boolN.
namespace __mt {
// Lane i of a select/all/any condition: a bool, a bool vector, or a comparison mask.
inline bool lane_true(bool c, int) { return c; }
template <int N>
bool lane_true(boolvec<N> c, int i) { return c[i]; }
template <class E, int N>
bool lane_true(ext<E, N> c, int i) {
  static_assert(is_int<E>, "select/all/any: a vector condition must be a boolN or a comparison");
  return c[i] != 0;
}
}  // namespace __mt

#define __MT_FLOAT_TEST(name, expr)                                                 \
  inline bool name(float x) { return expr; }                                        \
  inline bool name(half x) { return name(float(x)); }                               \
  inline bool name(bfloat x) { return name(float(x)); }                             \
  template <class E, int N, __mt::if_float<E> = 0>                                  \
  __mt::boolvec<N> name(__mt::ext<E, N> x) {                                        \
    return __mt::each_bool([](E a) { return name(a); }, x);                         \
  }
__MT_FLOAT_TEST(isnan, __builtin_isnan(x))
__MT_FLOAT_TEST(isinf, __builtin_isinf(x))
__MT_FLOAT_TEST(isfinite, __builtin_isfinite(x))
__MT_FLOAT_TEST(signbit, __builtin_signbit(x) != 0)
#undef __MT_FLOAT_TEST

// isnormal against the type's own range: a half subnormal is a normal float.
template <class T, __mt::if_float<T> = 0>
bool isnormal(T x) {
  float a = __builtin_fabsf(float(x));
  return a >= float(numeric_limits<T>::min()) && a <= float(numeric_limits<T>::max());
}
template <class E, int N, __mt::if_float<E> = 0>
__mt::boolvec<N> isnormal(__mt::ext<E, N> x) {
  return __mt::each_bool([](E a) { return isnormal(a); }, x);
}

#define __MT_FLOAT_TEST2(name, expr)                                                \
  inline bool name(float x, float y) { return expr; }                               \
  inline bool name(half x, half y) { return name(float(x), float(y)); }             \
  inline bool name(bfloat x, bfloat y) { return name(float(x), float(y)); }         \
  template <class E, int N, __mt::if_float<E> = 0>                                  \
  __mt::boolvec<N> name(__mt::ext<E, N> x, __mt::ext<E, N> y) {                     \
    return __mt::each_bool([](E a, E b) { return name(a, b); }, x, y);              \
  }
__MT_FLOAT_TEST2(isordered, !__builtin_isnan(x) && !__builtin_isnan(y))
__MT_FLOAT_TEST2(isunordered, __builtin_isnan(x) || __builtin_isnan(y))
#undef __MT_FLOAT_TEST2

// select(a, b, c): c ? b : a, lane by lane for vectors.
template <class T, std::enable_if_t<__mt::lanes_of<T>::value == 1, int> = 0>
T select(T a, T b, bool c) { return c ? b : a; }
template <class E, int N, class C>
__mt::ext<E, N> select(__mt::ext<E, N> a, __mt::ext<E, N> b, C c) {
  static_assert(__mt::lanes_of<C>::value == N || std::is_same<C, bool>::value,
                "select: the condition must be a bool or have as many lanes as the values");
  __mt::ext<E, N> r = a;
  for (int i = 0; i < N; ++i)
    if (__mt::lane_true(c, i)) r[i] = b[i];
  return r;
}
template <int N, class C>
__mt::boolvec<N> select(__mt::boolvec<N> a, __mt::boolvec<N> b, C c) {
  __mt::boolvec<N> r = a;
  for (int i = 0; i < N; ++i)
    if (__mt::lane_true(c, i)) r[i] = b[i];
  return r;
}

// all / any of a bool, a bool vector, or a comparison mask.
inline bool all(bool c) { return c; }
inline bool any(bool c) { return c; }
template <class C, std::enable_if_t<(__mt::lanes_of<C>::value > 1), int> = 0>
bool all(C c) {
  for (int i = 0; i < __mt::lanes_of<C>::value; ++i)
    if (!__mt::lane_true(c, i)) return false;
  return true;
}
template <class C, std::enable_if_t<(__mt::lanes_of<C>::value > 1), int> = 0>
bool any(C c) {
  for (int i = 0; i < __mt::lanes_of<C>::value; ++i)
    if (__mt::lane_true(c, i)) return true;
  return false;
}

}  // namespace metal

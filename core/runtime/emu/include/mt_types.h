// mt_types.h -- MSL scalar and vector types for the CPU emulator.
//
// Follows these sections of the Metal Shading Language Specification:
//   Scalar Data Types: half is IEEE binary16 (_Float16), bfloat is bfloat16 (__bf16, MSL
//     3.1); uint, ushort, uchar, ulong; long is 64-bit. Built with half/bfloat excess
//     precision off (build.py), every half/bfloat operation rounds to the type, to nearest
//     even, as on the GPU; a*b + c is one fused operation (one rounding) where Metal's
//     compiler contracts it in the math mode (-ffp-contract, core/target.py).
//   Vector Data Types: <type>2/3/4 and vec<T, N>, with .xyzw / .rgba swizzles, element-wise
//     arithmetic and comparisons (clang's ext_vector_type gives all of this). A 3-lane
//     vector has the size and alignment of the 4-lane one, as in MSL.
//   Vector Constructors: T4(x) splats, T4(v) converts lane by lane, T4(a.xy, b, c)
//     concatenates. The source rewrite (translate.py) turns `T<N>(args)` into
//     __mt_make_vec<T, N>(args), defined here.
//   Type Conversions and Re-interpreting Data: as_type<T>(x) reads the bits of x as T, which
//     must have the same size.
//   Math Functions (constants): INFINITY, NAN, MAXFLOAT, HUGE_VALF, FLT_*, HALF_*, M_*_F,
//     M_*_H; numeric_limits<T> for float, half, bfloat and the integer types.
//
// Boolean vectors: clang has no swizzles on bool ext vectors and its vector comparisons
// return integer masks (-1 = true). boolN is therefore a small struct (__mt::boolvec<N>)
// with members .x .y .z .w and operator[], built from any comparison mask (nonzero = true)
// or from bools. Not supported on boolN: swizzles (m.xy) and the .rgba names.
//
// Integer operators (Operators): & | ^ ~ << >> are C++'s: char and short scalars are
// promoted to int, and a signed right shift fills with the sign (arithmetic), an unsigned
// one with zeros, as MSL specifies. MSL reads a shift count modulo the promoted width
// (32 bits; 64 for long/ulong; the element width for vectors), where C++ leaves a count
// outside [0, width) undefined: metaltile's printer writes the masking `(n & 31)` for
// every count not provably in range (core/codegen/msl.py), so its kernels mean the same
// in both; hand-written MSL relying on the wrap gets what the host CPU does.
//
// Differences from MSL a reader should know:
//   - Converting a raw vector comparison numerically, float4(a < b), gives -1 per true lane
//     (clang's mask), where MSL gives 1; go through bool4 first: float4(bool4(a < b)).
//   - Implicit conversions between vector types are rejected as in MSL, through
//     -Werror=vector-conversion in build.py (clang alone would accept int4 <-> uint4).
//
// Only freestanding, header-only std headers are included: never <cmath>/<cstdlib>, whose
// global overloads of abs/max/exp would make unqualified calls ambiguous for user code that
// does `using namespace metal;`.
#pragma once

#include <cfloat>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "mt_target.h"

// Address spaces (metal_stdlib.h makes device, threadgroup and constant clang address-space
// qualifiers): `remove_address_space_t<device const float>` is `const float`, for the shim's
// templates that deduce a type through a pointer in any address space.
namespace metal { namespace __mt {
#define __MT_AS(space) __attribute__((space))
template <class T> struct remove_address_space { using type = T; };
template <class T> struct remove_address_space<__MT_AS(opencl_global) T> { using type = T; };
template <class T> struct remove_address_space<__MT_AS(opencl_local) T> { using type = T; };
template <class T> struct remove_address_space<__MT_AS(opencl_private) T> { using type = T; };
#undef __MT_AS
template <class T> using remove_address_space_t = typename remove_address_space<T>::type;
// Keeps a parameter out of template argument deduction (std::type_identity, C++20).
template <class T> struct identity { using type = T; };
template <class T> using identity_t = typename identity<T>::type;
}}  // namespace metal::__mt
// MSL's own name for it (<metal_type_traits>; MLX's steel/utils/integral_constant.h uses it).
namespace metal {
template <class T> struct remove_addrspace { using type = typename __mt::remove_address_space<T>::type; };
template <class T> using remove_addrspace_t = typename remove_addrspace<T>::type;
}  // namespace metal

// ---- Scalar types. Global, like MSL's builtin types; also visible as metal::half etc.
typedef _Float16 half;
typedef __bf16 bfloat;
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
// Sizes from core/target.py (through the generated mt_target.h).
static_assert(sizeof(float) == MT_SIZEOF_float && sizeof(half) == MT_SIZEOF_half &&
              sizeof(bfloat) == MT_SIZEOF_bfloat && sizeof(bool) == MT_SIZEOF_bool,
              "float/half/bfloat/bool sizes differ from core/target.py");
static_assert(sizeof(long) == MT_SIZEOF_long && sizeof(ulong) == MT_SIZEOF_ulong,
              "MSL long is 64-bit; this target's long is not");
static_assert(sizeof(int) == MT_SIZEOF_int && sizeof(uint) == MT_SIZEOF_uint &&
              sizeof(short) == MT_SIZEOF_short && sizeof(ushort) == MT_SIZEOF_ushort &&
              sizeof(char) == MT_SIZEOF_char && sizeof(uchar) == MT_SIZEOF_uchar,
              "integer sizes differ from core/target.py");

namespace metal {

using ::bfloat;
using ::half;
using ::uchar;
using ::uint;
using ::ulong;
using ::ushort;

namespace __mt {

// The N-lane clang vector of E; template code deduces E and N from it.
template <class E, int N>
using ext = E __attribute__((ext_vector_type(N)));

template <int N>
struct boolvec;

// Lane count and element type of scalars, ext vectors and bool vectors.
template <class T>
struct lanes_of {
  static constexpr int value = 1;
  using elem = T;
};
template <class E, int N>
struct lanes_of<ext<E, N>> {
  static constexpr int value = N;
  using elem = E;
};
template <int N>
struct lanes_of<boolvec<N>> {
  static constexpr int value = N;
  using elem = bool;
};

// The named lanes of a bool vector; operator[] picks one by index.
template <int N>
struct boolvec_lanes;
template <>
struct alignas(2) boolvec_lanes<2> {
  bool x = false, y = false;
  bool &lane(int i) { return i == 0 ? x : y; }
};
template <>
struct alignas(4) boolvec_lanes<3> {
  bool x = false, y = false, z = false;
  bool &lane(int i) { return i == 0 ? x : i == 1 ? y : z; }
};
template <>
struct alignas(4) boolvec_lanes<4> {
  bool x = false, y = false, z = false, w = false;
  bool &lane(int i) { return i == 0 ? x : i == 1 ? y : i == 2 ? z : w; }
};

// MSL boolN. Built from a comparison mask (nonzero lane = true), from N bools, or from one
// bool (splat, as MSL converts scalars to vectors implicitly). !, &&, ||, &, |, ^, ==, !=
// apply lane by lane; an operand may be a comparison mask or a bool.
template <int N>
struct boolvec : boolvec_lanes<N> {
  boolvec() = default;
  boolvec(bool b) {
    for (int i = 0; i < N; ++i) (*this)[i] = b;
  }
  template <class... B,
            std::enable_if_t<sizeof...(B) == N && (std::is_same<B, bool>::value && ...), int> = 0>
  boolvec(B... b) {
    bool lanes[] = {b...};
    for (int i = 0; i < N; ++i) (*this)[i] = lanes[i];
  }
  template <class E>
  boolvec(ext<E, N> mask) {
    for (int i = 0; i < N; ++i) (*this)[i] = mask[i] != 0;
  }
  bool &operator[](int i) { return this->lane(i); }
  bool operator[](int i) const { return const_cast<boolvec *>(this)->lane(i); }

  // r[i] = f(a[i], b[i]) lane by lane.
  template <class F>
  static boolvec zip(boolvec a, boolvec b, F f) {
    boolvec r;
    for (int i = 0; i < N; ++i) r[i] = f(a[i], b[i]);
    return r;
  }
  friend boolvec operator!(boolvec a) { return zip(a, a, [](bool p, bool) { return !p; }); }
  friend boolvec operator&&(boolvec a, boolvec b) {
    return zip(a, b, [](bool p, bool q) { return p && q; });
  }
  friend boolvec operator||(boolvec a, boolvec b) {
    return zip(a, b, [](bool p, bool q) { return p || q; });
  }
  friend boolvec operator&(boolvec a, boolvec b) { return a && b; }
  friend boolvec operator|(boolvec a, boolvec b) { return a || b; }
  friend boolvec operator^(boolvec a, boolvec b) { return a != b; }
  friend boolvec operator==(boolvec a, boolvec b) {
    return zip(a, b, [](bool p, bool q) { return p == q; });
  }
  friend boolvec operator!=(boolvec a, boolvec b) {
    return zip(a, b, [](bool p, bool q) { return p != q; });
  }
};

// vec<E, N>: the ext vector, or boolvec for bool.
template <class E, int N>
struct vec_of {
  using type = ext<E, N>;
};
template <int N>
struct vec_of<bool, N> {
  using type = boolvec<N>;
};

// One lane converted to E. half <-> bfloat has no direct conversion in clang: it goes
// through float, which holds both exactly, so it still rounds once.
template <class E, class S>
E convert_lane(S s) {
  if constexpr (std::is_same<E, bool>::value) {
    return s != 0;
  } else if constexpr ((std::is_same<E, half>::value && std::is_same<S, bfloat>::value) ||
                       (std::is_same<E, bfloat>::value && std::is_same<S, half>::value)) {
    return E(float(s));
  } else {
    return E(s);
  }
}

// Appends the lanes of a scalar or vector argument to r, starting at lane k.
template <class R, class A>
void append_lanes(R &r, int &k, A a) {
  using E = typename lanes_of<R>::elem;
  if constexpr (lanes_of<A>::value == 1) {
    r[k++] = convert_lane<E>(a);
  } else {
    for (int i = 0; i < lanes_of<A>::value; ++i) r[k++] = convert_lane<E>(a[i]);
  }
}

// Whether the constructor's arguments are one ext vector convertible to R by
// __builtin_convertvector with convert_lane's results: same lane count, neither side bool,
// and not half <-> bfloat (which convert_lane routes through float).
template <class R, class... A>
struct direct_vector_conversion : std::false_type {};
template <class E, int N, class S>
struct direct_vector_conversion<ext<E, N>, ext<S, N>>
    : std::bool_constant<!std::is_same<E, bool>::value && !std::is_same<S, bool>::value &&
                         !(std::is_same<E, half>::value && std::is_same<S, bfloat>::value) &&
                         !(std::is_same<E, bfloat>::value && std::is_same<S, half>::value)> {};

template <class R, class S>
R convert_vector(S s) {
  return __builtin_convertvector(s, R);
}

// Fails with "requirement 'K == N'" naming both counts when a constructor's lanes are off.
template <int Given, int Expected>
struct vector_constructor_lanes {
  static_assert(Given == Expected, "vector constructor: lane counts add up to K, expected N "
                                   "(the requirement reads 'K == N')");
  static constexpr bool ok = Given == Expected;
};

}  // namespace __mt

template <class T, int N>
using vec = typename __mt::vec_of<T, N>::type;

// ---- Vector type names: float2 .. ulong4, bool2 .. bool4.
#define __MT_VECTOR_NAMES(T)       \
  typedef vec<T, 2> T##2;          \
  typedef vec<T, 3> T##3;          \
  typedef vec<T, 4> T##4;
__MT_VECTOR_NAMES(float)
__MT_VECTOR_NAMES(half)
__MT_VECTOR_NAMES(bfloat)
__MT_VECTOR_NAMES(int)
__MT_VECTOR_NAMES(uint)
__MT_VECTOR_NAMES(short)
__MT_VECTOR_NAMES(ushort)
__MT_VECTOR_NAMES(char)
__MT_VECTOR_NAMES(uchar)
__MT_VECTOR_NAMES(long)
__MT_VECTOR_NAMES(ulong)
__MT_VECTOR_NAMES(bool)
#undef __MT_VECTOR_NAMES

// ---- Vector constructors, as emitted by the source rewrite: T<N>(args) becomes
// __mt_make_vec<T, N>(args). No argument: zeros. One scalar: splat. One N-lane vector of any
// element type: element-wise numeric conversion (never a bit cast). Otherwise: the lanes of
// the scalar and vector arguments in order, which must add up to N.
template <class E, int N, class... A>
vec<E, N> __mt_make_vec(A... a) {
  constexpr int lanes = (0 + ... + __mt::lanes_of<A>::value);
  vec<E, N> r{};
  if constexpr (sizeof...(A) == 0) {
    return r;
  } else if constexpr (sizeof...(A) == 1 && lanes == 1) {
    auto s = __mt::convert_lane<E>(a...);
    for (int i = 0; i < N; ++i) r[i] = s;
  } else if constexpr (__mt::direct_vector_conversion<vec<E, N>, A...>::value) {
    // One numeric vector of N lanes: converted lane by lane in one operation (the same
    // conversion per lane; a lane-indexed loop here goes through memory at -O1).
    return __mt::convert_vector<vec<E, N>>(a...);
  } else if constexpr (__mt::vector_constructor_lanes<lanes, N>::ok) {
    int k = 0;
    (__mt::append_lanes(r, k, a), ...);
  }
  return r;
}

// ---- static_cast<T>(x) to a value type, as emitted by the source rewrite (translate.py):
// metal::__mt::value_cast<T>(x). MSL converts explicitly between half and bfloat, and lane
// by lane between vectors of one length; clang refuses the first and would bit-cast the
// second (float4 <-> int4). Everything else is C++'s static_cast.
namespace __mt {
template <class T, class U>
constexpr T value_cast(U u) {  // by value: the operand may be a vector element (v.x)
  using S = std::remove_cv_t<remove_address_space_t<U>>;
  using D = std::remove_cv_t<T>;
  if constexpr ((std::is_same_v<D, half> && std::is_same_v<S, bfloat>) ||
                (std::is_same_v<D, bfloat> && std::is_same_v<S, half>)) {
    return T(float(u));
  } else if constexpr (lanes_of<D>::value > 1 && lanes_of<S>::value == lanes_of<D>::value &&
                       !std::is_same_v<D, S>) {
    return __mt_make_vec<typename lanes_of<D>::elem, lanes_of<D>::value>(u);
  } else {
    return static_cast<T>(static_cast<U&&>(u));
  }
}
}  // namespace __mt

// ---- as_type<T>(x): the bits of x read as T; sizes must match, as in MSL.
template <class To, class From>
To as_type(From x) {
  static_assert(sizeof(To) == sizeof(From),
                "as_type: source and destination types must have the same size");
  return __builtin_bit_cast(To, x);
}

// ---- numeric_limits: std's for float and integers; half and bfloat from their bit patterns.
template <class T>
struct numeric_limits : std::numeric_limits<T> {};

namespace __mt {
// A 16-bit float type's limits from its bit patterns.
template <class T, int Digits, uint16_t Max, uint16_t Min, uint16_t Eps, uint16_t Inf, uint16_t NaN,
          uint16_t DenormMin>
struct limits16 {
  static constexpr bool is_specialized = true;
  static constexpr bool is_signed = true;
  static constexpr bool is_integer = false;
  static constexpr bool is_exact = false;
  static constexpr bool has_infinity = true;
  static constexpr bool has_quiet_NaN = true;
  static constexpr int radix = 2;
  static constexpr int digits = Digits;
  static constexpr T max() { return __builtin_bit_cast(T, Max); }
  static constexpr T min() { return __builtin_bit_cast(T, Min); }
  static constexpr T lowest() { return __builtin_bit_cast(T, uint16_t(Max | 0x8000)); }
  static constexpr T epsilon() { return __builtin_bit_cast(T, Eps); }
  static constexpr T infinity() { return __builtin_bit_cast(T, Inf); }
  static constexpr T quiet_NaN() { return __builtin_bit_cast(T, NaN); }
  static constexpr T denorm_min() { return __builtin_bit_cast(T, DenormMin); }
};
}  // namespace __mt

// half: max 65504, min normal 2^-14, epsilon 2^-10.
template <>
struct numeric_limits<half>
    : __mt::limits16<half, 11, 0x7bff, 0x0400, 0x1400, 0x7c00, 0x7e00, 0x0001> {};
// bfloat: max 0x1.fep127, min normal 2^-126, epsilon 2^-7.
template <>
struct numeric_limits<bfloat>
    : __mt::limits16<bfloat, 8, 0x7f7f, 0x0080, 0x3c00, 0x7f80, 0x7fc0, 0x0001> {};

}  // namespace metal

// Like MSL's builtins, the vector type names, as_type and the constructor helper are usable
// without `using namespace metal;` too.
using metal::__mt_make_vec;
using metal::as_type;
#define __MT_EXPORT_VECTOR_NAMES(T) using metal::T##2; using metal::T##3; using metal::T##4;
__MT_EXPORT_VECTOR_NAMES(float)
__MT_EXPORT_VECTOR_NAMES(half)
__MT_EXPORT_VECTOR_NAMES(bfloat)
__MT_EXPORT_VECTOR_NAMES(int)
__MT_EXPORT_VECTOR_NAMES(uint)
__MT_EXPORT_VECTOR_NAMES(short)
__MT_EXPORT_VECTOR_NAMES(ushort)
__MT_EXPORT_VECTOR_NAMES(char)
__MT_EXPORT_VECTOR_NAMES(uchar)
__MT_EXPORT_VECTOR_NAMES(long)
__MT_EXPORT_VECTOR_NAMES(ulong)
__MT_EXPORT_VECTOR_NAMES(bool)
#undef __MT_EXPORT_VECTOR_NAMES

// ---- Constants. The float ones are spelled as in glibc's <math.h>, so a later
// <math.h> in the same translation unit redefines them silently.
#undef INFINITY
#define INFINITY (__builtin_inff ())
#undef NAN
#define NAN (__builtin_nanf (""))
#undef HUGE_VALF
#define HUGE_VALF (__builtin_huge_valf ())
#undef MAXFLOAT
#define MAXFLOAT 3.40282347e+38F
// FLT_MAX, FLT_MIN, FLT_EPSILON, FLT_DIG, ... come from <cfloat>; INT_MAX etc. from <climits>.

#define HALF_DIG __FLT16_DIG__
#define HALF_MANT_DIG __FLT16_MANT_DIG__
#define HALF_MAX_10_EXP __FLT16_MAX_10_EXP__
#define HALF_MAX_EXP __FLT16_MAX_EXP__
#define HALF_MIN_10_EXP __FLT16_MIN_10_EXP__
#define HALF_MIN_EXP __FLT16_MIN_EXP__
#define HALF_RADIX 2
#define HALF_MAX ((half)65504.0f)
#define HALF_MIN ((half)0x1.0p-14f)
#define HALF_EPSILON ((half)0x1.0p-10f)
#define MAXHALF HALF_MAX
#define HUGE_VALH ((half)__builtin_inff())

// float constants: the float nearest to each value.
#define M_E_F 0x1.5bf0a8p+1f         // e
#define M_LOG2E_F 0x1.715476p+0f     // log2(e)
#define M_LOG10E_F 0x1.bcb7b2p-2f    // log10(e)
#define M_LN2_F 0x1.62e430p-1f       // ln(2)
#define M_LN10_F 0x1.26bb1cp+1f      // ln(10)
#define M_PI_F 0x1.921fb6p+1f        // pi
#define M_PI_2_F 0x1.921fb6p+0f      // pi/2
#define M_PI_4_F 0x1.921fb6p-1f      // pi/4
#define M_1_PI_F 0x1.45f306p-2f      // 1/pi
#define M_2_PI_F 0x1.45f306p-1f      // 2/pi
#define M_2_SQRTPI_F 0x1.20dd76p+0f  // 2/sqrt(pi)
#define M_SQRT2_F 0x1.6a09e6p+0f     // sqrt(2)
#define M_SQRT1_2_F 0x1.6a09e6p-1f   // 1/sqrt(2)

// half constants: the half nearest to each value (each literal is exactly that half).
#define M_E_H ((half)2.71875f)
#define M_LOG2E_H ((half)1.4423828125f)
#define M_LOG10E_H ((half)0.434326171875f)
#define M_LN2_H ((half)0.693359375f)
#define M_LN10_H ((half)2.302734375f)
#define M_PI_H ((half)3.140625f)
#define M_PI_2_H ((half)1.5703125f)
#define M_PI_4_H ((half)0.78515625f)
#define M_1_PI_H ((half)0.318359375f)
#define M_2_PI_H ((half)0.63671875f)
#define M_2_SQRTPI_H ((half)1.1279296875f)
#define M_SQRT2_H ((half)1.4140625f)
#define M_SQRT1_2_H ((half)0.70703125f)

// metal_stdlib.h — the emulator's stand-in for <metal_stdlib>: what MSL kernels see.
//
// Included (precompiled) before every rewritten MSL source. The concerns live in one
// header each; this file only puts them together and, last, turns MSL's address-space
// qualifiers into C++: `device`, `threadgroup` and `thread` vanish (one flat address space
// on the host), `constant` becomes `const`, and `kernel` becomes the annotation the
// signature reader (signature.py) finds kernels by, as translate.py does for every MSL
// attribute in `[[...]]`. `threadgroup` variable declarations are rewritten into
// per-group storage by the source rewrite (translate.py) before these macros apply.
#pragma once
#include "mt_types.h"
#include "mt_math.h"
#include "mt_runtime.h"
#include "mt_sync.h"
#include "mt_simd.h"
#include "mt_matrix.h"
#include "mt_atomic.h"
#include "mt_builtins.h"
#include "mt_sites.h"

// <metal_type_traits>: the standard traits under MSL's names, with half and bfloat counted
// as floating-point types (MSL 2.5); no void_t (MSL has none, and MLX's
// steel/utils/type_traits.h defines metal::void_t).
namespace metal {
using std::conditional; using std::conditional_t; using std::decay; using std::decay_t;
using std::enable_if; using std::enable_if_t; using std::false_type; using std::true_type;
using std::integral_constant; using std::bool_constant; using std::is_const; using std::is_const_v;
using std::is_convertible; using std::is_convertible_v; using std::is_integral;
using std::is_integral_v; using std::is_pointer; using std::is_pointer_v; using std::is_same;
using std::is_same_v; using std::is_signed; using std::is_signed_v; using std::is_unsigned;
using std::is_unsigned_v; using std::make_signed; using std::make_signed_t;
using std::make_unsigned; using std::make_unsigned_t; using std::remove_const;
using std::remove_const_t; using std::remove_cv; using std::remove_cv_t; using std::remove_reference;
using std::remove_reference_t; using std::is_void; using std::is_void_v;
using std::remove_pointer; using std::remove_pointer_t; using std::add_pointer;
using std::add_pointer_t; using std::is_reference; using std::is_reference_v;
using std::remove_extent; using std::remove_extent_t;
template <class T>
struct is_floating_point
    : std::bool_constant<std::is_floating_point_v<std::remove_cv_t<T>> ||
                         std::is_same_v<std::remove_cv_t<T>, half> ||
                         std::is_same_v<std::remove_cv_t<T>, bfloat>> {};
template <class T> inline constexpr bool is_floating_point_v = is_floating_point<T>::value;
template <class T>
struct is_arithmetic : std::bool_constant<is_floating_point_v<T> || std::is_integral_v<T>> {};
template <class T> inline constexpr bool is_arithmetic_v = is_arithmetic<T>::value;

// metal::array<T, N> (MSL 2.14): a fixed-size array with size() and indexing (checked like
// any array of known size in checked builds).
template <class T, size_t N>
struct array {
  T __elems[N];
  static constexpr size_t size() { return N; }
  T& operator[](size_t i) { return __elems[i]; }
  constexpr const T& operator[](size_t i) const { return __elems[i]; }
};

// uniform<T> (MSL 2.15): a value the same in every thread; here it only carries the value.
template <class T>
struct uniform {
  T __value;
  uniform() = default;
  constexpr uniform(T v) : __value(v) {}
  constexpr operator T() const { return __value; }
};
template <class T> constexpr uniform<T> make_uniform(T v) { return uniform<T>(v); }
}  // namespace metal

// Converts a thread-position value (always computed as uint3) to the declared type.
namespace metal {
namespace __mt {
template <class T> struct position_of;
template <class E> struct position_of<E __attribute__((ext_vector_type(2)))> {
  static auto get(const uint32_t* v) { return (E __attribute__((ext_vector_type(2)))){E(v[0]), E(v[1])}; }
};
template <class E> struct position_of<E __attribute__((ext_vector_type(3)))> {
  static auto get(const uint32_t* v) {
    return (E __attribute__((ext_vector_type(3)))){E(v[0]), E(v[1]), E(v[2])};
  }
};
template <class T> struct position_of { static T get(const uint32_t* v) { return T(v[0]); } };
template <class T> inline T position(const uint32_t* v) { return position_of<T>::get(v); }
template <class T> inline T position(uint32_t v) { return T(v); }

// The launcher's view of a kernel: the type of parameter I of function pointer type F
// (as adjusted by the language: arrays decayed, top-level const dropped), and a buffer
// bound to a pointer (its address) or a reference (the object stored there).
template <size_t I, class... A> struct nth_type;
template <class H, class... T> struct nth_type<0, H, T...> { using type = H; };
template <size_t I, class H, class... T> struct nth_type<I, H, T...> {
  using type = typename nth_type<I - 1, T...>::type;
};
template <class F, size_t I> struct param_of;
template <class R, class... A, size_t I> struct param_of<R (*)(A...), I> {
  using type = typename nth_type<I, A...>::type;
};
template <class F, size_t I> using param_t = typename param_of<F, I>::type;
template <class T> inline T bind_buffer(void* p) {
  // C-style casts: the only casts that may change the address space
  if constexpr (std::is_reference_v<T>) return *(std::remove_reference_t<T>*)p;
  else return (T)p;
}
}  // namespace __mt
}  // namespace metal

// Address spaces are qualifiers of the type, as in MSL, so that overloads and templates
// that differ only in one are distinct (a `device float*` and a `threadgroup float*`
// overload, `is_same_v<T, device float>`). They are clang's address-space qualifiers under
// SYCL's rules (build.py compiles with -fsycl-is-device): the default space (`thread`) is
// a superset of the others, so a struct in device memory copies, compares and calls its
// plain member functions as in MSL, while an exact match still wins overload resolution.
// All of them are one flat LLVM address space on the host, so the race checker's hooks
// see every access. `constant` is read-only storage; its qualifier (SYCL's private space,
// the one left over) only keeps it apart from the others in overloads.
#define device __attribute__((opencl_global))
#define threadgroup __attribute__((opencl_local))
#define thread
#define constant const __attribute__((opencl_private))
#define kernel [[clang::annotate("metal", "kernel")]]
// <metal_stdlib>'s own spelling of a forced-inline function, which MSL libraries use.
#define METAL_FUNC inline __attribute__((__always_inline__))
// Whether a [[function_constant(i)]] was given a value (translate.py declares the flag).
#define is_function_constant_defined(name) __mt_fc_defined_##name
// A unique name in any context (translate.py names host_name instantiations with it).
#define __MT_CAT2(a, b) a##b
#define __MT_CAT(a, b) __MT_CAT2(a, b)

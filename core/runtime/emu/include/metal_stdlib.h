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
#include "mt_sites.h"

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
  if constexpr (std::is_reference_v<T>) return *static_cast<std::remove_reference_t<T>*>(p);
  else return (T)p;
}
}  // namespace __mt
}  // namespace metal

#define device
#define threadgroup
#define thread
#define constant const
#define kernel [[clang::annotate("metal", "kernel")]]

// metal_stdlib.h — the emulator's stand-in for <metal_stdlib>: what MSL kernels see.
//
// Included (precompiled) before every rewritten MSL source. The concerns live in one
// header each; this file only puts them together and, last, turns MSL's address-space
// qualifiers into C++: `device`, `threadgroup` and `thread` vanish (one flat address space
// on the host), `constant` becomes `const`, and `kernel` vanishes (the launcher calls the
// function). `threadgroup` variable declarations are rewritten into per-group storage by
// the source rewrite (translate.py) before these macros apply.
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
}  // namespace __mt
}  // namespace metal

#define device
#define threadgroup
#define thread
#define constant const
#define kernel

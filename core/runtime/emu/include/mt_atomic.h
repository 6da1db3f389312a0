// mt_atomic.h — MSL atomics on device and threadgroup memory.
//
// MSL semantics followed (MSL Specification, "Atomic functions"): atomic_int, atomic_uint,
// atomic_bool and atomic_float (MSL 3.0) objects, the C++-style *_explicit functions with
// memory_order_relaxed (the only order MSL guarantees for device atomics), fetch_min/max
// for integers. They are real atomic operations on the host (threadgroups run on several
// OS threads). The checker counts them and checks their bounds; an atomic never races with
// another atomic, while a plain read or write of the same bytes by another thread in the
// same barrier interval (or by another threadgroup) is a race finding (MSL: "memory_order_
// relaxed" orders nothing but the atomic object itself).
#pragma once
#include "mt_runtime.h"
#include "mt_sync.h"

namespace metal {

enum memory_order {
  memory_order_relaxed = __ATOMIC_RELAXED,
  memory_order_acquire = __ATOMIC_ACQUIRE,
  memory_order_release = __ATOMIC_RELEASE,
  memory_order_acq_rel = __ATOMIC_ACQ_REL,
  memory_order_seq_cst = __ATOMIC_SEQ_CST,
};

template <class T>
struct atomic {
  static_assert(sizeof(T) == 4, "MSL atomics are 32-bit (atomic_int, atomic_uint, atomic_float)");
  T __value;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<float> atomic_float;
struct atomic_bool { bool __value; };

namespace __mt {
// The value type of an atomic object in any address space: the functions below take
// `volatile device atomic_int*`, `threadgroup atomic_float*`, ... by deducing the object.
template <class O> struct atomic_value;
template <class T> struct atomic_value<atomic<T>> { using type = T; };
template <class O>
using atomic_value_t = typename atomic_value<std::remove_cv_t<remove_address_space_t<O>>>::type;
}  // namespace __mt

namespace __mt {

template <class T>
__MT_INLINE T* atomic_ptr(volatile atomic<T>* o, int kind) {  // 0 load, 1 rmw, 2 store
  T* p = (T*)&o->__value;
  __mt_atomic_access(p, sizeof(T), kind);
  return p;
}

// Read-modify-write through a compare-exchange loop on the 32-bit pattern.
template <class T, class F>
__MT_INLINE T atomic_rmw(volatile atomic<T>* o, F f) {
  T* p = atomic_ptr(o, 1);
  uint* bits = reinterpret_cast<uint*>(p);
  uint old_bits = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    T old_value;
    __builtin_memcpy(&old_value, &old_bits, 4);
    T new_value = f(old_value);
    uint new_bits;
    __builtin_memcpy(&new_bits, &new_value, 4);
    if (__atomic_compare_exchange_n(bits, &old_bits, new_bits, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      return old_value;
  }
}

}  // namespace __mt

template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE void atomic_store_explicit(volatile O* o, U v, memory_order) {
  T value = T(v);
  uint bits;
  __builtin_memcpy(&bits, &value, 4);
  __atomic_store_n(reinterpret_cast<uint*>(__mt::atomic_ptr<T>(o, 2)), bits, __ATOMIC_RELAXED);
}
template <class O, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_load_explicit(volatile O* o, memory_order) {
  uint bits = __atomic_load_n(reinterpret_cast<uint*>(__mt::atomic_ptr<T>(o, 0)), __ATOMIC_RELAXED);
  T value;
  __builtin_memcpy(&value, &bits, 4);
  return value;
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_exchange_explicit(volatile O* o, U v, memory_order) {
  return __mt::atomic_rmw<T>(o, [&](T) { return T(v); });
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE bool atomic_compare_exchange_weak_explicit(volatile O* o, T* expected, U desired,
                                                      memory_order, memory_order) {
  T* p = __mt::atomic_ptr<T>(o, 1);
  uint exp_bits, new_bits;
  T d = T(desired);
  __builtin_memcpy(&exp_bits, expected, 4);
  __builtin_memcpy(&new_bits, &d, 4);
  bool ok = __atomic_compare_exchange_n(reinterpret_cast<uint*>(p), &exp_bits, new_bits, false,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  if (!ok) __builtin_memcpy(expected, &exp_bits, 4);
  return ok;
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_fetch_add_explicit(volatile O* o, U v, memory_order) {
  return __mt::atomic_rmw<T>(o, [&](T x) { return T(x + T(v)); });
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_fetch_sub_explicit(volatile O* o, U v, memory_order) {
  return __mt::atomic_rmw<T>(o, [&](T x) { return T(x - T(v)); });
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_fetch_and_explicit(volatile O* o, U v, memory_order) {
  return __mt::atomic_rmw<T>(o, [&](T x) { return T(x & T(v)); });
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_fetch_or_explicit(volatile O* o, U v, memory_order) {
  return __mt::atomic_rmw<T>(o, [&](T x) { return T(x | T(v)); });
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_fetch_xor_explicit(volatile O* o, U v, memory_order) {
  return __mt::atomic_rmw<T>(o, [&](T x) { return T(x ^ T(v)); });
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_fetch_min_explicit(volatile O* o, U v, memory_order) {
  return __mt::atomic_rmw<T>(o, [&](T x) { return T(v) < x ? T(v) : x; });
}
template <class O, class U, class T = __mt::atomic_value_t<O>>
__MT_INLINE T atomic_fetch_max_explicit(volatile O* o, U v, memory_order) {
  return __mt::atomic_rmw<T>(o, [&](T x) { return T(v) > x ? T(v) : x; });
}

}  // namespace metal

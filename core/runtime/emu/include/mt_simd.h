// mt_simd.h — MSL SIMD-group functions: shuffles, broadcasts, reductions, scans, votes.
//
// MSL semantics followed (MSL Specification, "SIMD-group functions"): a simdgroup is 32
// lanes on Apple GPUs (the last simdgroup of a threadgroup may be partial); only active
// lanes take part. simd_shuffle(v, i) reads lane i; reading a lane that is not active is
// undefined, reported here as a divergence finding (the caller gets its own value back).
// simd_shuffle_up/down leave the lowest/highest `delta` lanes unchanged; the rotate forms
// wrap around the simdgroup width. simd_shuffle_and_fill_up/down(data, filling, delta
// [, modulo]) split the lanes into vectors of `modulo` lanes (default: the simdgroup) and
// shift data within each; the lanes shifted in take `filling` of the lanes at the other end
// of their vector (fill_down: lane j of the vector gets filling of lane j + delta - modulo).
// simd_sum/product/min/max/and/or/xor reduce over the
// active lanes; this emulator combines them in increasing lane order, in the value's own
// type (a half simd_sum rounds at every step). Prefix scans follow lane order as well.
// Every function is a meeting point of the lanes of one simdgroup (see mt_runtime.h).
//
// Emulator cost: the functions are compiled without the checker's instrumentation
// (__MT_UNCHECKED, mt_sync.h): they read only the runtime's table of deposited values and the
// caller's own arguments, never device or threadgroup memory, so there is nothing to check,
// and a reduction reading 32 slots per lane would otherwise make 32 hook calls per lane. A
// reduction is computed once per meeting: the first lane to resume combines the slots and
// leaves the result in the simdgroup's scratch (mt_runtime.h, __mt_simd_shared); the other
// lanes copy it. Every lane gets the same bits as before (one order of combination).
#pragma once
#include "mt_runtime.h"
#include "mt_sync.h"
#include "mt_target.h"

static_assert(MT_SIMD_WIDTH == 32, "active-lane masks are 32-bit words (core/target.py simd_width)");

namespace metal {
namespace __mt {

template <class T>
__MT_INLINE __mt_simd_table simd_meet(__mt_site at, const T& v, unsigned kind) {
  static_assert(sizeof(T) <= __MT_SIMD_SLOT, "simd function: value type is too large");
  return __mt_simd_meet(&v, sizeof(T), kind, at, __MT_CALL_SITE);
}
template <class T>
__MT_INLINE T simd_lane_value(const __mt_simd_table& t, unsigned lane) {
  T r;
  __builtin_memcpy(&r, t.slots + lane * __MT_SIMD_SLOT, sizeof(T));
  return r;
}
template <class T>
__MT_INLINE T simd_read(const __mt_simd_table& t, unsigned src, const T& own, unsigned kind) {
  if (src >= MT_SIMD_WIDTH || !((t.active >> src) & 1u)) {
    __mt_simd_inactive_lane(kind, src, __MT_CALL_SITE);
    return own;
  }
  return simd_lane_value<T>(t, src);
}
__MT_INLINE unsigned simd_first_lane(const __mt_simd_table& t) { return unsigned(__builtin_ctz(t.active)); }

struct op_sum { template <class T> __MT_INLINE static T apply(T a, T b) { return a + b; } };
struct op_product { template <class T> __MT_INLINE static T apply(T a, T b) { return a * b; } };
struct op_min { template <class T> __MT_INLINE static T apply(T a, T b) { return min(a, b); } };
struct op_max { template <class T> __MT_INLINE static T apply(T a, T b) { return max(a, b); } };
struct op_and { template <class T> __MT_INLINE static T apply(T a, T b) { return a & b; } };
struct op_or { template <class T> __MT_INLINE static T apply(T a, T b) { return a | b; } };
struct op_xor { template <class T> __MT_INLINE static T apply(T a, T b) { return a ^ b; } };

template <class Op, class T>
__MT_INLINE T simd_reduce(__mt_site at, T v) {
  static_assert(sizeof(T) <= sizeof(__mt_simd_shared::bytes), "simd reduction: value too large");
  __mt_simd_table t = simd_meet(at, v, __MT_SIMD_REDUCE);
  T acc;
  if (t.shared->meet_id == t.meet_id) {  // another lane of this meeting combined them
    __builtin_memcpy(&acc, t.shared->bytes, sizeof(T));
    return acc;
  }
  unsigned first = simd_first_lane(t);
  acc = simd_lane_value<T>(t, first);
  for (unsigned i = first + 1; i < MT_SIMD_WIDTH; ++i)
    if ((t.active >> i) & 1u) acc = Op::apply(acc, simd_lane_value<T>(t, i));
  __builtin_memcpy(t.shared->bytes, &acc, sizeof(T));
  t.shared->meet_id = t.meet_id;
  return acc;
}

// Inclusive (or exclusive, starting from `identity`) scan over active lanes up to the caller.
template <class Op, class T>
__MT_INLINE T simd_scan(__mt_site at, T v, bool inclusive, T identity) {
  __mt_simd_table t = simd_meet(at, v, __MT_SIMD_SCAN);
  T acc = identity;
  for (unsigned i = 0; i < t.lane; ++i)
    if ((t.active >> i) & 1u) acc = Op::apply(acc, simd_lane_value<T>(t, i));
  return inclusive ? Op::apply(acc, v) : acc;
}

}  // namespace __mt

template <class T> __MT_UNCHECKED T simd_shuffle(__mt_site at, T v, ushort lane) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  return __mt::simd_read(t, lane, v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T simd_shuffle_xor(__mt_site at, T v, ushort mask) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  return __mt::simd_read(t, t.lane ^ unsigned(mask), v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T simd_shuffle_up(__mt_site at, T v, ushort delta) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  if (t.lane < delta) return v;
  return __mt::simd_read(t, t.lane - delta, v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T simd_shuffle_down(__mt_site at, T v, ushort delta) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  if (t.lane + delta >= t.width) return v;
  return __mt::simd_read(t, t.lane + delta, v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T simd_shuffle_rotate_up(__mt_site at, T v, ushort delta) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  return __mt::simd_read(t, (t.lane + t.width - delta % t.width) % t.width, v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T simd_shuffle_rotate_down(__mt_site at, T v, ushort delta) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  return __mt::simd_read(t, (t.lane + delta) % t.width, v, __MT_SIMD_SHUFFLE);
}
namespace __mt {
template <class T> struct fill_pair { T data, filling; };
// Lane j of a vector of `modulo` lanes reads lane j -+ delta's data, or, shifted past the
// end of the vector, the filling of the lane that many lanes in from the other end.
template <class T>
__MT_UNCHECKED T simd_shift_fill(__mt_site at, T v, T fill, int delta, unsigned modulo) {
  fill_pair<T> mine{v, fill};
  __mt_simd_table t = simd_meet(at, mine, __MT_SIMD_SHUFFLE);
  const int m = int(modulo ? modulo : t.width);
  const int j = int(t.lane) % m, k = j + delta;
  const bool filled = k < 0 || k >= m;
  const unsigned src = unsigned(int(t.lane) - j + ((k % m) + m) % m);
  fill_pair<T> p = simd_read(t, src, mine, __MT_SIMD_SHUFFLE);
  return filled ? p.filling : p.data;
}
}  // namespace __mt
template <class T> __MT_UNCHECKED T simd_shuffle_and_fill_up(__mt_site at, T v, T fill, ushort delta) {
  return __mt::simd_shift_fill(at, v, fill, -int(delta), 0);
}
template <class T> __MT_UNCHECKED T simd_shuffle_and_fill_down(__mt_site at, T v, T fill, ushort delta) {
  return __mt::simd_shift_fill(at, v, fill, int(delta), 0);
}
template <class T>
__MT_UNCHECKED T simd_shuffle_and_fill_up(__mt_site at, T v, T fill, ushort delta, ushort modulo) {
  return __mt::simd_shift_fill(at, v, fill, -int(delta), modulo);
}
template <class T>
__MT_UNCHECKED T simd_shuffle_and_fill_down(__mt_site at, T v, T fill, ushort delta, ushort modulo) {
  return __mt::simd_shift_fill(at, v, fill, int(delta), modulo);
}
template <class T> __MT_UNCHECKED T simd_broadcast(__mt_site at, T v, ushort lane) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_BROADCAST);
  return __mt::simd_read(t, lane, v, __MT_SIMD_BROADCAST);
}
template <class T> __MT_UNCHECKED T simd_broadcast_first(__mt_site at, T v) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_BROADCAST);
  return __mt::simd_lane_value<T>(t, __mt::simd_first_lane(t));
}

template <class T> __MT_UNCHECKED T simd_sum(__mt_site at, T v) { return __mt::simd_reduce<__mt::op_sum>(at, v); }
template <class T> __MT_UNCHECKED T simd_product(__mt_site at, T v) { return __mt::simd_reduce<__mt::op_product>(at, v); }
template <class T> __MT_UNCHECKED T simd_min(__mt_site at, T v) { return __mt::simd_reduce<__mt::op_min>(at, v); }
template <class T> __MT_UNCHECKED T simd_max(__mt_site at, T v) { return __mt::simd_reduce<__mt::op_max>(at, v); }
template <class T> __MT_UNCHECKED T simd_and(__mt_site at, T v) { return __mt::simd_reduce<__mt::op_and>(at, v); }
template <class T> __MT_UNCHECKED T simd_or(__mt_site at, T v) { return __mt::simd_reduce<__mt::op_or>(at, v); }
template <class T> __MT_UNCHECKED T simd_xor(__mt_site at, T v) { return __mt::simd_reduce<__mt::op_xor>(at, v); }

template <class T> __MT_UNCHECKED T simd_prefix_inclusive_sum(__mt_site at, T v) { return __mt::simd_scan<__mt::op_sum>(at, v, true, T(0)); }
template <class T> __MT_UNCHECKED T simd_prefix_exclusive_sum(__mt_site at, T v) { return __mt::simd_scan<__mt::op_sum>(at, v, false, T(0)); }
template <class T> __MT_UNCHECKED T simd_prefix_inclusive_product(__mt_site at, T v) { return __mt::simd_scan<__mt::op_product>(at, v, true, T(1)); }
template <class T> __MT_UNCHECKED T simd_prefix_exclusive_product(__mt_site at, T v) { return __mt::simd_scan<__mt::op_product>(at, v, false, T(1)); }

// simd_vote: one bit per lane, as MSL's simd_vote (convertible to its vote_t).
struct simd_vote {
  using vote_t = ulong;
  vote_t bits;
  explicit constexpr operator vote_t() const { return bits; }
  constexpr bool any() const { return bits != 0; }
};
__MT_UNCHECKED simd_vote simd_ballot(__mt_site at, bool pred) {
  __mt_simd_table t = __mt::simd_meet(at, pred, __MT_SIMD_VOTE);
  ulong bits = 0;
  for (unsigned i = 0; i < MT_SIMD_WIDTH; ++i)
    if (((t.active >> i) & 1u) && __mt::simd_lane_value<bool>(t, i)) bits |= ulong(1) << i;
  return simd_vote{bits};
}
__MT_UNCHECKED bool simd_all(__mt_site at, bool pred) {
  __mt_simd_table t = __mt::simd_meet(at, pred, __MT_SIMD_VOTE);
  for (unsigned i = 0; i < MT_SIMD_WIDTH; ++i)
    if (((t.active >> i) & 1u) && !__mt::simd_lane_value<bool>(t, i)) return false;
  return true;
}
__MT_UNCHECKED bool simd_any(__mt_site at, bool pred) {
  __mt_simd_table t = __mt::simd_meet(at, pred, __MT_SIMD_VOTE);
  for (unsigned i = 0; i < MT_SIMD_WIDTH; ++i)
    if (((t.active >> i) & 1u) && __mt::simd_lane_value<bool>(t, i)) return true;
  return false;
}
// simd_active_threads_mask(): the active lanes as a simd_vote (bit i: lane i is active).
__MT_UNCHECKED simd_vote simd_active_threads_mask(__mt_site at) {
  char unused = 0;
  __mt_simd_table t = __mt::simd_meet(at, unused, __MT_SIMD_VOTE);
  return simd_vote{ulong(t.active)};
}
__MT_UNCHECKED bool simd_is_first(__mt_site at) {
  char unused = 0;
  __mt_simd_table t = __mt::simd_meet(at, unused, __MT_SIMD_VOTE);
  return t.lane == __mt::simd_first_lane(t);
}

// Quad-group functions (MSL Specification, "Quad-group functions"): a quad is 4 consecutive
// lanes of a simdgroup (lanes 4q .. 4q + 3), and each function works within the caller's
// quad as the simd function of the same name does within the simdgroup (indices and
// masks are quad lanes, 0..3). They meet as the simd functions do (every active lane of
// the simdgroup at the same call); a reduction combines the active lanes of the caller's
// quad in increasing lane order, in the value's own type.
namespace __mt {
constexpr unsigned QUAD = 4;
template <class Op, class T>
__MT_INLINE T quad_reduce(__mt_site at, T v) {
  __mt_simd_table t = simd_meet(at, v, __MT_SIMD_REDUCE);
  const unsigned base = t.lane & ~(QUAD - 1);
  bool any = false;
  T acc = v;
  for (unsigned i = base; i < base + QUAD; ++i) {
    if (!((t.active >> i) & 1u)) continue;
    T x = simd_lane_value<T>(t, i);
    acc = any ? Op::apply(acc, x) : x;
    any = true;
  }
  return acc;
}
template <class Op, class T>
__MT_INLINE T quad_scan(__mt_site at, T v, bool inclusive, T identity) {
  __mt_simd_table t = simd_meet(at, v, __MT_SIMD_SCAN);
  T acc = identity;
  for (unsigned i = t.lane & ~(QUAD - 1); i < t.lane; ++i)
    if ((t.active >> i) & 1u) acc = Op::apply(acc, simd_lane_value<T>(t, i));
  return inclusive ? Op::apply(acc, v) : acc;
}
__MT_INLINE unsigned quad_lane(const __mt_simd_table& t, unsigned quad_index) {
  return (t.lane & ~(QUAD - 1)) + quad_index;
}
}  // namespace __mt

template <class T> __MT_UNCHECKED T quad_sum(__mt_site at, T v) { return __mt::quad_reduce<__mt::op_sum>(at, v); }
template <class T> __MT_UNCHECKED T quad_product(__mt_site at, T v) { return __mt::quad_reduce<__mt::op_product>(at, v); }
template <class T> __MT_UNCHECKED T quad_min(__mt_site at, T v) { return __mt::quad_reduce<__mt::op_min>(at, v); }
template <class T> __MT_UNCHECKED T quad_max(__mt_site at, T v) { return __mt::quad_reduce<__mt::op_max>(at, v); }
template <class T> __MT_UNCHECKED T quad_and(__mt_site at, T v) { return __mt::quad_reduce<__mt::op_and>(at, v); }
template <class T> __MT_UNCHECKED T quad_or(__mt_site at, T v) { return __mt::quad_reduce<__mt::op_or>(at, v); }
template <class T> __MT_UNCHECKED T quad_xor(__mt_site at, T v) { return __mt::quad_reduce<__mt::op_xor>(at, v); }
template <class T> __MT_UNCHECKED T quad_prefix_inclusive_sum(__mt_site at, T v) { return __mt::quad_scan<__mt::op_sum>(at, v, true, T(0)); }
template <class T> __MT_UNCHECKED T quad_prefix_exclusive_sum(__mt_site at, T v) { return __mt::quad_scan<__mt::op_sum>(at, v, false, T(0)); }
template <class T> __MT_UNCHECKED T quad_shuffle(__mt_site at, T v, ushort quad_lane) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  return __mt::simd_read(t, __mt::quad_lane(t, quad_lane % __mt::QUAD), v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T quad_shuffle_xor(__mt_site at, T v, ushort mask) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  return __mt::simd_read(t, t.lane ^ (unsigned(mask) % __mt::QUAD), v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T quad_shuffle_up(__mt_site at, T v, ushort delta) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  if ((t.lane % __mt::QUAD) < delta) return v;
  return __mt::simd_read(t, t.lane - delta, v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T quad_shuffle_down(__mt_site at, T v, ushort delta) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_SHUFFLE);
  if ((t.lane % __mt::QUAD) + delta >= __mt::QUAD) return v;
  return __mt::simd_read(t, t.lane + delta, v, __MT_SIMD_SHUFFLE);
}
template <class T> __MT_UNCHECKED T quad_broadcast(__mt_site at, T v, ushort quad_lane) {
  __mt_simd_table t = __mt::simd_meet(at, v, __MT_SIMD_BROADCAST);
  return __mt::simd_read(t, __mt::quad_lane(t, quad_lane % __mt::QUAD), v, __MT_SIMD_BROADCAST);
}

}  // namespace metal

// mt_matrix.h — MSL simdgroup matrices (8x8): make_filled, load, store, multiply(_accumulate).
//
// MSL semantics followed (MSL Specification, "SIMD-group matrix functions", Table 6.9):
// simdgroup_matrix<T, 8, 8> for T = float, half, bfloat; `simdgroup_matrix(T d)` is a
// diagonal matrix, make_filled_simdgroup_matrix fills every element. Load/store address
// element (r, c) at p[(origin.y + r) * elements_per_row + origin.x + c], or at
// p[(origin.y + c) * elements_per_row + origin.x + r] when transposed; the element type of
// the pointer must be the matrix's T (real MSL rejects a float matrix stored through a half
// pointer, and so does this header: no overload matches). multiply_accumulate computes
// d = a * b + c with a and b of one type and c, d of one type (half or bfloat inputs into
// a float accumulator are allowed); products and sums are formed in float here.
//
// Emulator model: every lane keeps the whole 8x8 tile. thread_elements() is the lane's own
// two elements, as Apple GPUs place them (the layout MLX's steel kernels are written for,
// steel/gemm/mma.h BaseMMAFrag::get_coord): lane l holds row (q & 4) + (l / 2) % 4 and
// columns (q & 2) * 2 + (l % 2) * 2 and the next, q = l / 4. Handing out that reference
// marks the tile "partial" (only the lane's own pair is known to be current); an operation
// that reads a partial tile (multiply, store) first pools the lanes' pairs
// (`gather`, `gather_operands`: one meeting at the operation's site, which counts as no
// simd operation), after
// which every lane holds the whole tile again, tagged as a uniform load is. Load and store are
// collectives: the lanes meet, check that pointer, stride, origin and transpose agree, and
// one lane (the lowest active) performs the recorded memory accesses for the simdgroup,
// each element's as the access of the lane that holds it (matrix_lane, __mt_matrix_attribute:
// the checker then sees which lane wrote what); the other lanes do not record, and do not
// store.
//
// One operation per simdgroup, not per lane: every tile carries a tag naming its value
// (0: unknown). A uniform load is tagged with its meeting; a fill with its type and value;
// a multiply-accumulate with a hash of its operands' tags and types (the runtime's). The first
// lane to load a tile leaves it in the simdgroup's scratch; the first to multiply puts the
// product in the worker's memo (mt_runtime.h); the other lanes copy instead of reading the
// tile again or doing the 512 multiply-adds again. Lanes whose operands are untagged or
// differ compute on their own, as every lane did before. Counters and findings are
// unchanged: the recording lane still performs every recorded access itself (a load's
// through one runtime call, __mt_matrix_load, that records each element as its hook would).
// simdgroup matrices live in the thread address space (MSL allows no other), so the
// multiply and the copy of a loaded tile from the scratch touch no memory the checker
// judges: they are __MT_UNCHECKED (mt_sync.h), plain copies without hook calls.
#pragma once
#include "mt_runtime.h"
#include "mt_sync.h"

namespace metal {

template <class T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(MT_MATRIX_TILE == 8, "core/target.py: matrix_tile is not MSL's 8x8");
  static_assert(Cols == 8 && Rows == 8, "simdgroup_matrix: only 8x8 matrices exist in MSL");
  alignas(2 * sizeof(T)) T e[Rows][Cols];   // a lane's pair e[r][c..c+1] is one vec<T, 2>
  ulong __tag = 0;  // names the value (see the file comment); 0: unknown
  bool __partial = false;  // thread_elements() handed out: only the lane's pair is current
  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T diagonal);
  // The calling lane's two elements (see the file comment), writable.
  vec<T, 2>& thread_elements() {
    __partial = true;
    __tag = 0;
    return *__lane_pair(&e[0][0]);
  }
  const vec<T, 2>& thread_elements() const { return *__lane_pair(const_cast<T*>(&e[0][0])); }
  static vec<T, 2>* __lane_pair(T* tile) {
    const uint32_t l = __mt_current_position()->thread_index_in_simdgroup;
    const uint32_t q = l / 4, row = (q & 4) + (l / 2) % 4, col = (q & 2) * 2 + (l % 2) * 2;
    return reinterpret_cast<vec<T, 2>*>(tile + row * Cols + col);
  }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

namespace __mt {
// The lane holding element (r, c) of an 8x8 tile in the layout above (lane l: row
// (q & 4) + (l / 2) % 4, columns (q & 2) * 2 + (l % 2) * 2 and the next, q = l / 4),
// solved for l.
constexpr unsigned matrix_lane(int r, int c) {
  return unsigned(((c >> 1) & 1) | ((r & 1) << 1) | (((r >> 1) & 1) << 2) |
                  (((c >> 2) & 1) << 3) | (((r >> 2) & 1) << 4));
}
}  // namespace __mt

namespace __mt {

// Tags: top two bits say what named the value (fill 10, load 01, multiply 11).
constexpr ulong kTagFill = ulong(2) << 62, kTagLoad = ulong(1) << 62, kTagMultiply = ulong(3) << 62;
template <class T> constexpr ulong type_code() {
  return __is_same(T, float) ? 1 : __is_same(T, half) ? 2 : __is_same(T, bfloat) ? 3 : 4;
}
template <class T> __MT_INLINE ulong fill_tag(T value, bool diagonal) {
  uint32_t bits = 0;
  __builtin_memcpy(&bits, &value, sizeof(T) < 4 ? sizeof(T) : 4);
  return kTagFill | (type_code<T>() << 40) | (ulong(diagonal) << 39) | bits;
}

}  // namespace __mt

template <class T, int Cols, int Rows>
simdgroup_matrix<T, Cols, Rows>::simdgroup_matrix(T diagonal) {
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) e[r][c] = r == c ? diagonal : T(0);
  __tag = __mt::fill_tag(diagonal, true);
}

template <class T, int Cols, int Rows = Cols>
__MT_INLINE simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) m.e[r][c] = value;
  m.__tag = __mt::fill_tag(value, false);
  return m;
}

namespace __mt {

struct matrix_access {
  const void* ptr;
  ulong elements_per_row;
  ulong origin_x, origin_y;
  ulong transpose;  // a full word: no padding bytes, so equal arguments deposit equal bytes
};

struct matrix_meeting {
  bool records;   // this lane performs the recorded accesses
  bool copied;    // the loaded tile was copied from the simdgroup's scratch (load only)
  bool share;     // this lane reads the tile and leaves it in the scratch (share_tile)
  ulong tag;      // the loaded tile's tag when the arguments are uniform, else 0
  ulong id;       // the meeting
  __mt_simd_shared* shared;
};

// A tile's bytes: 8x8 of 2 or 4 bytes, copied inline rather than by a library call.
__MT_INLINE void copy_tile(void* to, const void* from, unsigned bytes) {
  if (bytes == 128) __builtin_memcpy(to, from, 128);
  else if (bytes == 256) __builtin_memcpy(to, from, 256);
  else __builtin_memcpy(to, from, bytes);
}

// Meets the simdgroup and checks the uniform arguments. For a load (`tile` not null): a
// uniform load's tile is read by the first lane to resume, which leaves it in the
// simdgroup's scratch; a later lane that does not record copies it into `tile` here. The
// recording lane always performs (and so records) every access itself.
__MT_UNCHECKED matrix_meeting matrix_meet(__mt_site at, matrix_access a, unsigned kind,
                                          void* tile, unsigned tile_bytes) {
  __mt_simd_table t = __mt_simd_meet(&a, sizeof(a), kind, at, __MT_CALL_SITE);
  unsigned first = unsigned(__builtin_ctz(t.active));
  matrix_access lead;
  __builtin_memcpy(&lead, t.slots + first * __MT_SIMD_SLOT, sizeof(lead));
  if (lead.ptr != a.ptr || lead.elements_per_row != a.elements_per_row ||
      lead.origin_x != a.origin_x || lead.origin_y != a.origin_y || lead.transpose != a.transpose)
    __mt_simd_nonuniform(kind, "pointer, elements_per_row, matrix_origin and transpose_matrix",
                         __MT_CALL_SITE);
  matrix_meeting m{t.lane == first, false, false, t.uniform ? kTagLoad | t.meet_id : 0, t.meet_id,
                   t.shared};
  if (tile && m.tag) {
    const bool filled = t.shared->meet_id == t.meet_id;
    if (!m.records && filled) {
      copy_tile(tile, t.shared->bytes, tile_bytes);
      m.copied = true;
    }
    m.share = !filled;
  }
  return m;
}

// The tile this lane read, for the other lanes of its meeting (matrix_meet).
__MT_UNCHECKED void share_tile(const matrix_meeting& m, const void* tile, unsigned tile_bytes) {
  __builtin_memcpy(m.shared->bytes, tile, tile_bytes);
  m.shared->meet_id = m.id;
}

// The recording lane's load of a whole tile with its reads recorded in one runtime call
// (__mt_matrix_load) rather than a hook call per element; false where it does not apply (an
// unchecked build has no hooks to record with; a tile outside device and threadgroup
// memory), and the caller loads element by element. Inlined, so that the runtime's return
// address, the pc of any finding, is in the kernel at the load's line.
__MT_INLINE bool matrix_load(void* tile, const void* p, unsigned elem, const matrix_access& a) {
#if __has_feature(thread_sanitizer)
  return __mt_matrix_load(tile, p, elem, a.elements_per_row, a.origin_x, a.origin_y,
                          a.transpose) != 0;
#else
  (void)tile, (void)p, (void)elem, (void)a;
  return false;
#endif
}

// A row of a tile in float and back: whole-row conversions where the element type has
// them (float, half: one vector conversion rounds each lane as a scalar one would),
// element by element otherwise.
typedef float row8 __attribute__((ext_vector_type(8)));
__MT_INLINE row8 load_row(const float (&r)[8]) {
  row8 v;
  __builtin_memcpy(&v, r, sizeof v);
  return v;
}
__MT_INLINE row8 load_row(const half (&r)[8]) {
  typedef half half8v __attribute__((ext_vector_type(8)));
  half8v h;
  __builtin_memcpy(&h, r, sizeof h);
  return __builtin_convertvector(h, row8);
}
template <class T> __MT_INLINE row8 load_row(const T (&r)[8]) {
  row8 v;
  for (int j = 0; j < 8; ++j) v[j] = float(r[j]);
  return v;
}
__MT_INLINE void store_row(float (&r)[8], row8 v) { __builtin_memcpy(r, &v, sizeof v); }
__MT_INLINE void store_row(half (&r)[8], row8 v) {
  typedef half half8v __attribute__((ext_vector_type(8)));
  half8v h = __builtin_convertvector(v, half8v);
  __builtin_memcpy(r, &h, sizeof h);
}
template <class T> __MT_INLINE void store_row(T (&r)[8], row8 v) {
  for (int j = 0; j < 8; ++j) r[j] = T(v[j]);
}

__MT_INLINE ulong matrix_offset(const matrix_access& a, int r, int c) {
  return a.transpose ? (a.origin_y + c) * a.elements_per_row + a.origin_x + r
                     : (a.origin_y + r) * a.elements_per_row + a.origin_x + c;
}

}  // namespace __mt

namespace __mt {

// A partial tile made whole: every lane deposits its pair (thread_elements()) and writes
// the others' pairs into its copy at their lanes' places; then every lane holds the same
// tile, tagged with the meeting as a uniform load is. A lane not taking part leaves its
// pair as this lane's copy has it (MSL leaves an inactive lane's elements undefined).
template <class T, int Cols, int Rows>
__MT_UNCHECKED void gather(__mt_site at, simdgroup_matrix<T, Cols, Rows>& m) {
  typedef vec<T, 2> pair;
  const pair mine = m.thread_elements();
  __mt_simd_table t = __mt_simd_meet(&mine, sizeof mine, __MT_SIMD_MATRIX_GATHER, at,
                                     __MT_CALL_SITE);
  for (uint32_t l = 0; l < t.width; ++l) {
    if (!(t.active >> l & 1)) continue;
    const uint32_t q = l / 4, row = (q & 4) + (l / 2) % 4, col = (q & 2) * 2 + (l % 2) * 2;
    __builtin_memcpy(&m.e[row][col], t.slots + l * __MT_SIMD_SLOT, sizeof(pair));
  }
  m.__partial = false;
  m.__tag = t.active == (t.width >= 32 ? ~0u : (1u << t.width) - 1) ? kTagLoad | t.meet_id : 0;
}

// `m` whole: itself, or a gathered copy of a partial tile.
template <class T, int Cols, int Rows>
__MT_INLINE const simdgroup_matrix<T, Cols, Rows>& whole(
    __mt_site at, const simdgroup_matrix<T, Cols, Rows>& m,
    simdgroup_matrix<T, Cols, Rows>& scratch) {
  if (!m.__partial) return m;
  scratch = m;
  gather(at, scratch);
  return scratch;
}

}  // namespace __mt

template <class T, int Cols, int Rows>
__MT_INLINE void simdgroup_load(__mt_site at, simdgroup_matrix<T, Cols, Rows>& d,
                                const __mt::identity_t<T>* src,
                                ulong elements_per_row = Cols, ulong2 matrix_origin = 0,
                                bool transpose_matrix = false) {
  static_assert(sizeof d.e <= sizeof(__mt_simd_shared::bytes), "simdgroup_load: tile too large");
  __mt::matrix_access a{src, elements_per_row, matrix_origin.x, matrix_origin.y, transpose_matrix};
  // Set by the call: no pattern fill first (-ftrivial-auto-var-init, an instrumented memset
  // per lane per load).
  __mt::matrix_meeting m __attribute__((uninitialized)) =
      __mt::matrix_meet(at, a, __MT_SIMD_MATRIX_LOAD, &d.e[0][0], sizeof d.e);
  d.__tag = m.tag;
  d.__partial = false;
  if (m.copied) return;
  if (m.records && __mt::matrix_load(&d.e[0][0], src, sizeof(T), a)) {
    if (m.share) __mt::share_tile(m, &d.e[0][0], sizeof d.e);
    return;
  }
  if (!m.records) __mt_hooks_suppress(1);
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) {   // each element read by its lane, as a store writes it
      void* recording = m.records && Rows == 8 && Cols == 8
                            ? __mt_matrix_attribute(__mt::matrix_lane(r, c)) : nullptr;
      d.e[r][c] = src[__mt::matrix_offset(a, r, c)];
      __mt_matrix_attribute_end(recording);
    }
  if (!m.records) __mt_hooks_suppress(0);
  if (m.share) __mt::share_tile(m, &d.e[0][0], sizeof d.e);
}

template <class T, int Cols, int Rows>
__MT_INLINE void simdgroup_store(__mt_site at, const simdgroup_matrix<T, Cols, Rows>& tile,
                                 __mt::identity_t<T>* dst,
                                 ulong elements_per_row = Cols, ulong2 matrix_origin = 0,
                                 bool transpose_matrix = false) {
  simdgroup_matrix<T, Cols, Rows> scratch __attribute__((uninitialized));
  const simdgroup_matrix<T, Cols, Rows>& m = __mt::whole(at, tile, scratch);
  __mt::matrix_access a{dst, elements_per_row, matrix_origin.x, matrix_origin.y, transpose_matrix};
  if (!__mt::matrix_meet(at, a, __MT_SIMD_MATRIX_STORE, nullptr, 0).records) return;
  // Element by element, instrumented: clang may merge the stores (a tile of one value,
  // stored contiguously, becomes one wide write), and the counters count what it emits.
  // Each element's write is attributed to the lane that holds it (matrix_lane): a lane
  // reading an element another lane of its simdgroup stored needs a barrier on the GPU.
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) {
      void* recording = Rows == 8 && Cols == 8 ? __mt_matrix_attribute(__mt::matrix_lane(r, c))
                                               : nullptr;
      dst[__mt::matrix_offset(a, r, c)] = m.e[r][c];
      __mt_matrix_attribute_end(recording);
    }
}

namespace __mt {

// d = a * b + c computed by this lane, and left in the memo when the operands are tagged.
// Out of line from simdgroup_multiply_accumulate, whose common path (a lane taking the
// product another lane made) then needs no room for the rows.
template <class TD, class TAB>
__attribute__((noinline, no_sanitize("thread"))) void multiply_accumulate(
    simdgroup_matrix<TD, 8, 8>& d, const simdgroup_matrix<TAB, 8, 8>& a,
    const simdgroup_matrix<TAB, 8, 8>& b, const simdgroup_matrix<TD, 8, 8>& c, bool tagged,
    ulong types) {
  const ulong ta = a.__tag, tb = b.__tag, tc = c.__tag;
  // d(i, :) = c(i, :) + sum over k in order of a(i, k) * b(k, :), in float: eight lanes of
  // a row at once, each element summed in the same order as one at a time (no contraction).
  // All rows are formed before d is written (d may be c, a or b).
  row8 brow[8] __attribute__((uninitialized)), acc[8] __attribute__((uninitialized));
#pragma unroll
  for (int k = 0; k < 8; ++k) brow[k] = load_row(b.e[k]);
  for (int i = 0; i < 8; ++i) {
    acc[i] = load_row(c.e[i]);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[i] = acc[i] + float(a.e[i][k]) * brow[k];
  }
  for (int i = 0; i < 8; ++i) store_row(d.e[i], acc[i]);
  d.__tag = 0;
  d.__partial = false;
  if (tagged) {
    __mt_memo_tile slot = __mt_matrix_memo_slot(ta, tb, tc, types);
    __builtin_memcpy(slot.tile, &d.e[0][0], sizeof d.e);
    d.__tag = slot.tag;
  }
}

}  // namespace __mt

namespace __mt {

// The partial operands of one multiply made whole in one meeting (MLX's steel MMA sets all
// three through thread_elements() before every multiply): each lane deposits its pairs of
// the three, and every partial one is rebuilt in its scratch, tagged (meeting, operand)
// with the top bits 00, a kind of its own (see kTagFill).
template <class TD, class TAB>
__MT_UNCHECKED void gather_operands(__mt_site at, const simdgroup_matrix<TAB, 8, 8>*& a,
                                    const simdgroup_matrix<TAB, 8, 8>*& b,
                                    const simdgroup_matrix<TD, 8, 8>*& c,
                                    simdgroup_matrix<TAB, 8, 8>& sa,
                                    simdgroup_matrix<TAB, 8, 8>& sb,
                                    simdgroup_matrix<TD, 8, 8>& sc) {
  struct pairs { vec<TAB, 2> a, b; vec<TD, 2> c; } mine{a->thread_elements(),
                                                         b->thread_elements(),
                                                         c->thread_elements()};
  __mt_simd_table t = __mt_simd_meet(&mine, sizeof mine, __MT_SIMD_MATRIX_GATHER, at,
                                     __MT_CALL_SITE);
  const bool all = t.active == (t.width >= 32 ? ~0u : (1u << t.width) - 1);
  const bool pa = a->__partial, pb = b->__partial, pc = c->__partial;
  if (pa) sa = *a;
  if (pb) sb = *b;
  if (pc) sc = *c;
  for (uint32_t l = 0; l < t.width; ++l) {
    if (!(t.active >> l & 1)) continue;
    const uint32_t q = l / 4, row = (q & 4) + (l / 2) % 4, col = (q & 2) * 2 + (l % 2) * 2;
    pairs theirs;
    __builtin_memcpy(&theirs, t.slots + l * __MT_SIMD_SLOT, sizeof theirs);
    if (pa) __builtin_memcpy(&sa.e[row][col], &theirs.a, sizeof theirs.a);
    if (pb) __builtin_memcpy(&sb.e[row][col], &theirs.b, sizeof theirs.b);
    if (pc) __builtin_memcpy(&sc.e[row][col], &theirs.c, sizeof theirs.c);
  }
  if (pa) { sa.__partial = false; sa.__tag = all ? t.meet_id << 2 | 1 : 0; a = &sa; }
  if (pb) { sb.__partial = false; sb.__tag = all ? t.meet_id << 2 | 2 : 0; b = &sb; }
  if (pc) { sc.__partial = false; sc.__tag = all ? t.meet_id << 2 | 3 : 0; c = &sc; }
}

}  // namespace __mt

template <class TD, class TAB>
__MT_UNCHECKED void simdgroup_multiply_accumulate(__mt_site at, simdgroup_matrix<TD, 8, 8>& d,
                                                  const simdgroup_matrix<TAB, 8, 8>& a_in,
                                                  const simdgroup_matrix<TAB, 8, 8>& b_in,
                                                  const simdgroup_matrix<TD, 8, 8>& c_in) {
  simdgroup_matrix<TAB, 8, 8> sa __attribute__((uninitialized)), sb __attribute__((uninitialized));
  simdgroup_matrix<TD, 8, 8> sc __attribute__((uninitialized));
  const simdgroup_matrix<TAB, 8, 8>* pa = &a_in;
  const simdgroup_matrix<TAB, 8, 8>* pb = &b_in;
  const simdgroup_matrix<TD, 8, 8>* pc = &c_in;
  if (a_in.__partial || b_in.__partial || c_in.__partial)
    __mt::gather_operands(at, pa, pb, pc, sa, sb, sc);
  const simdgroup_matrix<TAB, 8, 8>& a = *pa;
  const simdgroup_matrix<TAB, 8, 8>& b = *pb;
  const simdgroup_matrix<TD, 8, 8>& c = *pc;
  const ulong ta = a.__tag, tb = b.__tag, tc = c.__tag;
  const ulong types = (__mt::type_code<TD>() << 8) | __mt::type_code<TAB>();
  const bool tagged = ta && tb && tc;
  if (tagged) {
    __mt_memo_tile found = __mt_matrix_memo_find(ta, tb, tc, types);
    if (found.tile) {
      __builtin_memcpy(&d.e[0][0], found.tile, sizeof d.e);
      d.__tag = found.tag;
      d.__partial = false;
      return;
    }
  }
  __mt::multiply_accumulate(d, a, b, c, tagged, types);
}

template <class TD, class TAB>
__MT_INLINE void simdgroup_multiply(__mt_site at, simdgroup_matrix<TD, 8, 8>& d,
                                    const simdgroup_matrix<TAB, 8, 8>& a,
                                    const simdgroup_matrix<TAB, 8, 8>& b) {
  simdgroup_multiply_accumulate(at, d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)));
}

}  // namespace metal

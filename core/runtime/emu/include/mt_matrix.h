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
// Emulator model: which lane holds which element is unspecified by Metal (thread_elements()
// is not supported here), so every lane keeps the whole 8x8 tile. Load and store are
// collectives: the lanes meet, check that pointer, stride, origin and transpose agree, and
// one lane (the lowest active) performs the recorded memory accesses for the simdgroup;
// the other lanes read the same tile without recording, and do not store.
#pragma once
#include "mt_runtime.h"
#include "mt_sync.h"

namespace metal {

template <class T, int Cols, int Rows>
struct simdgroup_matrix {
  static_assert(MT_MATRIX_TILE == 8, "core/target.py: matrix_tile is not MSL's 8x8");
  static_assert(Cols == 8 && Rows == 8, "simdgroup_matrix: only 8x8 matrices exist in MSL");
  T e[Rows][Cols];
  simdgroup_matrix() = default;
  explicit simdgroup_matrix(T diagonal) {
    for (int r = 0; r < Rows; ++r)
      for (int c = 0; c < Cols; ++c) e[r][c] = r == c ? diagonal : T(0);
  }
  template <class U = T>
  void thread_elements() const {
    static_assert(sizeof(U) == 0,
                  "simdgroup_matrix::thread_elements(): the per-lane element layout is "
                  "undocumented; the emulator does not support it");
  }
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int Cols, int Rows>
__MT_INLINE simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, Cols, Rows> m;
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) m.e[r][c] = value;
  return m;
}

namespace __mt {

struct matrix_access {
  const void* ptr;
  ulong elements_per_row;
  ulong origin_x, origin_y;
  bool transpose;
};

// Meets the simdgroup, checks the uniform arguments; returns true in the lane that records.
__MT_INLINE bool matrix_meet(__mt_site at, const matrix_access& a, unsigned kind) {
  __mt_simd_table t = __mt_simd_meet(&a, sizeof(a), kind, at);
  unsigned first = unsigned(__builtin_ctz(t.active));
  matrix_access lead;
  __builtin_memcpy(&lead, t.slots + first * __MT_SIMD_SLOT, sizeof(lead));
  if (lead.ptr != a.ptr || lead.elements_per_row != a.elements_per_row ||
      lead.origin_x != a.origin_x || lead.origin_y != a.origin_y || lead.transpose != a.transpose)
    __mt_simd_nonuniform(kind, "pointer, elements_per_row, matrix_origin and transpose_matrix");
  return t.lane == first;
}

__MT_INLINE ulong matrix_offset(const matrix_access& a, int r, int c) {
  return a.transpose ? (a.origin_y + c) * a.elements_per_row + a.origin_x + r
                     : (a.origin_y + r) * a.elements_per_row + a.origin_x + c;
}

}  // namespace __mt

template <class T, int Cols, int Rows>
__MT_INLINE void simdgroup_load(__mt_site at, simdgroup_matrix<T, Cols, Rows>& d, const T* src,
                                ulong elements_per_row = Cols, ulong2 matrix_origin = 0,
                                bool transpose_matrix = false) {
  __mt::matrix_access a{src, elements_per_row, matrix_origin.x, matrix_origin.y, transpose_matrix};
  bool records = __mt::matrix_meet(at, a, __MT_SIMD_MATRIX_LOAD);
  if (!records) __mt_hooks_suppress(1);
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) d.e[r][c] = src[__mt::matrix_offset(a, r, c)];
  if (!records) __mt_hooks_suppress(0);
}

template <class T, int Cols, int Rows>
__MT_INLINE void simdgroup_store(__mt_site at, const simdgroup_matrix<T, Cols, Rows>& m, T* dst,
                                 ulong elements_per_row = Cols, ulong2 matrix_origin = 0,
                                 bool transpose_matrix = false) {
  __mt::matrix_access a{dst, elements_per_row, matrix_origin.x, matrix_origin.y, transpose_matrix};
  if (!__mt::matrix_meet(at, a, __MT_SIMD_MATRIX_STORE)) return;
  for (int r = 0; r < Rows; ++r)
    for (int c = 0; c < Cols; ++c) dst[__mt::matrix_offset(a, r, c)] = m.e[r][c];
}

template <class TD, class TAB>
__MT_INLINE void simdgroup_multiply_accumulate(simdgroup_matrix<TD, 8, 8>& d,
                                               const simdgroup_matrix<TAB, 8, 8>& a,
                                               const simdgroup_matrix<TAB, 8, 8>& b,
                                               const simdgroup_matrix<TD, 8, 8>& c) {
  simdgroup_matrix<TD, 8, 8> out;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      float acc = float(c.e[i][j]);
      for (int k = 0; k < 8; ++k) acc += float(a.e[i][k]) * float(b.e[k][j]);
      out.e[i][j] = TD(acc);
    }
  d = out;
}

template <class TD, class TAB>
__MT_INLINE void simdgroup_multiply(simdgroup_matrix<TD, 8, 8>& d,
                                    const simdgroup_matrix<TAB, 8, 8>& a,
                                    const simdgroup_matrix<TAB, 8, 8>& b) {
  simdgroup_multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<TD, 8, 8>(TD(0)));
}

}  // namespace metal

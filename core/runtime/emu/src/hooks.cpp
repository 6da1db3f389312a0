// hooks.cpp: the entry points that instrumented kernel code calls on every memory access.
//
// Checked builds compile the kernel with clang's thread-sanitizer instrumentation and no
// sanitizer runtime: __tsan_readN/__tsan_writeN (and the memcpy/memset forms) are defined
// here and hand device and threadgroup addresses to the checker (checker.cpp). MSL's
// address spaces are one flat space on the CPU, so the address range tells them apart;
// thread-private memory (the fiber's own stack) is not checked. __mt_atomic_access is the
// hook of MSL's atomic_* functions (mt_atomic.h); __mt_hooks_suppress stops recording the
// accesses of a lane whose part of a simdgroup matrix load another lane records
// (mt_matrix.h: the operation belongs to the whole simdgroup).

#include "runtime.h"

namespace mt {

__attribute__((always_inline)) inline void on_access(uintptr_t a, unsigned n, bool write, uintptr_t pc) {
  Worker* w = t_worker;
  if (!w || !w->current || w->current->suppress) return;
  if (a - g_launch.dev_lo < g_launch.dev_span)
    device_access(w, a, n, write, pc);
  else if (a - w->arena_lo < w->arena_span)
    tg_access(w, a, n, write, pc);
}

// The lane holding element (r, c) of an 8x8 simdgroup matrix (include/mt_matrix.h's
// __mt::matrix_lane: lane l holds row (q & 4) + (l / 2) % 4, columns (q & 2) * 2 + (l % 2) * 2
// and the next, q = l / 4).
constexpr unsigned matrix_lane(unsigned r, unsigned c) {
  return ((c >> 1) & 1) | ((r & 1) << 1) | (((r >> 1) & 1) << 2) | (((c >> 2) & 1) << 3) |
         (((r >> 2) & 1) << 4);
}

// One element of a matrix tile (2 or 4 bytes in MSL; any size works).
inline void copy_element(unsigned char* to, const unsigned char* from, unsigned n) {
  switch (n) {
    case 2: std::memcpy(to, from, 2); break;
    case 4: std::memcpy(to, from, 4); break;
    default: std::memcpy(to, from, n);
  }
}

}  // namespace mt

using namespace mt;

extern "C" {

void __mt_hooks_suppress(int on) {
  Worker* w = t_worker;
  if (w && w->current) w->current->suppress = on != 0;
}

void* __mt_matrix_attribute(unsigned lane) {
  Worker* w = t_worker;
  if (!w || !w->current) return nullptr;
  Fiber* cur = w->current;
  if (cur->suppress || lane == cur->lane) return nullptr;
  const uint32_t t = cur->tid - cur->lane + lane;
  if (t >= w->threads) return nullptr;
  Fiber* owner = &w->fibers[t];
  // A lane that already left the kernel still owns its elements: under a schedule that runs
  // the higher lanes first, they finish before the recording lane makes a last store.
  if (owner->simdgroup != cur->simdgroup) return nullptr;
  w->current = owner;
  return cur;
}

void __mt_matrix_attribute_end(void* recording) {
  if (recording) t_worker->current = static_cast<Fiber*>(recording);
}

void __mt_atomic_access(const void* p, unsigned size, int kind) {
  Worker* w = t_worker;
  if (!w || !w->current) return;
  ++w->atomics;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uintptr_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (a - g_launch.dev_lo < g_launch.dev_span)
    device_atomic(w, a, size, kind, pc);
  else if (a - w->arena_lo < w->arena_span)
    tg_atomic(w, a, size, kind, pc);
}

// A simdgroup matrix load by its recording lane (mt_matrix.h): the 8x8 tile is copied from
// `p`, element (r, c) at the MSL offset, into `tile` (row-major, thread memory), and each
// element's read is recorded as the instrumented per-element loop's hook call would record
// it, in the same order (rows in order, a row's elements in order), with this call's return
// address in the kernel as the pc. A non-transposed row is contiguous: its threadgroup
// reads go to tg_access_run. Returns 0 having done nothing when the tile does not lie
// wholly in device or wholly in threadgroup memory, or when its offsets are too large to be
// sure they grow with r and c (the caller runs the instrumented loop, whose hooks ignore
// private memory and whose fault, if any, points at the kernel).
int __mt_matrix_load(void* tile, const void* p, unsigned elem, uint64_t elements_per_row,
                     uint64_t origin_x, uint64_t origin_y, uint64_t transpose) {
  constexpr unsigned kTile = MT_MATRIX_TILE;
  Worker* w = t_worker;
  if (!w || !w->current || w->current->suppress) return 0;
  // Below 2^28 each, no offset wraps: the first element is the lowest, the last the highest.
  if ((elements_per_row | origin_x | origin_y) >> 28 || elem > 16) return 0;
  const uint64_t row_step = transpose ? elem : elements_per_row * elem;  // next r
  const uint64_t col_step = transpose ? elements_per_row * elem : elem;  // next c
  const uintptr_t first = reinterpret_cast<uintptr_t>(p) + (origin_y * elements_per_row + origin_x) * elem;
  const uintptr_t end = first + (kTile - 1) * (row_step + col_step) + elem;
  auto inside = [&](uintptr_t lo, uintptr_t span) { return first - lo < span && end - lo <= span; };
  const bool device = inside(g_launch.dev_lo, g_launch.dev_span);
  if (!device && !inside(w->arena_lo, w->arena_span)) return 0;
  const uintptr_t pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  unsigned char* t = static_cast<unsigned char*>(tile);
  for (unsigned r = 0; r < kTile; ++r) {
    const uintptr_t row = first + r * row_step;
    // Each element is read by the lane that holds it on the GPU (matrix_lane, mt_matrix.h),
    // as the recording lane's store writes it: lanes 2 apart share a row's pairs
    for (unsigned c = 0; c < kTile; c += 2) {
      void* recording = __mt_matrix_attribute(matrix_lane(r, c));
      for (unsigned k = c; k < c + 2; ++k) {
        if (device) device_access(w, row + k * col_step, elem, false, pc);
        else tg_access(w, row + k * col_step, elem, false, pc);
      }
      __mt_matrix_attribute_end(recording);
    }
    unsigned char* mine = t + r * kTile * elem;
    const unsigned char* theirs = reinterpret_cast<const unsigned char*>(row);
    if (!transpose) {
      std::memcpy(mine, theirs, kTile * elem);
    } else {
      for (unsigned c = 0; c < kTile; ++c) copy_element(mine + c * elem, theirs + c * col_step, elem);
    }
  }
  return 1;
}

// Thread-sanitizer instrumentation entry points (clang -fsanitize=thread without its
// runtime). Every load/store of kernel code lands here with its size.
#define MT_PC reinterpret_cast<uintptr_t>(__builtin_return_address(0))
#define MT_HOOKS(N)                                                                             \
  void __tsan_read##N(void* a) { on_access(reinterpret_cast<uintptr_t>(a), N, false, MT_PC); }  \
  void __tsan_write##N(void* a) { on_access(reinterpret_cast<uintptr_t>(a), N, true, MT_PC); }  \
  void __tsan_unaligned_read##N(void* a) { on_access(reinterpret_cast<uintptr_t>(a), N, false, MT_PC); } \
  void __tsan_unaligned_write##N(void* a) { on_access(reinterpret_cast<uintptr_t>(a), N, true, MT_PC); } \
  void __tsan_volatile_read##N(void* a) { on_access(reinterpret_cast<uintptr_t>(a), N, false, MT_PC); } \
  void __tsan_volatile_write##N(void* a) { on_access(reinterpret_cast<uintptr_t>(a), N, true, MT_PC); } \
  void __tsan_unaligned_volatile_read##N(void* a) { on_access(reinterpret_cast<uintptr_t>(a), N, false, MT_PC); } \
  void __tsan_unaligned_volatile_write##N(void* a) { on_access(reinterpret_cast<uintptr_t>(a), N, true, MT_PC); }
MT_HOOKS(1)
MT_HOOKS(2)
MT_HOOKS(4)
MT_HOOKS(8)
MT_HOOKS(16)
#undef MT_HOOKS

void __tsan_read_range(void* a, unsigned long n) {
  on_access(reinterpret_cast<uintptr_t>(a), unsigned(n), false, MT_PC);
}
void __tsan_write_range(void* a, unsigned long n) {
  on_access(reinterpret_cast<uintptr_t>(a), unsigned(n), true, MT_PC);
}
void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
  on_access(reinterpret_cast<uintptr_t>(s), unsigned(n), false, MT_PC);
  on_access(reinterpret_cast<uintptr_t>(d), unsigned(n), true, MT_PC);
  return memcpy(d, s, n);
}
void* __tsan_memmove(void* d, const void* s, unsigned long n) {
  on_access(reinterpret_cast<uintptr_t>(s), unsigned(n), false, MT_PC);
  on_access(reinterpret_cast<uintptr_t>(d), unsigned(n), true, MT_PC);
  return memmove(d, s, n);
}
void* __tsan_memset(void* d, int c, unsigned long n) {
  on_access(reinterpret_cast<uintptr_t>(d), unsigned(n), true, MT_PC);
  return memset(d, c, n);
}
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_read(void**) {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_ignore_thread_begin() {}
void __tsan_ignore_thread_end() {}
#undef MT_PC

}  // extern "C"

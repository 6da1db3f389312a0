// mt_runtime.h — the ABI between emulated kernel code and the emulator runtime.
//
// Kernel code (the user's MSL, rewritten and compiled as C++) never touches scheduler
// state directly: it calls these C entry points, which live in src/ (scheduler.cpp,
// hooks.cpp, ...), translation units compiled WITHOUT race instrumentation. Each emulated
// Metal thread is a fiber; every function here that is a "meeting point" (barriers, simd
// collectives) switches back to the group's scheduler until the participating threads
// have arrived.
#pragma once
#include <cstdint>

extern "C" {

// Positions of the running thread, filled by the runtime before the kernel starts
// (Metal's thread-position attributes; names follow the attribute names).
struct __mt_thread_pos {
  uint32_t thread_position_in_grid[3];
  uint32_t thread_position_in_threadgroup[3];
  uint32_t threadgroup_position_in_grid[3];
  uint32_t threads_per_threadgroup[3];
  uint32_t threadgroups_per_grid[3];
  uint32_t threads_per_grid[3];
  uint32_t thread_index_in_threadgroup;
  uint32_t thread_index_in_simdgroup;
  uint32_t simdgroup_index_in_threadgroup;
  uint32_t simdgroups_per_threadgroup;
  uint32_t threads_per_simdgroup;
};

// mem_flags bits, as MSL's mem_flags enumerators.
enum : unsigned { __MT_MEM_NONE = 0, __MT_MEM_DEVICE = 1, __MT_MEM_THREADGROUP = 2, __MT_MEM_TEXTURE = 4 };

// Meeting points are told their call site (mt_sites.h passes it): `id` numbers the call's
// text in the source, `line` is its MSL line for messages. Threads meet at "the same"
// barrier or collective when their ids agree, however the optimizer duplicated the code.
struct __mt_site { unsigned line, id; };

// Barriers: every thread of the threadgroup (resp. simdgroup) must reach the same one.
void __mt_threadgroup_barrier(unsigned flags, __mt_site site);
void __mt_simdgroup_barrier(unsigned flags, __mt_site site);

// Simd collective kinds (reported in divergence findings and stats).
enum : unsigned {
  __MT_SIMD_SHUFFLE = 1, __MT_SIMD_REDUCE = 2, __MT_SIMD_SCAN = 3, __MT_SIMD_VOTE = 4,
  __MT_SIMD_MATRIX_LOAD = 5, __MT_SIMD_MATRIX_STORE = 6, __MT_SIMD_BROADCAST = 7,
  // not a collective of MSL's: the lanes of a simdgroup matrix whose elements they set one
  // by one (thread_elements()) pool them before an operation reads the tile (mt_matrix.h);
  // on a GPU they are already in the lanes' registers, so it counts as no simd operation
  __MT_SIMD_MATRIX_GATHER = 8,
};

// Scratch shared by the lanes of one simdgroup from one meeting to its next (mt_matrix.h
// passes a loaded tile through it): `meet_id` says which meeting's data `bytes` hold.
struct __mt_simd_shared {
  uint64_t meet_id;
  alignas(16) unsigned char bytes[256];
};

// Result of a simd collective: every participating lane's deposited bytes.
struct __mt_simd_table {
  const unsigned char* slots;  // lane i's bytes at slots + i * __MT_SIMD_SLOT
  uint32_t active;             // bit i set: lane i took part
  uint32_t lane;               // the calling lane
  uint32_t width;              // lanes in this simdgroup (the last one may be partial)
  uint32_t uniform;            // 1: every taking part deposited the same bytes
  uint64_t meet_id;            // names this meeting: unique within the run's worker thread
  __mt_simd_shared* shared;    // the simdgroup's scratch until its next meeting
};
enum : unsigned { __MT_SIMD_SLOT = 64 };

// Deposit `nbytes` (<= __MT_SIMD_SLOT) and wait until every lane of the simdgroup that
// has not exited is waiting at a collective; lanes waiting at the same call site take
// part. The table stays valid until the calling lane's next meeting point. `pc` is the
// kernel's call site, for findings (the shim's collectives are calls of their own from the
// kernel, and pass their return address: __MT_CALL_SITE in mt_sync.h).
__mt_simd_table __mt_simd_meet(const void* mine, unsigned nbytes, unsigned kind, __mt_site site,
                               const void* pc);

// A simd operation read a lane that did not take part (undefined in MSL); `pc` as above.
void __mt_simd_inactive_lane(unsigned kind, unsigned src_lane, const void* pc);
// Lanes of one collective disagreed on an argument that MSL requires to be uniform; `pc`
// is the kernel's call site.
void __mt_simd_nonuniform(unsigned kind, const char* what, const void* pc);

// The running thread's positions (what its thread-position attributes would receive), for
// builtins that read them without a parameter (mt_builtins.h).
const __mt_thread_pos* __mt_current_position(void);

// Storage of the `threadgroup` variable number `slot`, shared by the group's threads.
void* __mt_tg_slot(unsigned slot, unsigned size, unsigned align);

// Simdgroup-matrix value sharing (mt_matrix.h). Every lane holds the whole 8x8 tile, so the
// lanes of a simdgroup compute the same tiles; a per-worker memo keyed by the tiles' value
// tags lets the first lane compute a tile and the others copy it (one operation per
// simdgroup instead of one per lane). find: the tile stored under the key (null if none);
// slot: where to store the tile (up to 256 bytes) for the key. Both give the tag naming the
// value the key describes (a 62-bit hash of the key under the multiply tag bits). The key
// goes by value and the caller copies the tile, so that no pointer to the kernel's own
// tiles escapes (an escaping local would have every access to it instrumented).
struct __mt_memo_tile { void* tile; uint64_t tag; };
__mt_memo_tile __mt_matrix_memo_find(uint64_t k0, uint64_t k1, uint64_t k2, uint64_t k3);
__mt_memo_tile __mt_matrix_memo_slot(uint64_t k0, uint64_t k1, uint64_t k2, uint64_t k3);

// While set, memory accesses of the calling thread are not recorded (used so that only
// one lane records a simdgroup-wide matrix access).
void __mt_hooks_suppress(int on);

// The lane recording a simdgroup matrix store writes element by element; each element's
// write is the lane's that holds it on the GPU (mt_matrix.h, matrix_lane): between these
// two calls the checker sees the calling thread as lane `lane` of its simdgroup (where
// that lane runs; else as itself). Returns what the second call restores.
void* __mt_matrix_attribute(unsigned lane);
void __mt_matrix_attribute_end(void* recording);

// A simdgroup matrix load made by the lane that records it, in checked builds: copies the
// 8x8 tile of `elem`-byte elements (element (r, c) at MSL's offset for elements_per_row,
// origin and transpose) into `tile`, row-major, and records each element's read as a hook
// call per element would. 0: nothing done, the tile is not wholly in device or wholly in
// threadgroup memory; the caller copies element by element instead.
int __mt_matrix_load(void* tile, const void* p, unsigned elem, uint64_t elements_per_row,
                     uint64_t origin_x, uint64_t origin_y, uint64_t transpose);

// An atomic access (kind 0 load, 1 read-modify-write, 2 store): counted, bounds-checked,
// never a race with another atomic, a race with a plain access to the same bytes.
void __mt_atomic_access(const void* p, unsigned size, int kind);

// One entry per `kernel` function of the library, generated by the launcher (launcher.py).
struct __mt_param_desc {
  const char* name;
  int32_t buffer_index;   // [[buffer(i)]], or -1 for a thread-position parameter
  uint32_t min_bytes;     // bytes the bound buffer must hold (sizeof the referenced type)
};
struct __mt_kernel_desc {
  const char* name;
  void (*entry)(void* const* buffers, const __mt_thread_pos* pos);
  uint32_t nparams;
  const __mt_param_desc* params;
};
// Exported by name (kernels are compiled with hidden visibility): the launch host finds a
// kernel library's table with dlsym (src/entry/host.cpp).
extern __attribute__((visibility("default"))) const __mt_kernel_desc __mt_kernels[];
extern __attribute__((visibility("default"))) const uint32_t __mt_kernel_count;

}  // extern "C"

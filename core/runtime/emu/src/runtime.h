// runtime.h: the state the files of the emulator runtime share.
//
// One launch (Launch, g_launch: the job, the kernel, buffers and the device shadow), one
// worker per OS thread (Worker: the fibers of its current threadgroup, their arena and
// shadow, its findings and counters), and the functions one file of src/ calls in another.
// Every file is compiled without instrumentation (build.py) and linked into the launch
// host and each kernel executable (launch.cpp).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "../include/mt_runtime.h"

#include "../include/mt_runtime.h"
#include "../include/mt_target.h"
#include "job.h"

namespace mt {

constexpr uint32_t kSimdWidth = MT_SIMD_WIDTH;                      // core/target.py
constexpr uint32_t kMaxThreadgroupMemory = MT_THREADGROUP_MEMORY_BYTES;
constexpr uint32_t kMaxThreadsPerGroup = MT_MAX_THREADS_PER_GROUP;
constexpr uint32_t kRedZone = 64;  // bytes between threadgroup variables
constexpr uint32_t kMaxSlots = 4096;  // threadgroup variables per kernel
constexpr uint32_t kSimdKinds = __MT_SIMD_BROADCAST + 1;  // simd collective kinds, 0 unused
// Matrix memo: kMemoWays-way sets, kMemoSetsPerSimdgroup per simdgroup (room for 256 live
// tiles each, which the accumulators of a 128x128 tile per simdgroup would fill), tiles of
// at most kMemoTileBytes.
constexpr uint32_t kMemoSetsPerSimdgroup = 64, kMemoWays = 4, kMemoTileBytes = 256;
// Product log: products one lane makes between two meeting points that the other lanes of
// its simdgroup take in order (a GEMM's inner step makes 16 per simdgroup).
constexpr uint32_t kProductLogEntries = 256;

// ---------------------------------------------------------------------------------------
// Findings

enum FindingKind { kRace, kUninit, kBounds, kDivergence };
const char* const kKindNames[] = {"race", "uninit", "bounds", "divergence"};

struct Finding {
  FindingKind kind;
  uint64_t group;            // linear threadgroup index
  uint32_t thread;           // linear index in the threadgroup
  int32_t other_thread;      // the other party of a race, -1 if unknown
  int64_t other_group;       // for cross-threadgroup races, else -1
  bool device;               // address space: device (true) or threadgroup
  int32_t buffer;            // buffer index, or threadgroup variable slot
  uint64_t offset;           // byte offset in that buffer / variable
  uintptr_t pc, other_pc;
  std::string detail;
  uint64_t count = 1;
};

// ---------------------------------------------------------------------------------------
// One 8-byte granule of a device buffer in the race checker's shadow (checker.cpp).
struct DevGranule {
  std::atomic<uint64_t> writer{0}, reader{0};
};

// Global launch state (read-only while workers run, except the atomics)

struct Launch {
  const JobHeader* job = nullptr;
  const __mt_kernel_desc* kernel = nullptr;
  unsigned char* map = nullptr;
  size_t map_size = 0;
  uintptr_t dev_lo = 0, dev_span = 0;  // every buffer and red zone of the job mapping
  uint32_t threads = 0, simdgroups = 0;
  uint64_t groups = 0;
  void* buffers[kMaxBuffers] = {};
  // Device shadow (races; checker.cpp, granules): per 8-byte granule a state byte (lock,
  // split, read-shared bits) and one writer and reader word (encode_dev()) for all its bytes;
  // per byte, writer and reader words used once the granule is split.
  std::atomic<uint8_t>* dev_state[kMaxBuffers] = {};
  DevGranule* dev_granule[kMaxBuffers] = {};
  std::atomic<uint64_t>* dev_writer[kMaxBuffers] = {};
  std::atomic<uint64_t>* dev_reader[kMaxBuffers] = {};
  // Atomic accesses per byte: encode_atomic() words (who, when, whether an update).
  std::atomic<uint64_t>* dev_atomic[kMaxBuffers] = {};
  std::atomic<uint64_t> next_group{0};
  std::atomic<bool> any_device_atomic{false};  // plain accesses look at dev_atomic only then
  // Threadgroup variable layout, shared by all workers (decided on first request, under
  // slot_mutex). Fixed arrays, never reallocated: other workers read them without the lock
  // while a new variable is added (a growing vector here once gave false bounds findings).
  std::mutex slot_mutex;
  std::atomic<uint32_t> slot_offset[kMaxSlots];
  std::atomic<uint32_t> slot_size[kMaxSlots];
  std::atomic<uint32_t> slot_count{0};
  std::atomic<uint32_t> arena_bytes{0};
};
extern Launch g_launch;

// ---------------------------------------------------------------------------------------
// Per-worker state: fibers of the current threadgroup, its arena and shadow, findings.

enum FiberState : uint8_t { kReady, kAtBarrier, kAtSimd, kDone };

struct Fiber {
  void* sp = nullptr;
  FiberState state = kReady;
  bool suppress = false;
  uint32_t tid = 0, lane = 0, simdgroup = 0;
  __mt_site site{};     // the meeting point it waits at (mt_sites.h)
  unsigned kind = 0;    // simd kind or barrier flags
  uintptr_t pc = 0;     // return address of that call, for findings
  unsigned char deposit[__MT_SIMD_SLOT];
  uint32_t deposit_bytes = 0;  // how many of them this meeting deposited
  __mt_simd_table table{};
  __mt_thread_pos pos{};
  unsigned char* stack = nullptr;
  // Since the last meeting point it passed: which one (its id; 0 at the kernel's start) and
  // how many simdgroup matrix products it made (its place in the simdgroup's product log).
  uint64_t interval = 0;
  uint32_t products = 0;
};

// The simdgroup matrix products the first lane of a simdgroup made since a meeting point,
// in order (matrix_memo.cpp): the other lanes, running the same code from the same meeting,
// find their n-th product at entry n without hashing.
struct ProductLog {
  uint64_t interval = ~uint64_t(0);  // the meeting the entries follow; ~0: empty
  uint32_t count = 0;
  struct Entry {
    uint64_t key[4];
    uint64_t tag;
  } entry[kProductLogEntries];
};

struct TgShadow {
  uint32_t write_epoch, read_epoch;  // barrier interval + 1, 0 = never
  uint16_t writer, reader;
  uint16_t write_sepoch, read_sepoch;
  uint8_t initialized, many_readers;
  // Atomic accesses in the current interval: by whom (many: several threads), any update.
  uint32_t atomic_epoch;
  uint16_t atomic_thread;
  uint8_t atomic_many, atomic_update;
};

struct Worker {
  std::vector<Fiber> fibers;
  void* scheduler_sp = nullptr;
  Fiber* current = nullptr;
  std::vector<uint32_t> order;                 // this round's schedule
  uint32_t cursor = 0;                         // position of the running fiber in it
  uint64_t group = 0;
  uint32_t tg_epoch = 1, dev_epoch = 1;        // current barrier intervals
  std::vector<uint32_t> simd_epoch;            // per simdgroup
  std::vector<unsigned char> simd_slots;       // per simdgroup, kSimdWidth slots
  std::vector<__mt_simd_shared> simd_shared;   // per simdgroup
  // Threadgroup arena: variables at g_launch.slot_offset with red zones in between.
  unsigned char* arena = nullptr;
  uintptr_t arena_lo = 0, arena_span = 0;
  std::vector<int16_t> arena_owner;            // per byte: slot index or -1 (red zone)
  TgShadow* arena_shadow = nullptr;            // per byte; mapped zero pages (map_shadow)
  std::vector<void*> slot_ptr;
  // Results.
  std::vector<Finding> findings;
  uint64_t dropped_findings = 0;
  uint64_t dev_read[kMaxBuffers] = {}, dev_written[kMaxBuffers] = {};
  uint64_t tg_read = 0, tg_written = 0, barriers = 0, atomics = 0;
  // Simd collectives per kind (__MT_SIMD_SHUFFLE ... __MT_SIMD_BROADCAST, mt_runtime.h), one
  // per simdgroup per collective; index 0 (simdgroup_barrier) stays 0.
  uint64_t simd_ops[kSimdKinds] = {};
  // Access operations (one per hook call: a float4 load is one 16-byte read), in bounds
  // only. Fewer, wider accesses for the same bytes is what vectorization buys.
  uint64_t dev_loads = 0, dev_stores = 0, tg_loads = 0, tg_stores = 0;
  uint64_t groups_run = 0, threads_run = 0, simdgroups_run = 0;
  // The running threadgroup's threads and simdgroups: g_launch.threads and .simdgroups but
  // in a partial threadgroup of a non-uniform grid (JobHeader::grid_threads), which has
  // fewer (run_group).
  uint32_t threads = 0, simdgroups = 0;
  uint64_t rng = 0;
  // Unique-byte maps for the stats, one per worker (no atomic updates; merged at the end):
  // per device byte, bit 0 read, bit 1 written.
  uint8_t* touched[kMaxBuffers] = {};
  uint64_t meetings = 0;                       // names each simd meeting (meet_id)
  // Simdgroup-matrix memo (mt_matrix.h), allocated on first use: set-associative, keyed by
  // the tiles' tags; a way is replaced round-robin within its set.
  struct MemoSet {
    uint64_t key[kMemoWays][4];
    uint32_t next;
  };
  std::vector<MemoSet> memo;
  std::vector<unsigned char> memo_data;        // kMemoTileBytes per way
  std::vector<ProductLog> product_log;         // per simdgroup, allocated on first use
  std::vector<unsigned char> product_data;     // kMemoTileBytes per log entry
};

// The worker running on this OS thread. __thread rather than thread_local: it is defined
// in another file than most of its readers (the hooks read it on every access), and
// __thread has no dynamic initializer, so no wrapper call guards the read.
extern __thread Worker* t_worker;
extern std::vector<Worker*> g_workers;

// results.cpp
void add_finding(Worker* w, Finding f);
std::string format(const char* fmt, ...);
Finding make_finding(Worker* w, FindingKind kind, bool device, int32_t buffer, uint64_t offset,
                     uintptr_t pc, std::string detail);
void write_results();
void write_error(const char* status, const std::string& message);
[[noreturn]] void fail_launch(const char* fmt, ...);

// checker.cpp
void device_access(Worker* w, uintptr_t a, unsigned n, bool write, uintptr_t pc);
void tg_access(Worker* w, uintptr_t a, unsigned n, bool write, uintptr_t pc);
void tg_access_run(Worker* w, uintptr_t a, unsigned n, unsigned count, bool write, uintptr_t pc);
void device_atomic(Worker* w, uintptr_t a, unsigned n, int kind, uintptr_t pc);
void tg_atomic(Worker* w, uintptr_t a, unsigned n, int kind, uintptr_t pc);

// scheduler.cpp
void worker_main(Worker* w);
void prepare_stacks(uint32_t workers, uint32_t threads, uint64_t stack_bytes);

// crash.cpp
void install_crash_handlers();

// sandbox.cpp
extern int g_result_fd;                      // the launch's result file, opened first
extern bool g_loading_library;               // a launch loading its kernel library (entry/host.cpp)
void write_report(const char* text, size_t n);   // replaces the result file's content
void enter_sandbox();                        // before any kernel code runs

// launch.cpp
void* map_shadow(size_t bytes, bool touched_first_by_reads = false);
int run_launch(const char* library, const char* job_path, const char* kernel,
               const char* result_path);
int serve();

// The kernels a launch can run: the launcher's table (launcher.py) in the file that holds
// them, and where that file's code is mapped, so a report gives each pc as the symbolizer
// reads the file (`pc - bias`; 0 for a pc outside it: the runtime's, the C library's).
struct KernelLibrary {
  const __mt_kernel_desc* kernels = nullptr;
  uint32_t count = 0;
  uintptr_t bias = 0, lo = 0, hi = UINTPTR_MAX;
};
extern KernelLibrary g_library;
uintptr_t file_pc(uintptr_t pc);   // launch.cpp

// entry/host.cpp or entry/executable.cpp, whichever the program is built with: the kernels
// of `path` for a launch, before its job is read and the sandbox entered.
bool open_library(const char* path, KernelLibrary* library, std::string* error);

}  // namespace mt

// runtime.cpp — the emulator's runtime: job loading, threadgroup scheduling on fibers,
// meeting points, and the memory checker behind the race-instrumentation hooks.
//
// Built once per toolchain WITHOUT instrumentation and linked into every kernel binary.
// The binary is run by core/runtime/emu/run.py as `kernel.bin JOB KERNEL RESULT`:
//   JOB     a file (job.py writes it) holding the launch header and every buffer, mapped
//           shared so the caller sees the kernel's writes;
//   KERNEL  the kernel function to launch (the launcher's __mt_kernels table);
//   RESULT  where a JSON document with stats and findings (or the error) is written.
// Exit status: 0 ran (findings may exist), 3 launch error, 4 crash or out-of-bounds index
// into an array of known size (JSON says where).
//
// Execution model (docs/emulator.md): threads of a threadgroup are fibers on one
// OS thread; threadgroups are spread over worker OS threads. Between meeting points the
// order of fibers follows the schedule (forward, reverse, seeded random).
//
// Checker model, after Oclgrind and compute-sanitizer: clang's thread-sanitizer
// instrumentation calls __tsan_readN/__tsan_writeN before every load and store of kernel
// code; those hooks are defined here. For threadgroup memory every byte remembers its last
// writer and reader with the barrier interval they touched it in: two different threads in
// the same interval, one of them writing, is a race whatever the schedule. Device memory
// uses the same rule inside a threadgroup and reports any two threadgroups touching one byte
// with a write (nothing orders threadgroups within a dispatch). Threadgroup bytes start
// poisoned (0xFF: NaN for floats) and unwritten: reading one is an "uninit" finding.
// Accesses in the red zones around buffers and threadgroup variables are "bounds" findings.

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
#include "fiber.h"
#include "runtime.h"

namespace mt {

Launch g_launch;
__thread Worker* t_worker = nullptr;
// ---------------------------------------------------------------------------------------
// Scheduling

// Leaves fiber `f` for the next ready fiber of this round (in schedule order), or for the
// scheduler when the round is over. Switching fiber to fiber, rather than through the
// scheduler, halves the switches per meeting point and keeps the scheduler's stack cold.
void switch_from(Worker* w, Fiber* f) {
  const uint32_t T = g_launch.threads;
  while (++w->cursor < T) {
    Fiber& next = w->fibers[w->order[w->cursor]];
    if (next.state == kReady) {
      w->current = &next;
      mt_fiber_switch(&f->sp, next.sp);
      return;
    }
  }
  w->current = nullptr;
  mt_fiber_switch(&f->sp, w->scheduler_sp);
}

void fiber_main(void* arg) {
  Fiber* f = static_cast<Fiber*>(arg);
  Worker* w = t_worker;
  g_launch.kernel->entry(g_launch.buffers, &f->pos);
  f->state = kDone;
  switch_from(w, f);
  __builtin_trap();  // a finished fiber is never resumed
}

// Called on the fiber: park it until the meeting point releases it.
void park(Worker* w, FiberState state, __mt_site site, unsigned kind, uintptr_t pc) {
  Fiber* f = w->current;
  f->state = state;
  f->site = site;
  f->kind = kind;
  f->pc = pc;
  switch_from(w, f);
}

uint64_t next_random(uint64_t& s) {  // splitmix64: deterministic per (seed, group, round)
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void divergence(Worker* w, uint32_t tid, uintptr_t pc, std::string detail) {
  Fiber* saved = w->current;
  w->current = &w->fibers[tid];
  add_finding(w, make_finding(w, kDivergence, false, -1, 0, pc, std::move(detail)));
  w->current = saved;
}

// Completes one simd collective per simdgroup whose live lanes are all parked.
bool resolve_simd(Worker* w) {
  bool progressed = false;
  const uint32_t T = g_launch.threads;
  for (uint32_t sg = 0; sg < g_launch.simdgroups; ++sg) {
    uint32_t lo = sg * kSimdWidth, hi = std::min(T, lo + kSimdWidth);
    int first = -1;
    for (uint32_t i = lo; i < hi; ++i)
      if (w->fibers[i].state == kAtSimd) { first = int(i); break; }
    if (first < 0) continue;
    unsigned site = w->fibers[first].site.id;
    unsigned kind = w->fibers[first].kind;
    uint32_t active = 0, uniform = 1;
    unsigned char* slots = &w->simd_slots[size_t(sg) * kSimdWidth * __MT_SIMD_SLOT];
    for (uint32_t i = lo; i < hi; ++i) {
      Fiber& f = w->fibers[i];
      if (f.state == kAtSimd && f.site.id == site) {
        active |= 1u << (i - lo);
        // Lanes at one call site deposit values of one type: the same number of bytes.
        std::memcpy(slots + (i - lo) * __MT_SIMD_SLOT, f.deposit, f.deposit_bytes);
        if (uniform && (f.deposit_bytes != w->fibers[first].deposit_bytes ||
                        std::memcmp(f.deposit, w->fibers[first].deposit, f.deposit_bytes) != 0))
          uniform = 0;
      }
    }
    for (uint32_t i = lo; i < hi; ++i) {
      Fiber& f = w->fibers[i];
      if (f.state == kAtSimd && f.site.id == site) {
        f.table = __mt_simd_table{slots, active, i - lo, hi - lo, uniform, w->meetings + 1,
                                  &w->simd_shared[sg]};
        f.state = kReady;
      }
    }
    ++w->meetings;
    if (kind == 0) ++w->simd_epoch[sg];  // simdgroup_barrier
    else ++w->simd_ops;
    progressed = true;
  }
  return progressed;
}

void resolve_barrier(Worker* w) {
  const uint32_t T = g_launch.threads;
  int first = -1;
  uint32_t waiting = 0;
  unsigned flags = 0;
  for (uint32_t i = 0; i < T; ++i) {
    Fiber& f = w->fibers[i];
    if (f.state != kAtBarrier) continue;
    if (first < 0) first = int(i);
    ++waiting;
    flags |= f.kind;
  }
  if (first < 0) return;
  const __mt_site site = w->fibers[first].site;
  for (uint32_t i = 0; i < T; ++i) {
    Fiber& f = w->fibers[i];
    if (f.state == kAtBarrier && f.site.id != site.id) {
      divergence(w, i, f.pc,
                 format("threads of one threadgroup wait at different threadgroup_barrier calls "
                        "(thread %u at the one on MSL line %u, thread %d at the one on line %u)",
                        i, f.site.line, first, site.line));
      break;
    }
  }
  if (waiting < T)
    divergence(w, uint32_t(first), w->fibers[first].pc,
               format("threadgroup_barrier reached by %u of %u threads; the others have "
                      "returned without reaching it", waiting, T));
  if (flags & __MT_MEM_THREADGROUP) ++w->tg_epoch;
  if (flags & __MT_MEM_DEVICE) ++w->dev_epoch;
  ++w->barriers;
  for (uint32_t i = 0; i < T; ++i)
    if (w->fibers[i].state == kAtBarrier) w->fibers[i].state = kReady;
}

void reset_arena(Worker* w) {
  uint32_t used = g_launch.arena_bytes.load();
  if (!used) return;
  std::memset(w->arena, 0xFF, used);
  std::memset(w->arena_shadow.data(), 0, used * sizeof(TgShadow));
}

// Stacks are mapped at page multiples, so without an offset every fiber's hot top of
// stack would fall in the same L1 cache sets and evict the others' at every switch.
// Each stack is mapped kStackColors bytes larger, so the kernel keeps its stack_bytes.
constexpr size_t kStackColors = 4096;
inline size_t stack_color(uint32_t tid) { return size_t(tid % 61) * 64; }

void run_group(Worker* w, uint64_t g) {
  const JobHeader* job = g_launch.job;
  const uint32_t T = g_launch.threads;
  w->group = g;
  w->tg_epoch = w->dev_epoch = 1;
  std::fill(w->simd_epoch.begin(), w->simd_epoch.end(), 0);
  reset_arena(w);
  uint32_t gp[3] = {uint32_t(g % job->grid[0]), uint32_t(g / job->grid[0] % job->grid[1]),
                    uint32_t(g / (uint64_t(job->grid[0]) * job->grid[1]))};
  for (uint32_t i = 0; i < T; ++i) {
    Fiber& f = w->fibers[i];
    f.state = kReady;
    f.suppress = false;
    __mt_thread_pos& p = f.pos;
    uint32_t lp[3] = {i % job->threadgroup[0], i / job->threadgroup[0] % job->threadgroup[1],
                      i / (job->threadgroup[0] * job->threadgroup[1])};
    for (int d = 0; d < 3; ++d) {
      p.thread_position_in_threadgroup[d] = lp[d];
      p.threadgroup_position_in_grid[d] = gp[d];
      p.threads_per_threadgroup[d] = job->threadgroup[d];
      p.threadgroups_per_grid[d] = job->grid[d];
      p.threads_per_grid[d] = job->grid[d] * job->threadgroup[d];
      p.thread_position_in_grid[d] = gp[d] * job->threadgroup[d] + lp[d];
    }
    p.thread_index_in_threadgroup = i;
    p.thread_index_in_simdgroup = i % kSimdWidth;
    p.simdgroup_index_in_threadgroup = i / kSimdWidth;
    p.simdgroups_per_threadgroup = g_launch.simdgroups;
    p.threads_per_simdgroup = kSimdWidth;
    f.sp = mt_fiber_prepare(f.stack + job->stack_bytes + kStackColors - stack_color(i),
                            fiber_main, &f);
  }
  std::vector<uint32_t>& order = w->order;
  order.resize(T);
  for (uint64_t round = 0;; ++round) {
    for (uint32_t i = 0; i < T; ++i) order[i] = i;
    if (job->schedule == kScheduleReverse) {
      std::reverse(order.begin(), order.end());
    } else if (job->schedule == kScheduleRandom) {
      uint64_t s = job->seed ^ (g * 0xD1B54A32D192ED03ull) ^ (round * 0x8CB92BA72F3D8DD7ull);
      for (uint32_t i = T; i > 1; --i) std::swap(order[i - 1], order[next_random(s) % i]);
    }
    // Run the round: the first ready fiber, which hands on to the next (switch_from); the
    // last one of the round switches back here.
    for (w->cursor = 0; w->cursor < T; ++w->cursor) {
      Fiber& f = w->fibers[order[w->cursor]];
      if (f.state != kReady) continue;
      w->current = &f;
      mt_fiber_switch(&w->scheduler_sp, f.sp);
      w->current = nullptr;
      break;
    }
    bool done = true;
    for (uint32_t i = 0; i < T && done; ++i) done = w->fibers[i].state == kDone;
    if (done) break;
    if (!resolve_simd(w)) resolve_barrier(w);
  }
  ++w->groups_run;
  w->threads_run += T;
}

unsigned char* map_stack(size_t bytes) {
  // One guard page below the stack turns an overflow into a fault the handler names.
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  void* p = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) fail_launch("cannot map a %zu-byte fiber stack", bytes);
  mprotect(p, page, PROT_NONE);
  return static_cast<unsigned char*>(p) + page;
}

std::vector<Worker*> g_workers;

// Zeroed shadow memory, mapped lazily. Large maps ask for transparent huge pages: a
// checked run touches much of the shadow of the buffers it reads, and 2 MiB pages turn
// thousands of page faults and TLB misses into a few.
void* map_shadow(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
#ifdef MADV_HUGEPAGE
  if (p != MAP_FAILED && bytes >= (size_t(2) << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

void worker_main(Worker* w) {
  t_worker = w;
  const uint32_t T = g_launch.threads;
  w->fibers.resize(T);
  for (uint32_t i = 0; i < T; ++i) {
    Fiber& f = w->fibers[i];
    f.tid = i;
    f.lane = i % kSimdWidth;
    f.simdgroup = i / kSimdWidth;
    f.stack = map_stack(g_launch.job->stack_bytes + kStackColors);
  }
  for (uint32_t b = 0; b < g_launch.job->nbuffers; ++b) {
    void* p = map_shadow(g_launch.job->buffers[b].size ? g_launch.job->buffers[b].size : 1);
    if (p == MAP_FAILED) fail_launch("cannot map the access map of buffer %u", b);
    w->touched[b] = static_cast<uint8_t*>(p);
  }
  w->simd_epoch.assign(g_launch.simdgroups, 0);
  w->simd_slots.assign(size_t(g_launch.simdgroups) * kSimdWidth * __MT_SIMD_SLOT, 0);
  w->simd_shared.assign(g_launch.simdgroups, __mt_simd_shared{});
  const size_t arena_cap = 2 * kMaxThreadgroupMemory + 64 * kRedZone;
  w->arena = static_cast<unsigned char*>(aligned_alloc(64, arena_cap));
  w->arena_lo = reinterpret_cast<uintptr_t>(w->arena);
  w->arena_span = arena_cap;
  w->arena_owner.assign(arena_cap, -1);
  w->arena_shadow.assign(arena_cap, TgShadow{});
  for (;;) {
    uint64_t g = g_launch.next_group.fetch_add(1);
    if (g >= g_launch.groups) break;
    run_group(w, g);
  }
}

// ---------------------------------------------------------------------------------------
// Crashes: report where (group, thread, pc, address) and exit; never a core dump.

char g_crash_path[4096];

void crash_handler(int sig, siginfo_t* info, void* uctx) {
  char buf[1024];
  Worker* w = t_worker;
  uintptr_t pc = 0;
#if defined(__x86_64__) && defined(__linux__)
  pc = uintptr_t(static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__) && defined(__APPLE__)
  pc = uintptr_t(static_cast<ucontext_t*>(uctx)->uc_mcontext->__ss.__pc);
#elif defined(__aarch64__) && defined(__linux__)
  pc = uintptr_t(static_cast<ucontext_t*>(uctx)->uc_mcontext.pc);
#else
  (void)uctx;
#endif
  const char* what = sig == SIGSEGV ? "invalid memory access (SIGSEGV)"
                   : sig == SIGBUS  ? "invalid memory access (SIGBUS)"
                   : sig == SIGFPE  ? "arithmetic fault (SIGFPE, e.g. integer division by zero)"
                   : sig == SIGILL  ? "illegal instruction (SIGILL)"
                                    : "trap (SIGTRAP)";
  uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  bool overflow = false;
  if (w && w->current) {
    uintptr_t lo = reinterpret_cast<uintptr_t>(w->current->stack);
    size_t page = size_t(sysconf(_SC_PAGESIZE));
    overflow = addr >= lo - page && addr < lo;
  }
  int n = snprintf(buf, sizeof buf,
                   "{\"status\":\"crash\",\"message\":\"%s%s\",\"pc\":%" PRIuPTR
                   ",\"address\":%" PRIuPTR ",\"group\":%" PRIu64 ",\"thread\":%d}\n",
                   what, overflow ? ": fiber stack overflow (large local arrays?)" : "", pc, addr,
                   w ? w->group : 0, w && w->current ? int(w->current->tid) : -1);
  int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ssize_t ignored = write(fd, buf, size_t(n));
    (void)ignored;
    close(fd);
  }
  _exit(4);
}

// ---------------------------------------------------------------------------------------
// Thread-private arrays (and other arrays of known size): checked builds compile with
// clang's -fsanitize=array-bounds in its non-recovering form, so an out-of-range index
// calls this handler before the access happens. It reports a bounds finding (status
// "bounds": the run stops there, as a sanitizer halting on error) with the index and the
// array type; the Python side locates the MSL line from the pc.

struct UbsanType {
  uint16_t kind, info;  // kind 0: integer, info: log2(bits) << 1 | signed
  char name[1];
};
struct UbsanOutOfBounds {
  const char* file;
  uint32_t line, column;
  const UbsanType* array_type;
  const UbsanType* index_type;
};

extern "C" [[noreturn]] void __ubsan_handle_out_of_bounds_abort(void* data, void* index) {
  const auto* d = static_cast<const UbsanOutOfBounds*>(data);
  uint64_t raw = uint64_t(reinterpret_cast<uintptr_t>(index));
  unsigned bits = d->index_type->kind == 0 ? 1u << (d->index_type->info >> 1) : 64;
  bool is_signed = d->index_type->kind == 0 && (d->index_type->info & 1);
  if (bits < 64) raw &= (uint64_t(1) << bits) - 1;
  long long value = (long long)raw;
  if (is_signed && bits < 64 && (raw >> (bits - 1)) & 1) value = (long long)(raw - (uint64_t(1) << bits));
  char detail[512];
  if (is_signed)
    snprintf(detail, sizeof detail, "index %lld is out of bounds for the array type %s", value,
             d->array_type->name);
  else
    snprintf(detail, sizeof detail, "index %llu is out of bounds for the array type %s",
             (unsigned long long)raw, d->array_type->name);
  for (char* c = detail; *c; ++c)
    if (*c == '"' || *c == '\\') *c = '\'';
  Worker* w = t_worker;
  char buf[1024];
  int n = snprintf(buf, sizeof buf,
                   "{\"status\":\"bounds\",\"message\":\"%s\",\"pc\":%" PRIuPTR
                   ",\"group\":%" PRIu64 ",\"thread\":%d}\n",
                   detail, reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                   w ? w->group : 0, w && w->current ? int(w->current->tid) : -1);
  int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ssize_t ignored = write(fd, buf, size_t(n));
    (void)ignored;
    close(fd);
  }
  _exit(4);
}

void install_crash_handlers() {
  static char altstack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa{};
  sa.sa_sigaction = crash_handler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}) sigaction(sig, &sa, nullptr);
}

}  // namespace mt

using namespace mt;

// ---------------------------------------------------------------------------------------
// The ABI of mt_runtime.h

extern "C" {

void __mt_threadgroup_barrier(unsigned flags, __mt_site site) {
  Worker* w = t_worker;
  park(w, kAtBarrier, site, flags, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

void __mt_simdgroup_barrier(unsigned flags, __mt_site site) {
  (void)flags;
  Worker* w = t_worker;
  park(w, kAtSimd, site, 0, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

__mt_simd_table __mt_simd_meet(const void* mine, unsigned nbytes, unsigned kind, __mt_site site) {
  Worker* w = t_worker;
  Fiber* f = w->current;
  f->deposit_bytes = nbytes < __MT_SIMD_SLOT ? nbytes : __MT_SIMD_SLOT;
  std::memcpy(f->deposit, mine, f->deposit_bytes);
  park(w, kAtSimd, site, kind, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
  return f->table;
}

void __mt_simd_inactive_lane(unsigned kind, unsigned src_lane) {
  Worker* w = t_worker;
  const char* what = kind == __MT_SIMD_BROADCAST ? "simd_broadcast" : "simd_shuffle";
  add_finding(w, make_finding(w, kDivergence, false, -1, 0,
                              reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                              format("%s reads lane %u, which is not active in this simdgroup "
                                     "(undefined in MSL); the lane's own value was returned",
                                     what, src_lane)));
}

void __mt_simd_nonuniform(unsigned kind, const char* what) {
  Worker* w = t_worker;
  add_finding(w, make_finding(w, kDivergence, false, -1, 0,
                              reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                              format("simdgroup matrix %s: lanes disagree on %s, which must be "
                                     "uniform across the simdgroup",
                                     kind == __MT_SIMD_MATRIX_LOAD ? "load" : "store", what)));
}

void* __mt_tg_slot(unsigned slot, unsigned size, unsigned align) {
  Worker* w = t_worker;
  if (slot < w->slot_ptr.size() && w->slot_ptr[slot]) return w->slot_ptr[slot];
  uint32_t offset;
  {
    std::lock_guard<std::mutex> lock(g_launch.slot_mutex);
    if (slot >= kMaxSlots)
      fail_launch("the kernel declares more than %u threadgroup variables", kMaxSlots);
    if (g_launch.slot_offset[slot] == UINT32_MAX) {
      uint32_t end = g_launch.arena_bytes.load(), total = 0;
      for (uint32_t s = 0; s < g_launch.slot_count.load(); ++s) total += g_launch.slot_size[s];
      if (total + size > kMaxThreadgroupMemory)
        fail_launch("threadgroup variables need %u bytes; Apple GPUs provide at most %u bytes of "
                    "threadgroup memory", total + size, kMaxThreadgroupMemory);
      uint32_t a = std::max<uint32_t>(align, 16);
      uint32_t off = (end + kRedZone + a - 1) / a * a;
      g_launch.slot_offset[slot] = off;
      g_launch.slot_size[slot] = size;
      if (slot >= g_launch.slot_count.load()) g_launch.slot_count.store(slot + 1);
      g_launch.arena_bytes.store(off + size + kRedZone);
    }
    offset = g_launch.slot_offset[slot];
  }
  // Publish the layout to this worker's arena: owner map, poison.
  for (uint32_t i = 0; i < size; ++i) w->arena_owner[offset + i] = int16_t(slot);
  std::memset(w->arena + offset, 0xFF, size);
  if (slot >= w->slot_ptr.size()) w->slot_ptr.resize(slot + 1, nullptr);
  w->slot_ptr[slot] = w->arena + offset;
  return w->slot_ptr[slot];
}

namespace {
// 64-bit hash of a memo key: picks the set, and names the value. Each word goes through
// its own splitmix64 finalizer (four independent chains the CPU overlaps), then they are
// combined with distinct rotations.
inline uint64_t memo_mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t memo_hash(const uint64_t key[4]) {
  return memo_mix(key[0]) ^ rotl(memo_mix(key[1] ^ 0x5851F42D4C957F2Dull), 17) ^
         rotl(memo_mix(key[2] ^ 0x14057B7EF767814Full), 31) ^
         rotl(memo_mix(key[3] ^ 0x2545F4914F6CDD1Dull), 47);
}
constexpr uint64_t kTagMultiply = uint64_t(3) << 62;  // mt_matrix.h's tag kinds

// The memo tile for `key`: found (or, with `insert`, a slot claimed for it), or null.
__mt_memo_tile memo_lookup(const uint64_t key[4], bool insert) {
  Worker* w = t_worker;
  const uint64_t h = memo_hash(key);
  __mt_memo_tile r{nullptr, kTagMultiply | (h >> 2)};
  if (!w) return r;
  if (w->memo.empty()) {
    const size_t sets = size_t(std::max<uint32_t>(g_launch.simdgroups, 4)) * kMemoSetsPerSimdgroup;
    w->memo.assign(sets, Worker::MemoSet{});
    w->memo_data.assign(sets * kMemoWays * kMemoTileBytes, 0);
  }
  const size_t set_index = (h ^ (h >> 32)) % w->memo.size();
  Worker::MemoSet& set = w->memo[set_index];
  int way = -1;
  for (uint32_t i = 0; i < kMemoWays; ++i)
    if (set.key[i][0] == key[0] && set.key[i][1] == key[1] && set.key[i][2] == key[2] &&
        set.key[i][3] == key[3]) {
      way = int(i);
      break;
    }
  if (way < 0) {
    if (!insert) return r;
    way = int(set.next++ % kMemoWays);
    std::memcpy(set.key[way], key, 4 * sizeof(uint64_t));
  }
  r.tile = w->memo_data.data() + (set_index * kMemoWays + size_t(way)) * kMemoTileBytes;
  return r;
}
}  // namespace

__mt_memo_tile __mt_matrix_memo_find(uint64_t k0, uint64_t k1, uint64_t k2, uint64_t k3) {
  const uint64_t key[4] = {k0, k1, k2, k3};
  return memo_lookup(key, false);
}

__mt_memo_tile __mt_matrix_memo_slot(uint64_t k0, uint64_t k1, uint64_t k2, uint64_t k3) {
  static thread_local unsigned char scratch[kMemoTileBytes];  // outside a worker: not shared
  const uint64_t key[4] = {k0, k1, k2, k3};
  __mt_memo_tile r = memo_lookup(key, true);
  if (!r.tile) r.tile = scratch;
  return r;
}

// float -> bfloat with round-to-nearest-even; libgcc 12 lacks it, clang emits calls to it.
uint16_t __truncsfbf2_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__bf16 __truncsfbf2(float f) {
  uint16_t b = __truncsfbf2_bits(f);
  __bf16 r;
  memcpy(&r, &b, 2);
  return r;
}
__bf16 __truncdfbf2(double d) {
  // Double rounding through float is exact enough for MSL, which has no double.
  return __truncsfbf2(float(d));
}

}  // extern "C"

// ---------------------------------------------------------------------------------------

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s JOB KERNEL RESULT\n", argv[0]);
    return 2;
  }
  g_launch.result_path = argv[3];
  snprintf(g_crash_path, sizeof g_crash_path, "%s", argv[3]);
  install_crash_handlers();

  int fd = open(argv[1], O_RDWR);
  if (fd < 0) fail_launch("cannot open job file %s", argv[1]);
  struct stat st;
  fstat(fd, &st);
  void* map = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) fail_launch("cannot map job file %s", argv[1]);
  close(fd);
  g_launch.map = static_cast<unsigned char*>(map);
  g_launch.map_size = size_t(st.st_size);
  const JobHeader* job = static_cast<const JobHeader*>(map);
  g_launch.job = job;
  if (memcmp(job->magic, kJobMagic, 8) != 0) fail_launch("job file has a wrong format version");

  for (uint32_t k = 0; k < __mt_kernel_count; ++k)
    if (strcmp(__mt_kernels[k].name, argv[2]) == 0) g_launch.kernel = &__mt_kernels[k];
  if (!g_launch.kernel) fail_launch("no kernel function named '%s' in the MSL source", argv[2]);

  const __mt_kernel_desc* kd = g_launch.kernel;
  for (uint32_t i = 0; i < kd->nparams; ++i) {
    const __mt_param_desc& p = kd->params[i];
    if (p.buffer_index < 0) continue;
    if (uint32_t(p.buffer_index) >= job->nbuffers)
      fail_launch("parameter '%s' is bound to [[buffer(%d)]] but only %u buffers were given",
                  p.name, p.buffer_index, job->nbuffers);
    if (job->buffers[p.buffer_index].size < p.min_bytes)
      fail_launch("parameter '%s' ([[buffer(%d)]]) needs at least %u bytes, the buffer holds %" PRIu64,
                  p.name, p.buffer_index, p.min_bytes, job->buffers[p.buffer_index].size);
  }

  for (uint32_t b = 0; b < job->nbuffers; ++b) g_launch.buffers[b] = g_launch.map + job->buffers[b].offset;
  g_launch.dev_lo = reinterpret_cast<uintptr_t>(g_launch.map) + sizeof(JobHeader);
  g_launch.dev_span = g_launch.map_size - sizeof(JobHeader);
  for (uint32_t b = 0; b < job->nbuffers; ++b) {
    size_t n = job->buffers[b].size ? job->buffers[b].size : 1;
    if (job->checks & kCheckRaces) {
      g_launch.dev_writer[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      g_launch.dev_reader[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      g_launch.dev_atomic[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      if (g_launch.dev_writer[b] == MAP_FAILED || g_launch.dev_reader[b] == MAP_FAILED ||
          g_launch.dev_atomic[b] == MAP_FAILED)
        fail_launch("cannot map race-checker shadow memory for buffer %u (%zu bytes)", b, n * 24);
    }
  }

  for (auto& o : g_launch.slot_offset) o.store(UINT32_MAX);
  g_launch.threads = job->threadgroup[0] * job->threadgroup[1] * job->threadgroup[2];
  if (g_launch.threads == 0 || g_launch.threads > kMaxThreadsPerGroup)
    fail_launch("threadgroup of %u threads; Metal allows 1 to %u", g_launch.threads, kMaxThreadsPerGroup);
  g_launch.simdgroups = (g_launch.threads + kSimdWidth - 1) / kSimdWidth;
  g_launch.groups = uint64_t(job->grid[0]) * job->grid[1] * job->grid[2];
  uint32_t nworkers = uint32_t(std::min<uint64_t>(std::max<uint32_t>(job->workers, 1), g_launch.groups));
  if (nworkers == 0) nworkers = 1;
  for (uint32_t i = 0; i < nworkers; ++i) g_workers.push_back(new Worker());
  if (nworkers == 1) {
    worker_main(g_workers[0]);
  } else {
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < nworkers; ++i) threads.emplace_back(worker_main, g_workers[i]);
    for (std::thread& t : threads) t.join();
  }
  msync(map, g_launch.map_size, MS_SYNC);
  write_results();
  return 0;
}

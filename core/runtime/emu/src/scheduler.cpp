// scheduler.cpp: threadgroups on fibers, and the meeting points of MSL's collectives.
//
// Execution model (docs/emulator.md): the threads of a threadgroup are fibers on one OS
// thread; threadgroups are spread over worker OS threads, in no order (MSL promises none).
// A fiber runs until it reaches a meeting point: threadgroup_barrier (every thread of the
// threadgroup must reach the same call, else a "divergence" finding), simdgroup_barrier
// and the simd_* collectives (the active lanes of a simdgroup at one call site meet and
// exchange their values). Between meeting points the order of fibers follows the
// schedule (forward, reverse, seeded random), so a kernel whose result depends on the
// order of threads between barriers shows it under another schedule. Thread position
// attributes ([[thread_position_in_threadgroup]] and the rest) are filled here from the
// grid and threadgroup sizes, with simdgroups of MT_SIMD_WIDTH consecutive threads.

#include "fiber.h"
#include "runtime.h"

namespace mt {

__thread Worker* t_worker = nullptr;

// ---------------------------------------------------------------------------------------
// Scheduling

// Leaves fiber `f` for the next ready fiber of this round (in schedule order), or for the
// scheduler when the round is over. Switching fiber to fiber, rather than through the
// scheduler, halves the switches per meeting point and keeps the scheduler's stack cold.
void switch_from(Worker* w, Fiber* f) {
  const uint32_t T = w->threads;
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

// Whether the first n bytes of a and b agree (n <= __MT_SIMD_SLOT: a word at a time).
inline bool same_bytes(const unsigned char* a, const unsigned char* b, uint32_t n) {
  uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    if (x != y) return false;
  }
  for (; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// Completes one simd collective per simdgroup whose live lanes are all parked.
bool resolve_simd(Worker* w) {
  bool progressed = false;
  const uint32_t T = w->threads;
  for (uint32_t sg = 0; sg < w->simdgroups; ++sg) {
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
        // Lanes at one call site deposit values of one type: the same number of bytes. The
        // whole slot is copied (a fixed size, inlined); readers read only the deposited bytes.
        std::memcpy(slots + (i - lo) * __MT_SIMD_SLOT, f.deposit, __MT_SIMD_SLOT);
        if (uniform && (f.deposit_bytes != w->fibers[first].deposit_bytes ||
                        !same_bytes(f.deposit, w->fibers[first].deposit, f.deposit_bytes)))
          uniform = 0;
      }
    }
    for (uint32_t i = lo; i < hi; ++i) {
      Fiber& f = w->fibers[i];
      if (f.state == kAtSimd && f.site.id == site) {
        f.table = __mt_simd_table{slots, active, i - lo, hi - lo, uniform, w->meetings + 1,
                                  &w->simd_shared[sg]};
        f.state = kReady;
        f.interval = w->meetings + 1;
        f.products = 0;
      }
    }
    ++w->meetings;
    if (kind == 0) ++w->simd_epoch[sg];  // simdgroup_barrier
    else if (kind != __MT_SIMD_MATRIX_GATHER) ++w->simd_ops[kind < kSimdKinds ? kind : 0];
    progressed = true;
  }
  return progressed;
}

void resolve_barrier(Worker* w) {
  const uint32_t T = w->threads;
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
  const uint64_t id = ++w->meetings;
  for (uint32_t i = 0; i < T; ++i) {
    Fiber& f = w->fibers[i];
    if (f.state != kAtBarrier) continue;
    f.state = kReady;
    f.interval = id;
    f.products = 0;
  }
}

void reset_arena(Worker* w) {
  uint32_t used = g_launch.arena_bytes.load();
  if (!used) return;
  std::memset(w->arena, 0xFF, used);
  std::memset(w->arena_shadow, 0, used * sizeof(TgShadow));
}

// Stacks are mapped at page multiples, so without an offset every fiber's hot top of
// stack would fall in the same L1 cache sets and evict the others' at every switch.
// Each stack is mapped kStackColors bytes larger, so the kernel keeps its stack_bytes.
constexpr size_t kStackColors = 4096;
inline size_t stack_color(uint32_t tid) { return size_t(tid % 61) * 64; }

void run_group(Worker* w, uint64_t g) {
  const JobHeader* job = g_launch.job;
  w->group = g;
  w->tg_epoch = w->dev_epoch = 1;
  std::fill(w->simd_epoch.begin(), w->simd_epoch.end(), 0);
  reset_arena(w);
  for (ProductLog& log : w->product_log) log.interval = ~uint64_t(0);  // interval 0 is per group
  uint32_t gp[3] = {uint32_t(g % job->grid[0]), uint32_t(g / job->grid[0] % job->grid[1]),
                    uint32_t(g / (uint64_t(job->grid[0]) * job->grid[1]))};
  // This threadgroup's size: the launch's, but for the last threadgroup of a dimension of
  // a non-uniform grid, which holds the threads left (Metal's threads_per_threadgroup).
  const bool non_uniform = job->grid_threads[0] != 0;
  uint32_t size[3], per_grid[3];
  for (int d = 0; d < 3; ++d) {
    per_grid[d] = non_uniform ? job->grid_threads[d] : job->grid[d] * job->threadgroup[d];
    size[d] = std::min(job->threadgroup[d], per_grid[d] - gp[d] * job->threadgroup[d]);
  }
  const uint32_t T = size[0] * size[1] * size[2];
  w->threads = T;
  w->simdgroups = (T + kSimdWidth - 1) / kSimdWidth;
  for (uint32_t i = 0; i < T; ++i) {
    Fiber& f = w->fibers[i];
    f.state = kReady;
    f.suppress = false;
    f.interval = 0;
    f.products = 0;
    __mt_thread_pos& p = f.pos;
    uint32_t lp[3] = {i % size[0], i / size[0] % size[1], i / (size[0] * size[1])};
    for (int d = 0; d < 3; ++d) {
      p.thread_position_in_threadgroup[d] = lp[d];
      p.threadgroup_position_in_grid[d] = gp[d];
      p.threads_per_threadgroup[d] = size[d];
      p.threadgroups_per_grid[d] = job->grid[d];
      p.threads_per_grid[d] = per_grid[d];
      p.thread_position_in_grid[d] = gp[d] * job->threadgroup[d] + lp[d];
    }
    p.thread_index_in_threadgroup = i;
    p.thread_index_in_simdgroup = i % kSimdWidth;
    p.simdgroup_index_in_threadgroup = i / kSimdWidth;
    p.simdgroups_per_threadgroup = w->simdgroups;
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
  w->simdgroups_run += w->simdgroups;
}

// Every fiber stack of a worker in one mapping, each with a guard page below it that turns
// an overflow into a fault the crash handler names. The guards are Linux guard regions
// where the kernel has them (one call each, no split of the mapping: far cheaper for the
// hundreds of stacks a launch maps), else PROT_NONE pages. A guard region is trusted only
// once the kernel refuses to copy from it: qemu-user accepts the advice and ignores it.
#if defined(__linux__) && !defined(MADV_GUARD_INSTALL)
#define MADV_GUARD_INSTALL 102  // Linux 6.13 <linux/mman.h>
#endif
bool install_guard_region(void* page, size_t bytes) {
#if defined(__linux__)
  if (madvise(page, bytes, MADV_GUARD_INSTALL) != 0) return false;
  int fds[2];
  if (pipe(fds) != 0) return false;
  const bool refused = write(fds[1], page, 1) < 0;  // EFAULT where the guard is real
  close(fds[0]);
  close(fds[1]);
  return refused;
#else
  (void)page, (void)bytes;
  return false;
#endif
}

void guard_page(void* page, size_t bytes, bool region) {
#if defined(__linux__)
  if (region) {
    madvise(page, bytes, MADV_GUARD_INSTALL);
    return;
  }
#endif
  (void)region;
  mprotect(page, bytes, PROT_NONE);
}

// A worker's fiber stacks in one mapping: `count` stacks of `bytes`, each above a guard page.
// base is null when the mapping failed.
struct StackBlock {
  unsigned char* base = nullptr;
  size_t stride = 0, count = 0, bytes = 0;
  bool regions = false;  // guards are guard regions (else PROT_NONE pages)
};

StackBlock map_stack_block(size_t count, size_t bytes) {
  StackBlock s;
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t stride = page + (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, stride * count, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return s;
  unsigned char* base = static_cast<unsigned char*>(p);
  const bool guard_regions = install_guard_region(base, page);
  for (size_t i = 0; i < count; ++i)
    if (i || !guard_regions) guard_page(base + i * stride, page, guard_regions);  // the first: installed
  s.base = base;
  s.stride = stride;
  s.count = count;
  s.bytes = bytes;
  s.regions = guard_regions;
  return s;
}

// Stacks a launch server mapped before forking this launch (prepare_stacks), one block
// per worker: its launches skip mapping and guarding hundreds of stacks each. The blocks
// hold no pages (the server never touches them), so a launch finds them as fresh as its
// own. A guard region is trusted only if it still refuses a copy after the fork.
std::vector<StackBlock> g_prepared_stacks;

bool guard_region_refuses(unsigned char* page) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const bool refused = write(fds[1], page, 1) < 0;
  close(fds[0]);
  close(fds[1]);
  return refused;
}

void prepare_stacks(uint32_t workers, uint32_t threads, uint64_t stack_bytes) {
  const size_t bytes = size_t(stack_bytes) + kStackColors;
  if (g_prepared_stacks.size() == workers &&
      std::all_of(g_prepared_stacks.begin(), g_prepared_stacks.end(), [&](const StackBlock& s) {
        return s.count == threads && s.bytes == bytes;
      }))
    return;
  for (StackBlock& s : g_prepared_stacks) munmap(s.base, s.stride * s.count);
  g_prepared_stacks.clear();
  for (uint32_t i = 0; i < workers; ++i) {
    StackBlock s = map_stack_block(threads, bytes);
    if (!s.base) break;  // the launch maps its own
    g_prepared_stacks.push_back(s);
  }
}

void map_stacks(Worker* w, size_t bytes) {
  const size_t n = w->fibers.size();
  const size_t index = size_t(std::find(g_workers.begin(), g_workers.end(), w) - g_workers.begin());
  StackBlock s;
  if (index < g_prepared_stacks.size()) {
    StackBlock& prepared = g_prepared_stacks[index];
    if (prepared.count == n && prepared.bytes == bytes &&
        (!prepared.regions || guard_region_refuses(prepared.base)))
      s = prepared;
  }
  if (!s.base) s = map_stack_block(n, bytes);
  if (!s.base) fail_launch("cannot map %zu fiber stacks of %zu bytes", n, bytes);
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  for (size_t i = 0; i < n; ++i) w->fibers[i].stack = s.base + i * s.stride + page;
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
  }
  map_stacks(w, g_launch.job->stack_bytes + kStackColors);
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
  // Zero pages until a threadgroup uses them: a kernel with little threadgroup memory
  // touches a few pages of the 2 x MT_THREADGROUP_MEMORY_BYTES this can hold.
  void* shadow = map_shadow(arena_cap * sizeof(TgShadow));
  if (shadow == MAP_FAILED) fail_launch("cannot map the threadgroup memory shadow");
  w->arena_shadow = static_cast<TgShadow*>(shadow);
  for (;;) {
    uint64_t g = g_launch.next_group.fetch_add(1);
    if (g >= g_launch.groups) break;
    run_group(w, g);
  }
}

}  // namespace mt

using namespace mt;

extern "C" {

const __mt_thread_pos* __mt_current_position(void) { return &t_worker->current->pos; }


void __mt_threadgroup_barrier(unsigned flags, __mt_site site) {
  // Switched off for this launch: as if the statement were not there (no meeting, no count).
  if (site.line == g_launch.job->barrier_off) return;
  Worker* w = t_worker;
  park(w, kAtBarrier, site, flags, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

void __mt_simdgroup_barrier(unsigned flags, __mt_site site) {
  (void)flags;
  Worker* w = t_worker;
  park(w, kAtSimd, site, 0, reinterpret_cast<uintptr_t>(__builtin_return_address(0)));
}

__mt_simd_table __mt_simd_meet(const void* mine, unsigned nbytes, unsigned kind, __mt_site site,
                               const void* pc) {
  Worker* w = t_worker;
  Fiber* f = w->current;
  f->deposit_bytes = nbytes < __MT_SIMD_SLOT ? nbytes : __MT_SIMD_SLOT;
  std::memcpy(f->deposit, mine, f->deposit_bytes);
  park(w, kAtSimd, site, kind, reinterpret_cast<uintptr_t>(pc));
  return f->table;
}

void __mt_simd_inactive_lane(unsigned kind, unsigned src_lane, const void* pc) {
  Worker* w = t_worker;
  const char* what = kind == __MT_SIMD_BROADCAST ? "simd_broadcast" : "simd_shuffle";
  add_finding(w, make_finding(w, kDivergence, false, -1, 0, reinterpret_cast<uintptr_t>(pc),
                              format("%s reads lane %u, which is not active in this simdgroup "
                                     "(undefined in MSL); the lane's own value was returned",
                                     what, src_lane)));
}

void __mt_simd_nonuniform(unsigned kind, const char* what, const void* pc) {
  Worker* w = t_worker;
  add_finding(w, make_finding(w, kDivergence, false, -1, 0, reinterpret_cast<uintptr_t>(pc),
                              format("simdgroup matrix %s: lanes disagree on %s, which must be "
                                     "uniform across the simdgroup",
                                     kind == __MT_SIMD_MATRIX_LOAD ? "load" : "store", what)));
}

}  // extern "C"

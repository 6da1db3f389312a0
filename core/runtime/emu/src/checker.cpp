// checker.cpp: the memory checker behind the instrumentation hooks (hooks.cpp).
//
// MSL's rules it enforces, after Oclgrind and compute-sanitizer: threads of a threadgroup
// see each other's threadgroup writes only across a threadgroup_barrier with
// mem_flags::mem_threadgroup (mem_device for device memory), and lanes of a simdgroup
// across a simdgroup_barrier; nothing orders two threadgroups of one dispatch. So every
// threadgroup byte remembers its last writer and reader with the barrier interval they
// touched it in: two different threads in the same interval, one of them writing, is a race
// whatever the schedule. Device memory uses the same rule inside a threadgroup and reports
// any two threadgroups touching one byte with a write. Atomics order only atomics: a plain
// access racing an atomic one is reported like any race. Threadgroup memory starts
// unspecified in MSL: its bytes start poisoned (0xFF: NaN for floats) and unwritten, and
// reading one is an "uninit" finding. Accesses in the red zones around buffers and
// threadgroup variables are "bounds" findings.

#include "runtime.h"

namespace mt {

// ---------------------------------------------------------------------------------------
// Device memory checks

// Shadow word: bit 63 valid | group (31 bits) << 32 | many-threads bit 31 | epoch (21 bits)
// << 10 | thread (10 bits). Group kManyGroups marks bytes read by several threadgroups.
constexpr uint64_t kValid = uint64_t(1) << 63;
constexpr uint64_t kManyGroups = 0x7FFFFFFFu;
constexpr uint64_t kManyThreads = uint64_t(1) << 31;
inline uint64_t encode_dev(uint64_t group, uint32_t thread, uint32_t epoch) {
  return kValid | ((group & kManyGroups) << 32) | (uint64_t(epoch & 0x1FFFFF) << 10) | thread;
}
inline uint64_t dev_group(uint64_t w) { return (w >> 32) & kManyGroups; }
inline uint32_t dev_thread(uint64_t w) { return uint32_t(w & 0x3FF); }
inline uint32_t dev_epoch(uint64_t w) { return uint32_t((w >> 10) & 0x1FFFFF); }

int find_buffer(uintptr_t a) {
  const JobHeader* job = g_launch.job;
  for (uint32_t i = 0; i < job->nbuffers; ++i) {
    uintptr_t lo = reinterpret_cast<uintptr_t>(g_launch.buffers[i]);
    if (a >= lo && a < lo + job->buffers[i].size) return int(i);
  }
  return -1;
}

// The buffer whose red zone holds `a`: the nearest buffer below it (or the first one).
int nearest_buffer(uintptr_t a, int64_t* offset) {
  const JobHeader* job = g_launch.job;
  int best = 0;
  for (uint32_t i = 0; i < job->nbuffers; ++i)
    if (reinterpret_cast<uintptr_t>(g_launch.buffers[i]) <= a) best = int(i);
  *offset = int64_t(a) - int64_t(reinterpret_cast<uintptr_t>(g_launch.buffers[best]));
  return best;
}

// A device race finding of `w` at byte `off` of buffer b against the shadow word `other`
// (its thread and group where one thread or group made it); `cross`: made by another group.
Finding device_conflict(Worker* w, int b, uint64_t off, uint64_t other, uintptr_t pc, bool* cross) {
  Finding f = make_finding(w, kRace, true, b, off, pc, "");
  const uint64_t og = dev_group(other);
  *cross = og != (w->group & kManyGroups);
  f.other_thread = (other & kManyThreads) || og == kManyGroups ? -1 : int32_t(dev_thread(other));
  f.other_group = *cross && og != kManyGroups ? int64_t(og) : -1;
  return f;
}

void device_race(Worker* w, bool write, int b, uint64_t off, uint64_t other, bool other_write,
                 uintptr_t pc) {
  bool cross;
  Finding f = device_conflict(w, b, off, other, pc, &cross);
  const char* me = write ? "write" : "read";
  const char* them = other_write ? "a write" : "a read";
  if (cross)
    f.detail = format("%s conflicts with %s by another threadgroup (nothing orders threadgroups "
                      "within a dispatch)", me, them);
  else
    f.detail = format("%s conflicts with %s by another thread of the threadgroup in the same "
                      "barrier interval (no threadgroup_barrier with mem_flags::mem_device "
                      "between them)", me, them);
  add_finding(w, std::move(f));
}

// Atomic shadow word (dev_atomic): encode_dev() of the last atomic access with bit 30 (the
// top epoch bit, so epochs compare modulo 2^20 here) set when any access was an update; the
// many-threads bit or group kManyGroups when several threads or groups made them.
constexpr uint64_t kAtomicUpdate = uint64_t(1) << 30;
inline uint32_t atomic_epoch(uint64_t w) { return uint32_t((w >> 10) & 0xFFFFF); }

// A plain access conflicts with atomics by another thread in the same interval (or by
// another threadgroup at all): a write with any atomic, a read with an atomic update.
inline bool plain_conflicts_atomic(uint64_t a, bool write, uint64_t g, uint32_t t, uint32_t e) {
  if (!(a & kValid) || (!write && !(a & kAtomicUpdate))) return false;
  if (dev_group(a) != g) return true;
  return ((a & kManyThreads) || dev_thread(a) != t) && atomic_epoch(a) == (e & 0xFFFFF);
}

void atomic_race(Worker* w, const char* what, int b, uint64_t off, uint64_t other, uintptr_t pc) {
  bool cross;
  Finding f = device_conflict(w, b, off, other, pc, &cross);
  f.detail = format("%s conflicts with an atomic %s by %s (atomics order only atomics; a plain "
                    "access to the same bytes needs a barrier or a separate dispatch)", what,
                    (other & kAtomicUpdate) ? "update" : "load",
                    cross ? "another threadgroup" : "another thread of the threadgroup in the same "
                    "barrier interval");
  add_finding(w, std::move(f));
}

// Granules. The device shadow is kept per 8-byte granule, with a lock bit in its state
// byte (dev_state: kLocked, kSplit, kShared, kWords): one locked operation per granule an
// access touches instead of one per byte. A granule whose bytes have always been accessed
// together (a whole-granule access: half4, float2) keeps one writer and one reader word for
// all its bytes (dev_granule), checked and updated under the lock, so two workers touching
// it always see each other, whatever the interleaving. The first access to part of it, or
// an atomic, copies those into per-byte words (dev_writer, dev_reader) and sets kSplit for
// good; writes and atomics still take the lock, plain reads of a split granule do not
// (split_read says what that allows). A conflict found in a whole granule is replayed on
// per-byte words, so findings (which byte, which other thread) and the shadow left behind
// are exactly those of the per-byte rule.
constexpr uint64_t kGranule = 8;
// kWords: one of the granule's two words has been written; until then both are zero and
// are not read, so that the first access to a page of granule words writes it without
// reading it first (a read maps the zero page, which the write then has to replace).
constexpr uint8_t kShared = 1, kLocked = 2, kSplit = 4, kWords = 8;

// Read-shared granules. A GEMM reads each input element from many threadgroups and never
// writes it: once every byte of a granule has been read by several threadgroups (reader
// word kReadByGroups) and written by none, a further plain read can neither conflict
// (reads conflict only with writes and atomic updates, and without atomics in the launch
// there are none) nor change a shadow word, so it skips the shadow and the lock (kShared).
// A write clears the flag in the same critical section in which it finds the readers.
constexpr uint64_t kReadByGroups = kValid | (kManyGroups << 32);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

// Lock granule q of buffer b; returns its state without kLocked. Fibers never switch inside
// the checker, so a holder is always a running worker and the wait is short.
inline uint8_t lock_granule(int b, uint64_t q) {
  std::atomic<uint8_t>& st = g_launch.dev_state[b][q];
  uint8_t s = st.load(std::memory_order_relaxed);
  for (;;) {
    if (!(s & kLocked) && st.compare_exchange_weak(s, uint8_t(s | kLocked), std::memory_order_acquire,
                                                   std::memory_order_relaxed))
      return s;
    if (s & kLocked) {
      cpu_relax();
      s = st.load(std::memory_order_relaxed);
    }
  }
}

inline void unlock_granule(int b, uint64_t q, uint8_t s) {
  g_launch.dev_state[b][q].store(uint8_t(s & ~kLocked), std::memory_order_release);
}

// Bytes of granule q that lie in buffer b (the last granule may be short).
inline uint64_t granule_bytes(int b, uint64_t q) {
  return std::min<uint64_t>(kGranule, g_launch.job->buffers[b].size - q * kGranule);
}

// Give granule q per-byte words (under its lock).
void split_granule(int b, uint64_t q, uint8_t* s) {
  if (*s & kSplit) return;
  const DevGranule& G = g_launch.dev_granule[b][q];
  if (!(*s & kWords)) {
    *s |= kSplit;
    return;
  }
  const uint64_t W = G.writer.load(std::memory_order_relaxed), R = G.reader.load(std::memory_order_relaxed);
  // The per-byte words start zero: copy only a word that was set, so that the shadow of a
  // buffer only read (or only written) keeps its untouched half as unmapped zero pages.
  for (uint64_t i = q * kGranule, end = i + granule_bytes(b, q); i < end; ++i) {
    if (W) g_launch.dev_writer[b][i].store(W, std::memory_order_relaxed);
    if (R) g_launch.dev_reader[b][i].store(R, std::memory_order_relaxed);
  }
  *s |= kSplit;
}

// Does `me` (thread t of group g in epoch e) writing / reading conflict with shadow words W, R?
inline bool write_conflicts(uint64_t W, uint64_t g, uint32_t t, uint32_t e) {
  return (W & kValid) && (dev_group(W) != g || (dev_thread(W) != t && dev_epoch(W) == (e & 0x1FFFFF)));
}
inline bool read_conflicts(uint64_t R, uint64_t g, uint32_t t, uint32_t e) {
  return (R & kValid) && (dev_group(R) != g ||
                          ((dev_thread(R) != t || (R & kManyThreads)) && dev_epoch(R) == (e & 0x1FFFFF)));
}

// The reader word after thread t of group g reads in epoch e.
inline uint64_t next_reader(uint64_t R, uint64_t me, uint64_t g, uint32_t t, uint32_t e) {
  if (!(R & kValid) || (dev_group(R) == g && dev_epoch(R) != (e & 0x1FFFFF))) return me;
  if (dev_group(R) != g) return kReadByGroups;
  if (dev_thread(R) != t) return R | kManyThreads;
  return R;
}

// The per-byte rule on bytes [lo, hi) of a split granule (under its lock, or for a plain
// read without it: split_read). Returns true
// when it reported a race (the access stops there, as the hardware would not, but one
// finding per access is what the report counts).
bool bytes_access(Worker* w, int b, uint64_t lo, uint64_t hi, bool write, bool atomics, uintptr_t pc) {
  const uint32_t t = w->current->tid, e = w->dev_epoch;
  const uint64_t me = encode_dev(w->group, t, e);
  const uint64_t g = w->group & kManyGroups;
  for (uint64_t i = lo; i < hi; ++i) {
    std::atomic<uint64_t>& W = g_launch.dev_writer[b][i];
    std::atomic<uint64_t>& R = g_launch.dev_reader[b][i];
    if (atomics) {
      const uint64_t A = g_launch.dev_atomic[b][i].load(std::memory_order_relaxed);
      if (plain_conflicts_atomic(A, write, g, t, e)) {
        atomic_race(w, write ? "plain write" : "plain read", b, i, A, pc);
        return true;
      }
    }
    const uint64_t old = W.load(std::memory_order_relaxed);
    if (write) W.store(me, std::memory_order_relaxed);
    if (write_conflicts(old, g, t, e)) {
      device_race(w, write, b, i, old, true, pc);
      return true;
    }
    const uint64_t r = R.load(std::memory_order_relaxed);
    if (write) {
      if (read_conflicts(r, g, t, e)) {
        device_race(w, true, b, i, r, false, pc);
        return true;
      }
    } else {
      const uint64_t next = next_reader(r, me, g, t, e);
      if (next != r) R.store(next, std::memory_order_relaxed);
    }
  }
  return false;
}

// Have bytes [lo, hi) (per-byte words) been read by several groups and written by none?
bool bytes_read_shared(int b, uint64_t lo, uint64_t hi) {
  for (uint64_t i = lo; i < hi; ++i)
    if (g_launch.dev_reader[b][i].load(std::memory_order_relaxed) != kReadByGroups ||
        (g_launch.dev_writer[b][i].load(std::memory_order_relaxed) & kValid))
      return false;
  return true;
}

// Has every byte of granule q been read by several groups and written by none?
bool granule_read_shared(int b, uint64_t q, uint8_t s) {
  if (!(s & kSplit)) {
    const DevGranule& G = g_launch.dev_granule[b][q];
    return (s & kWords) && G.reader.load(std::memory_order_relaxed) == kReadByGroups &&
           !(G.writer.load(std::memory_order_relaxed) & kValid);
  }
  return bytes_read_shared(b, q * kGranule, q * kGranule + granule_bytes(b, q));
}

// Bytes [lo, hi) of granule q (under its lock, state *s). Returns true on a reported race.
bool granule_access(Worker* w, int b, uint64_t q, uint64_t lo, uint64_t hi, bool write, bool atomics,
                    uintptr_t pc, uint8_t* s) {
  const bool whole = lo == q * kGranule && hi == lo + granule_bytes(b, q);
  bool raced = false;
  if (!(*s & kSplit) && whole && !atomics) {
    DevGranule& G = g_launch.dev_granule[b][q];
    const uint32_t t = w->current->tid, e = w->dev_epoch;
    const uint64_t me = encode_dev(w->group, t, e);
    const uint64_t g = w->group & kManyGroups;
    const bool words = *s & kWords;
    const uint64_t W = words ? G.writer.load(std::memory_order_relaxed) : 0;
    const uint64_t R = words ? G.reader.load(std::memory_order_relaxed) : 0;
    if (write_conflicts(W, g, t, e) || (write && read_conflicts(R, g, t, e))) {
      split_granule(b, q, s);  // replay on bytes: the report and the shadow of the byte rule
      raced = bytes_access(w, b, lo, hi, write, false, pc);
    } else if (write) {
      G.writer.store(me, std::memory_order_relaxed);
      *s |= kWords;
    } else {
      const uint64_t next = next_reader(R, me, g, t, e);
      if (next != R) {
        G.reader.store(next, std::memory_order_relaxed);
        *s |= kWords;
      }
    }
  } else {
    split_granule(b, q, s);
    raced = bytes_access(w, b, lo, hi, write, atomics, pc);
  }
  if (write)
    *s &= ~kShared;
  else if (!atomics && !(*s & kShared) && granule_read_shared(b, q, *s))
    *s |= kShared;
  return raced;
}

// A plain read of bytes [lo, hi) of a split granule, without its lock: scalar code reads
// each granule in parts, and a locked operation per read access would cost more than the
// rest of the check. Writers still take the lock, so two writes always meet; a read and a
// write of one byte by two workers at the same instant can miss each other (the reader
// loads the writer word before the write stores it, the writer the reader word before the
// read stores it): a window of a few instructions, which the other bytes and accesses of a
// racy kernel almost never all fall into. Marking the granule read-shared takes the lock.
bool split_read(Worker* w, int b, uint64_t q, uint64_t lo, uint64_t hi, bool atomics, uintptr_t pc) {
  if (bytes_access(w, b, lo, hi, false, atomics, pc)) return true;
  if (atomics || !bytes_read_shared(b, lo, hi)) return false;  // the lock only when it may
  uint8_t s = lock_granule(b, q);
  if (!(s & kShared) && granule_read_shared(b, q, s)) s |= kShared;
  unlock_granule(b, q, s);
  return false;
}

// Out of line, as tg_access: the hooks' common path (an address outside device and
// threadgroup memory: the fiber's own stack) stays a few instructions with no frame.
__attribute__((noinline)) void device_access(Worker* w, uintptr_t a, unsigned n, bool write, uintptr_t pc) {
  const uint32_t checks = g_launch.job->checks;
  int b = find_buffer(a);
  if (b < 0 || a + n > reinterpret_cast<uintptr_t>(g_launch.buffers[b]) + g_launch.job->buffers[b].size) {
    if (checks & kCheckBounds) {
      int64_t off = 0;
      int nb = b >= 0 ? b : nearest_buffer(a, &off);
      if (b >= 0) off = int64_t(a - reinterpret_cast<uintptr_t>(g_launch.buffers[b]));
      add_finding(w, make_finding(w, kBounds, true, nb, uint64_t(off), pc,
                                  format("%u-byte %s at byte offset %" PRId64
                                         " of buffer %d, which holds %" PRIu64 " bytes",
                                         n, write ? "write" : "read", off, nb,
                                         g_launch.job->buffers[nb].size)));
    }
    return;
  }
  uint64_t off = a - reinterpret_cast<uintptr_t>(g_launch.buffers[b]);
  (write ? w->dev_written : w->dev_read)[b] += n;
  ++(write ? w->dev_stores : w->dev_loads);
  uint8_t* touched = w->touched[b] + off;
  const uint8_t bit = write ? 2 : 1;
  for (unsigned i = 0; i < n; ++i) touched[i] |= bit;
  if (!(checks & kCheckRaces) || n == 0) return;

  const bool atomics = g_launch.any_device_atomic.load(std::memory_order_relaxed);
  std::atomic<uint8_t>* state = g_launch.dev_state[b];
  const uint64_t first_granule = off / kGranule, last_granule = (off + n - 1) / kGranule;
  if (!write && !atomics) {
    bool all_shared = true;
    for (uint64_t q = first_granule; q <= last_granule && all_shared; ++q)
      all_shared = (state[q].load(std::memory_order_relaxed) & kShared) != 0;
    if (all_shared) return;
  }
  for (uint64_t q = first_granule; q <= last_granule; ++q) {
    const uint64_t lo = std::max(off, q * kGranule), hi = std::min(off + n, (q + 1) * kGranule);
    if (!write && (state[q].load(std::memory_order_acquire) & kSplit)) {
      if (split_read(w, b, q, lo, hi, atomics, pc)) break;
      continue;
    }
    uint8_t s = lock_granule(b, q);
    const bool raced = granule_access(w, b, q, lo, hi, write, atomics, pc, &s);
    unlock_granule(b, q, s);
    if (raced) break;
  }
}

// ---------------------------------------------------------------------------------------
// Threadgroup memory checks

inline bool same_simdgroup(uint32_t a, uint32_t b) { return a / kSimdWidth == b / kSimdWidth; }

// The reports of tg_access, out of line so that its common path keeps a small frame.
enum TgConflict { kTgAtomic, kTgWrite, kTgReads };

__attribute__((noinline, cold)) void tg_bounds(Worker* w, uint64_t base, unsigned n, bool write,
                                               uintptr_t pc) {
  // Name the variable just below the address: its red zone was hit.
  int near = -1;
  const uint32_t count = g_launch.slot_count.load();
  for (uint32_t s = 0; s < count; ++s) {
    const uint32_t o = g_launch.slot_offset[s];
    if (o != UINT32_MAX && o <= base && (near < 0 || o > g_launch.slot_offset[near]))
      near = int(s);
  }
  if (near < 0) near = 0;
  int64_t off = int64_t(base) - int64_t(count == 0 ? 0 : g_launch.slot_offset[near].load());
  add_finding(w, make_finding(w, kBounds, false, near, uint64_t(off), pc,
                              format("%u-byte %s at byte offset %" PRId64
                                     " of threadgroup variable #%d, which holds %u bytes",
                                     n, write ? "write" : "read", off, near,
                                     count == 0 ? 0u : g_launch.slot_size[near].load())));
}

__attribute__((noinline, cold)) void tg_uninit(Worker* w, int slot, uint64_t var_off, unsigned n,
                                               uintptr_t pc) {
  add_finding(w, make_finding(w, kUninit, false, slot, var_off, pc,
                              format("%u-byte read of threadgroup memory that no thread "
                                     "has written in this threadgroup", n)));
}

__attribute__((noinline, cold)) void tg_race(Worker* w, TgConflict what, const TgShadow& sh,
                                             int slot, uint64_t var_off, bool write, uintptr_t pc) {
  Finding r = make_finding(w, kRace, false, slot, var_off, pc, "");
  if (what == kTgAtomic) {
    r.detail = format("plain %s conflicts with an atomic %s by %s in the same barrier interval "
                      "(atomics order only atomics)", write ? "write" : "read",
                      sh.atomic_update ? "update" : "load",
                      sh.atomic_many ? "other threads" : "another thread");
    r.other_thread = sh.atomic_many ? -1 : sh.atomic_thread;
  } else if (what == kTgWrite) {
    r.detail = format("%s conflicts with a write by thread %u in the same barrier interval",
                      write ? "write" : "read", sh.writer);
    r.other_thread = sh.writer;
  } else {
    r.detail = sh.many_readers
                   ? format("write conflicts with reads by other threads in the same barrier interval")
                   : format("write conflicts with a read by thread %u in the same barrier interval",
                            sh.reader);
    r.other_thread = sh.many_readers ? -1 : sh.reader;
  }
  add_finding(w, std::move(r));
}

// The shadow cell bytes that describe a byte's state (the atomic fields change only with
// atomics, which compare them per byte): two cells agree when these do.
constexpr size_t kCellBytes = offsetof(TgShadow, many_readers) + 1;
static_assert(kCellBytes > 16 && kCellBytes <= 24, "same_cell compares three 8-byte words");
inline uint64_t cell_word(const TgShadow& c, size_t at) {
  uint64_t v;
  std::memcpy(&v, reinterpret_cast<const unsigned char*>(&c) + at, 8);
  return v;
}
inline bool same_cell(const TgShadow& a, const TgShadow& b) {
  return cell_word(a, 0) == cell_word(b, 0) && cell_word(a, 8) == cell_word(b, 8) &&
         cell_word(a, kCellBytes - 8) == cell_word(b, kCellBytes - 8);
}

// A cell's state bytes as words (bytes 0-7, 8-15, 16-17), for tg_access_run.
struct CellState {
  uint64_t lo, mid;
  uint16_t flags;
  bool operator==(const CellState& o) const { return lo == o.lo && mid == o.mid && flags == o.flags; }
};
static_assert(kCellBytes == 18 && offsetof(TgShadow, initialized) == 16, "CellState's layout");
inline CellState cell_state(const TgShadow& c) {
  CellState r;
  const unsigned char* p = reinterpret_cast<const unsigned char*>(&c);
  std::memcpy(&r.lo, p, 8);
  std::memcpy(&r.mid, p + 8, 8);
  std::memcpy(&r.flags, p + 16, 2);
  return r;
}
inline void set_cell_state(TgShadow& c, const CellState& r) {
  unsigned char* p = reinterpret_cast<unsigned char*>(&c);
  std::memcpy(p, &r.lo, 8);
  std::memcpy(p + 8, &r.mid, 8);
  std::memcpy(p + 16, &r.flags, 2);
}

// The threadgroup access a thread makes in the current intervals, as the fast paths judge
// it (tg_access, tg_access_run): whether tg_access would find nothing in a byte of state `sh` (atomic fields aside),
// and that byte's new state.
struct TgRunner {
  uint32_t checks, e;
  uint16_t t, s;
  bool write;

  bool ordered(uint16_t other, uint16_t other_sepoch) const {
    return same_simdgroup(other, t) && other_sepoch != s;
  }
  bool clean(const TgShadow& sh) const {
    if (!write && !sh.initialized && (checks & kCheckUninit)) return false;
    if (!(checks & kCheckRaces)) return true;
    if (sh.write_epoch == e && sh.writer != t && !ordered(sh.writer, sh.write_sepoch)) return false;
    return !(write && sh.read_epoch == e && (sh.many_readers || sh.reader != t) &&
             !(!sh.many_readers && ordered(sh.reader, sh.read_sepoch)));
  }
  TgShadow update(TgShadow u) const {
    if (write) {
      u.write_epoch = e;
      u.writer = t;
      u.write_sepoch = s;
      u.initialized = 1;
    } else if (u.read_epoch != e) {
      u.read_epoch = e;
      u.reader = t;
      u.read_sepoch = s;
      u.many_readers = 0;
    } else if (u.reader != t) {
      u.many_readers = 1;
    }
    return u;
  }
};

// An access of n bytes that shares one state (no atomic access in this interval among them)
// under which nothing is found: its update made, true; otherwise false, nothing done.
inline bool tg_clean_access(const TgRunner& run, TgShadow* c, unsigned n) {
  const CellState first = cell_state(c[0]);
  for (unsigned k = 0; k < n; ++k)
    if (c[k].atomic_epoch == run.e || !(cell_state(c[k]) == first)) return false;
  if (!run.clean(c[0])) return false;
  const CellState post = cell_state(run.update(c[0]));
  for (unsigned k = 0; k < n; ++k) set_cell_state(c[k], post);
  return true;
}

__attribute__((noinline)) void tg_access(Worker* w, uintptr_t a, unsigned n, bool write, uintptr_t pc) {
  const uint32_t checks = g_launch.job->checks;
  Fiber* f = w->current;
  const uint64_t base = a - w->arena_lo;
  int slot = base < w->arena_owner.size() ? w->arena_owner[base] : -1;
  bool inside = slot >= 0 && base + n <= g_launch.slot_offset[slot] + g_launch.slot_size[slot];
  if (!inside) {
    if (checks & kCheckBounds) tg_bounds(w, base, n, write, pc);
    return;
  }
  (write ? w->tg_written : w->tg_read) += n;
  ++(write ? w->tg_stores : w->tg_loads);
  if (!(checks & (kCheckRaces | kCheckUninit))) return;  // the shadow serves only these
  const TgRunner run{checks, w->tg_epoch, uint16_t(f->tid), uint16_t(w->simd_epoch[f->simdgroup]),
                     write};
  if (tg_clean_access(run, &w->arena_shadow[base], n)) return;  // the common case
  const uint32_t e = w->tg_epoch;
  const uint16_t t = uint16_t(f->tid);
  const uint64_t var_off = base - g_launch.slot_offset[slot];
  bool reported_uninit = false;
  // Bytes of one access usually share one shadow state (a float written and read whole):
  // then the first byte's checks stand for every byte's, and all get the same update.
  TgShadow* cells = &w->arena_shadow[base];
  bool same_state = n > 1;
  for (unsigned i = 1; i < n && same_state; ++i) same_state = same_cell(cells[i], cells[0]);
  const unsigned visit = same_state ? 1 : n;
  for (unsigned i = 0; i < visit; ++i) {
    TgShadow& sh = cells[i];
    if (!write && !sh.initialized && (checks & kCheckUninit) && !reported_uninit) {
      reported_uninit = true;  // once per access, not once per byte
      tg_uninit(w, slot, var_off + i, n, pc);
    }
    if (checks & kCheckRaces) {
      if (sh.atomic_epoch == e && (sh.atomic_many || sh.atomic_thread != t) &&
          (write || sh.atomic_update)) {
        tg_race(w, kTgAtomic, sh, slot, var_off + i, write, pc);
        break;
      }
      if (sh.write_epoch == e && sh.writer != t && !run.ordered(sh.writer, sh.write_sepoch)) {
        tg_race(w, kTgWrite, sh, slot, var_off + i, write, pc);
        break;
      }
      if (write && sh.read_epoch == e && (sh.many_readers || sh.reader != t) &&
          !(!sh.many_readers && run.ordered(sh.reader, sh.read_sepoch))) {
        tg_race(w, kTgReads, sh, slot, var_off + i, write, pc);
        break;
      }
    }
    // The new state: of this byte, or of every byte when they share one.
    for (unsigned j = same_state ? 0 : i; j < (same_state ? n : i + 1); ++j)
      cells[j] = run.update(cells[j]);
  }
}

// The accesses of a run (N bytes each; N = 0: n bytes) that need no report, handled in
// place; the others go to tg_access. The outcome for a byte depends on its state alone (the
// run's thread, intervals and checks are fixed): `pre` is the last state judged clean and
// `post` its update. Returns how many accesses it handled.
template <unsigned N>
uint64_t tg_run(Worker* w, const TgRunner& run, TgShadow* cells, uintptr_t a, unsigned n,
                unsigned count, uintptr_t pc) {
  if (N) n = N;
  CellState pre{~uint64_t(0), ~uint64_t(0), 0xFFFF}, post{};  // no state has all bits set
  uint64_t handled = 0;
  for (unsigned i = 0; i < count; ++i) {
    TgShadow* c = cells + uint64_t(i) * n;
    const CellState first = cell_state(c[0]);
    bool fast = c[0].atomic_epoch != run.e;
    if (fast && !(first == pre)) {
      fast = run.clean(c[0]);
      if (fast) {
        pre = first;
        post = cell_state(run.update(c[0]));
      }
    }
    for (unsigned k = 1; k < n && fast; ++k)
      fast = cell_state(c[k]) == first && c[k].atomic_epoch != run.e;
    if (!fast) {
      tg_access(w, a + uint64_t(i) * n, n, run.write, pc);
      continue;
    }
    // The state bytes only: the atomic fields past kCellBytes stay per byte.
    for (unsigned k = 0; k < n; ++k) set_cell_state(c[k], post);
    ++handled;
  }
  return handled;
}

// `count` accesses of `n` bytes each at a, a + n, ... in that order (a row of a simdgroup
// matrix load or store, hooks.cpp): what `count` tg_access calls would do, without a call
// per access where nothing is found. When the run lies in one variable, an access whose
// bytes share one shadow state (no atomic access in this interval among them) under which
// nothing is found gets that state's update here; any other access is left to tg_access,
// which reports what it finds. Accesses touch disjoint bytes, so handling some here and
// some there in order changes nothing.
void tg_access_run(Worker* w, uintptr_t a, unsigned n, unsigned count, bool write, uintptr_t pc) {
  const uint32_t checks = g_launch.job->checks;
  const uint64_t base = a - w->arena_lo, bytes = uint64_t(n) * count;
  const int slot = base < w->arena_owner.size() ? w->arena_owner[base] : -1;
  const bool inside = slot >= 0 && base + bytes <= g_launch.slot_offset[slot] + g_launch.slot_size[slot];
  if (!inside || !(checks & (kCheckRaces | kCheckUninit))) {
    if (inside) {
      (write ? w->tg_written : w->tg_read) += bytes;
      (write ? w->tg_stores : w->tg_loads) += count;
    } else {
      for (unsigned i = 0; i < count; ++i) tg_access(w, a + uint64_t(i) * n, n, write, pc);
    }
    return;
  }
  const TgRunner run{checks, w->tg_epoch, uint16_t(w->current->tid),
                     uint16_t(w->simd_epoch[w->current->simdgroup]), write};
  TgShadow* cells = &w->arena_shadow[base];
  const uint64_t handled =
      n == 2 ? tg_run<2>(w, run, cells, a, n, count, pc)
      : n == 4 ? tg_run<4>(w, run, cells, a, n, count, pc)
               : tg_run<0>(w, run, cells, a, n, count, pc);
  (write ? w->tg_written : w->tg_read) += handled * n;
  (write ? w->tg_stores : w->tg_loads) += handled;
}

// Atomics (mt_atomic.h): counted, bounds-checked, and checked against plain accesses. An
// atomic never races with another atomic; it races with a plain access to the same bytes by
// another thread in the same barrier interval (or by another threadgroup): an update with
// plain reads and writes, a load with plain writes. kind: 0 load, 1 read-modify-write, 2 store.
void device_atomic(Worker* w, uintptr_t a, unsigned n, int kind, uintptr_t pc) {
  const uint32_t checks = g_launch.job->checks;
  int b = find_buffer(a);
  if (b < 0 || a + n > reinterpret_cast<uintptr_t>(g_launch.buffers[b]) + g_launch.job->buffers[b].size) {
    if (checks & kCheckBounds) {
      int64_t off = 0;
      int nb = b >= 0 ? b : nearest_buffer(a, &off);
      if (b >= 0) off = int64_t(a - reinterpret_cast<uintptr_t>(g_launch.buffers[b]));
      add_finding(w, make_finding(w, kBounds, true, nb, uint64_t(off), pc,
                                  format("%u-byte atomic %s at byte offset %" PRId64 " of buffer %d, "
                                         "which holds %" PRIu64 " bytes", n,
                                         kind ? "update" : "load", off, nb,
                                         g_launch.job->buffers[nb].size)));
    }
    return;
  }
  if (!(checks & kCheckRaces)) return;
  if (!g_launch.any_device_atomic.load(std::memory_order_relaxed))
    g_launch.any_device_atomic.store(true, std::memory_order_relaxed);
  const uint64_t off = a - reinterpret_cast<uintptr_t>(g_launch.buffers[b]);
  const uint32_t t = w->current->tid, e = w->dev_epoch;
  const uint64_t g = w->group & kManyGroups;
  const bool update = kind != 0;
  const uint64_t me = encode_dev(w->group, t, e & 0xFFFFF) | (update ? kAtomicUpdate : 0);
  // The plain shadow of these bytes is read per byte, under each granule's lock in turn.
  const uint64_t first_granule = off / kGranule, last_granule = (off + n - 1) / kGranule;
  bool raced = false;
  for (uint64_t q = first_granule; q <= last_granule && !raced; ++q) {
    uint8_t st = lock_granule(b, q);
    split_granule(b, q, &st);
    const uint64_t lo = std::max(off, q * kGranule), hi = std::min(off + n, (q + 1) * kGranule);
    for (uint64_t i = lo; i < hi; ++i) {
      const uint64_t W = g_launch.dev_writer[b][i].load(std::memory_order_relaxed);
      const uint64_t R = g_launch.dev_reader[b][i].load(std::memory_order_relaxed);
      const bool w_conflict = write_conflicts(W, g, t, e);
      if (w_conflict || (update && read_conflicts(R, g, t, e))) {
        bool cross;
        Finding f = device_conflict(w, b, i, w_conflict ? W : R, pc, &cross);
        f.detail = format("atomic %s conflicts with a plain %s by %s (atomics order only atomics)",
                          update ? "update" : "load", w_conflict ? "write" : "read",
                          cross ? "another threadgroup" : "another thread of the threadgroup in the "
                          "same barrier interval");
        add_finding(w, std::move(f));
        raced = true;
        break;
      }
      std::atomic<uint64_t>& A = g_launch.dev_atomic[b][i];
      uint64_t old = A.load(std::memory_order_relaxed), next;
      do {
        if (!(old & kValid) || (dev_group(old) == g && atomic_epoch(old) != (e & 0xFFFFF)))
          next = me;
        else if (dev_group(old) != g)
          next = kValid | (kManyGroups << 32) | ((old | me) & kAtomicUpdate);
        else if (dev_thread(old) != t)
          next = old | kManyThreads | (me & kAtomicUpdate);
        else
          next = old | (me & kAtomicUpdate);
      } while (next != old && !A.compare_exchange_weak(old, next, std::memory_order_relaxed));
    }
    unlock_granule(b, q, st);
  }
}

void tg_atomic(Worker* w, uintptr_t a, unsigned n, int kind, uintptr_t pc) {
  const uint32_t checks = g_launch.job->checks;
  const uint64_t base = a - w->arena_lo;
  int slot = base < w->arena_owner.size() ? w->arena_owner[base] : -1;
  if (slot < 0 || base + n > g_launch.slot_offset[slot] + g_launch.slot_size[slot]) {
    if (checks & kCheckBounds)
      add_finding(w, make_finding(w, kBounds, false, slot < 0 ? 0 : slot, base, pc,
                                  format("%u-byte atomic %s outside every threadgroup variable",
                                         n, kind ? "update" : "load")));
    return;
  }
  const uint32_t e = w->tg_epoch;
  const uint16_t t = uint16_t(w->current->tid);
  const uint64_t var_off = base - g_launch.slot_offset[slot];
  for (unsigned i = 0; i < n; ++i) {
    TgShadow& sh = w->arena_shadow[base + i];
    if (kind != 2 && !sh.initialized && (checks & kCheckUninit)) {
      add_finding(w, make_finding(w, kUninit, false, slot, var_off + i, pc,
                                  format("%u-byte atomic %s of threadgroup memory that no thread "
                                         "has written in this threadgroup", n,
                                         kind ? "update" : "load")));
      break;
    }
    if (checks & kCheckRaces) {
      bool w_conflict = sh.write_epoch == e && sh.writer != t;
      bool r_conflict = kind != 0 && sh.read_epoch == e && (sh.many_readers || sh.reader != t);
      if (w_conflict || r_conflict) {
        Finding r = make_finding(w, kRace, false, slot, var_off + i, pc,
                                 format("atomic %s conflicts with a plain %s by %s in the same "
                                        "barrier interval (atomics order only atomics)",
                                        kind ? "update" : "load", w_conflict ? "write" : "read",
                                        !w_conflict && sh.many_readers ? "other threads" : "another thread"));
        r.other_thread = w_conflict ? sh.writer : (sh.many_readers ? -1 : sh.reader);
        add_finding(w, std::move(r));
        break;
      }
    }
    if (sh.atomic_epoch != e) {
      sh.atomic_epoch = e;
      sh.atomic_thread = t;
      sh.atomic_many = 0;
      sh.atomic_update = 0;
    } else if (sh.atomic_thread != t) {
      sh.atomic_many = 1;
    }
    if (kind != 0) sh.atomic_update = 1;
    if (kind != 0) sh.initialized = 1;
  }
}

}  // namespace mt

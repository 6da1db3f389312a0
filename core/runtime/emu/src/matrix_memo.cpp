// matrix_memo.cpp: the memo of simdgroup matrix products (mt_matrix.h).
//
// simdgroup_multiply_accumulate is one operation of the whole simdgroup in MSL, yet every
// lane calls it: the first lane computes the product and stores it here under the tags of
// its operand tiles, and the other lanes of the simdgroup take it from the memo. This is
// a cache of work, not state MSL can observe: a miss recomputes the same result.
//
// Two levels. The product log (runtime.h, ProductLog) holds, per simdgroup, the products
// made since the meeting point its lanes last passed, in order: a lane resumed from the
// same meeting looks at its n-th product's entry and compares keys, with no hashing. Lanes
// that diverged, or products past the log's end, use the set-associative memo keyed by a
// hash of the operands' tags. Either way the product's tag is the same hash of its key.

#include "runtime.h"

using namespace mt;

extern "C" {

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

// The running lane's place in its simdgroup's product log, or null outside a worker.
inline ProductLog* product_log(Worker* w, Fiber** f) {
  if (!w || !w->current) return nullptr;
  if (w->product_log.empty()) {
    w->product_log.resize(g_launch.simdgroups);
    w->product_data.assign(size_t(g_launch.simdgroups) * kProductLogEntries * kMemoTileBytes, 0);
  }
  *f = w->current;
  return &w->product_log[(*f)->simdgroup];
}

inline unsigned char* log_tile(Worker* w, const Fiber* f, uint32_t n) {
  return w->product_data.data() + (size_t(f->simdgroup) * kProductLogEntries + n) * kMemoTileBytes;
}

inline bool same_key(const uint64_t a[4], const uint64_t b[4]) {
  return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}
}  // namespace

__mt_memo_tile __mt_matrix_memo_find(uint64_t k0, uint64_t k1, uint64_t k2, uint64_t k3) {
  const uint64_t key[4] = {k0, k1, k2, k3};
  Worker* w = t_worker;
  Fiber* f = nullptr;
  if (ProductLog* log = product_log(w, &f)) {
    const uint32_t n = f->products;
    if (log->interval == f->interval && n < log->count && same_key(log->entry[n].key, key)) {
      ++f->products;
      return __mt_memo_tile{log_tile(w, f, n), log->entry[n].tag};
    }
    // The first lane since the meeting: no other lane has made this product yet.
    if ((log->interval != f->interval && n == 0) || (log->interval == f->interval && n == log->count))
      return __mt_memo_tile{nullptr, 0};
  }
  return memo_lookup(key, false);  // a miss is followed by __mt_matrix_memo_slot
}

__mt_memo_tile __mt_matrix_memo_slot(uint64_t k0, uint64_t k1, uint64_t k2, uint64_t k3) {
  static thread_local unsigned char scratch[kMemoTileBytes];  // outside a worker: not shared
  const uint64_t key[4] = {k0, k1, k2, k3};
  Worker* w = t_worker;
  Fiber* f = nullptr;
  if (ProductLog* log = product_log(w, &f)) {
    const uint32_t n = f->products++;
    if (log->interval != f->interval) {  // the first product since this lane's meeting
      log->interval = f->interval;
      log->count = 0;
    }
    if (n == log->count && n < kProductLogEntries) {
      ProductLog::Entry& e = log->entry[n];
      std::memcpy(e.key, key, sizeof e.key);
      e.tag = kTagMultiply | (memo_hash(key) >> 2);
      ++log->count;
      return __mt_memo_tile{log_tile(w, f, n), e.tag};
    }
  }
  __mt_memo_tile r = memo_lookup(key, true);
  if (!r.tile) r.tile = scratch;
  return r;
}

}  // extern "C"

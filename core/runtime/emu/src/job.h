// job.h: the job file's header, the ABI shared with core/runtime/emu/job.py.
//
// job.py packs this header with a struct format (HEADER) and the runtime maps the file
// and reads it through JobHeader: the two must agree byte for byte, little-endian, with no
// padding the struct format does not state.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mt {

constexpr char kJobMagic[8] = {'M', 'T', 'J', 'O', 'B', '0', '2', 0};
constexpr uint32_t kMaxBuffers = 31;
constexpr uint32_t kCheckRaces = 1, kCheckUninit = 2, kCheckBounds = 4;
constexpr uint32_t kScheduleForward = 0, kScheduleReverse = 1, kScheduleRandom = 2;

struct JobBuffer {
  uint64_t offset, size;
};
struct JobHeader {
  char magic[8];
  uint32_t grid[3], threadgroup[3];
  uint32_t schedule, checks, workers, nbuffers;
  uint64_t seed;
  uint64_t stack_bytes;
  uint32_t max_findings;
  // The MSL line whose threadgroup_barrier calls this launch skips (0: none): the barrier
  // check (harness/check/barriers.py) runs one build with each barrier switched off in turn.
  uint32_t barrier_off;
  // The grid in threads where it is not whole threadgroups (Metal's dispatchThreads with
  // non-uniform threadgroups): grid[d] = ceil(grid_threads[d] / threadgroup[d]) and the
  // last threadgroup of a dimension holds the rest. All 0: every threadgroup is whole.
  uint32_t grid_threads[3];
  uint32_t reserved;
  JobBuffer buffers[kMaxBuffers];
};

// The layout job.py packs (its FIELDS); suites/emu/test_job_abi.py checks the same offsets
// against job.py's, so a field changed on one side only fails there or here.
static_assert(sizeof(JobBuffer) == 16, "JobBuffer: (offset, size), two uint64");
static_assert(offsetof(JobHeader, magic) == 0 && offsetof(JobHeader, grid) == 8 &&
                  offsetof(JobHeader, threadgroup) == 20 && offsetof(JobHeader, schedule) == 32 &&
                  offsetof(JobHeader, checks) == 36 && offsetof(JobHeader, workers) == 40 &&
                  offsetof(JobHeader, nbuffers) == 44 && offsetof(JobHeader, seed) == 48 &&
                  offsetof(JobHeader, stack_bytes) == 56 && offsetof(JobHeader, max_findings) == 64 &&
                  offsetof(JobHeader, barrier_off) == 68 &&
                  offsetof(JobHeader, grid_threads) == 72 && offsetof(JobHeader, reserved) == 84 &&
                  offsetof(JobHeader, buffers) == 88,
              "JobHeader's field offsets differ from core/runtime/emu/job.py's FIELDS");
static_assert(sizeof(JobHeader) == 88 + 16 * kMaxBuffers && sizeof(JobHeader) == 584,
              "JobHeader's size differs from core/runtime/emu/job.py's HEADER.size");

}  // namespace mt

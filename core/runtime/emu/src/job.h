// job.h: the job file's header, the ABI shared with core/runtime/emu/job.py.
//
// job.py packs this header with a struct format (HEADER) and the runtime maps the file
// and reads it through JobHeader: the two must agree byte for byte, little-endian, with no
// padding the struct format does not state.
#pragma once

#include <cstdint>

namespace mt {

constexpr char kJobMagic[8] = {'M', 'T', 'J', 'O', 'B', '0', '1', 0};
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
  uint32_t max_findings, reserved;
  JobBuffer buffers[kMaxBuffers];
};

}  // namespace mt

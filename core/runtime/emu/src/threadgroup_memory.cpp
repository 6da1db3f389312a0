// threadgroup_memory.cpp: where threadgroup variables live.
//
// MSL gives each threadgroup its own threadgroup memory, at most
// MT_THREADGROUP_MEMORY_BYTES for all its variables (more is a launch error, as Metal
// refuses the pipeline). The layout of the variables is decided once per launch, on first
// use, and shared by every worker; each worker has its own arena with red zones between
// variables, poisoned at the start of every threadgroup (its contents are unspecified in
// MSL).

#include "runtime.h"

using namespace mt;

extern "C" {

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

}  // extern "C"

// mt_sync.h — MSL synchronization: mem_flags, threadgroup_barrier, simdgroup_barrier.
//
// MSL semantics followed (Metal Shading Language Specification, "Threadgroup and SIMD-group
// synchronization functions"): threadgroup_barrier must be reached by every thread of the
// threadgroup; it orders the memory named by its flags (mem_threadgroup, mem_device) among
// those threads. simdgroup_barrier does the same for the threads of one simdgroup.
// In the emulator both are meeting points of the fiber scheduler; the race checker opens a
// new barrier interval for the address spaces named by the flags.
#pragma once
#include "mt_runtime.h"

#define __MT_INLINE inline __attribute__((always_inline))
// A function of the shim that touches only thread-private values and the runtime's tables,
// never device or threadgroup memory: compiled without the checker's instrumentation (its
// copies and reads would each be a hook call with nothing to check) and called, not
// inlined, from the instrumented kernel (LLVM does not inline across differing sanitizer
// attributes; noinline says so for unchecked builds too). Inside one, __MT_CALL_SITE is the
// kernel's call site, for findings.
#define __MT_UNCHECKED inline __attribute__((no_sanitize("thread"), noinline))
#define __MT_CALL_SITE __builtin_return_address(0)

namespace metal {

enum class mem_flags : unsigned {
  mem_none = __MT_MEM_NONE,
  mem_device = __MT_MEM_DEVICE,
  mem_threadgroup = __MT_MEM_THREADGROUP,
  mem_texture = __MT_MEM_TEXTURE,
  mem_threadgroup_imageblock = 8,
};
__MT_INLINE constexpr mem_flags operator|(mem_flags a, mem_flags b) {
  return mem_flags(unsigned(a) | unsigned(b));
}

__MT_INLINE void threadgroup_barrier(__mt_site at, mem_flags flags) {
  __mt_threadgroup_barrier(unsigned(flags), at);
}
__MT_INLINE void simdgroup_barrier(__mt_site at, mem_flags flags) {
  __mt_simdgroup_barrier(unsigned(flags), at);
}

}  // namespace metal

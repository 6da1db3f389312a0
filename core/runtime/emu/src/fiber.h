// fiber.h — a hand-written context switch for the emulator's fibers.
//
// Each emulated Metal thread runs on its own stack; the scheduler switches between them at
// meeting points (barriers, simd collectives). glibc's swapcontext costs ~230 ns because it
// saves the signal mask with a system call; this switch saves only the callee-saved
// registers of the platform ABI and the floating-point control state, ~7 ns.
//
//   mt_fiber_switch(&from_sp, to_sp): saves the caller's context on its stack, stores the
//   stack pointer in from_sp and resumes the context saved at to_sp.
//   mt_fiber_prepare(stack_top, fn, arg): lays out a fresh stack so that switching to the
//   returned sp calls fn(arg). fn must never return (it switches away for the last time).
//
// x86-64 System V: tested here. arm64 (AAPCS64): tested on Linux under qemu-user
// (suites/emu/test_fiber.py under `tox -e arm64`); not yet run on macOS. FPCR is not part of
// the arm64 context (kernels never change it), MXCSR and the x87 control word are on x86-64.
#pragma once
#include <cstdint>
#include <cstring>

extern "C" void mt_fiber_switch(void** from_sp, void* to_sp);
extern "C" void mt_fiber_trampoline();

#if defined(__x86_64__)

#if defined(__APPLE__)
#define MT_ASM_SYM(name) "_" #name
#define MT_ASM_TYPE(name) ""
#else
#define MT_ASM_SYM(name) #name
#define MT_ASM_TYPE(name) ".type " #name ", @function\n"
#endif

__asm__(
    ".text\n"
    ".globl " MT_ASM_SYM(mt_fiber_switch) "\n" MT_ASM_TYPE(mt_fiber_switch)
    MT_ASM_SYM(mt_fiber_switch) ":\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
    "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
    "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".globl " MT_ASM_SYM(mt_fiber_trampoline) "\n" MT_ASM_TYPE(mt_fiber_trampoline)
    MT_ASM_SYM(mt_fiber_trampoline) ":\n"
    "  movq %r12, %rdi\n  callq *%r13\n  ud2\n");

// Stack, from the returned sp upward: fp control, r15, r14, r13 (fn), r12 (arg), rbx, rbp,
// return address (trampoline). After `ret` the sp is 16-byte aligned, so the trampoline's
// call leaves the callee the alignment the ABI promises.
inline void* mt_fiber_prepare(void* stack_top, void (*fn)(void*), void* arg) {
  uintptr_t top = reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top) - 2;  // 16 bytes of headroom, aligned
  *--sp = reinterpret_cast<uint64_t>(&mt_fiber_trampoline);
  *--sp = 0;                                   // rbp
  *--sp = 0;                                   // rbx
  *--sp = reinterpret_cast<uint64_t>(arg);     // r12
  *--sp = reinterpret_cast<uint64_t>(fn);      // r13
  *--sp = 0;                                   // r14
  *--sp = 0;                                   // r15
  uint32_t fp[2] = {0x1F80u, 0x037Fu};         // default MXCSR and x87 control word
  --sp;
  std::memcpy(sp, fp, sizeof fp);
  return sp;
}

#elif defined(__aarch64__)

#if defined(__APPLE__)
#define MT_ASM_SYM(name) "_" #name
#else
#define MT_ASM_SYM(name) #name
#endif

// Tested on arm64 Linux under qemu-user; the same code serves macOS (symbols with "_").
__asm__(
    ".text\n"
    ".globl " MT_ASM_SYM(mt_fiber_switch) "\n"
    ".p2align 2\n"
    MT_ASM_SYM(mt_fiber_switch) ":\n"
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x2, sp\n  str x2, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n  ret\n"
    ".globl " MT_ASM_SYM(mt_fiber_trampoline) "\n"
    ".p2align 2\n"
    MT_ASM_SYM(mt_fiber_trampoline) ":\n"
    "  mov x0, x19\n  blr x20\n  brk #0\n");

inline void* mt_fiber_prepare(void* stack_top, void (*fn)(void*), void* arg) {
  uintptr_t top = reinterpret_cast<uintptr_t>(stack_top) & ~uintptr_t(15);
  uint64_t* sp = reinterpret_cast<uint64_t*>(top - 160);
  std::memset(sp, 0, 160);
  sp[0] = reinterpret_cast<uint64_t>(arg);                     // x19
  sp[1] = reinterpret_cast<uint64_t>(fn);                      // x20
  sp[11] = reinterpret_cast<uint64_t>(&mt_fiber_trampoline);   // x30
  return sp;
}

#else
#error "metaltile emulator: fibers are implemented for x86-64 and arm64 only"
#endif

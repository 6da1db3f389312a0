// fiber_check.cpp — the emulator's context switch (core/runtime/emu/src/fiber.h) on its own.
//
// Built for the emulator's target (the host, or arm64 under qemu-user: suites/emu/test_fiber.py)
// and run; prints one line per check and exits non-zero if any failed. Checks:
//   - callee-saved integer registers (x86-64: rbx rbp r12-r15; arm64: x19-x28) and, on arm64,
//     the callee-saved floating-point registers d8-d15 survive a switch away and back, on
//     both sides, while the other side fills the same registers with other values;
//   - x86-64: each context keeps its own MXCSR (rounding mode) and x87 control word;
//   - a fresh fiber starts with the stack aligned as the ABI requires (16 bytes; a
//     16-byte vector on its stack), and so does every function it calls;
//   - three fibers interleaved round-robin keep their own locals over many switches.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>

#include "fiber.h"

extern "C" void switch_with_pattern(void** from_sp, void* to_sp, uint64_t seed, uint64_t* out);

#if defined(__x86_64__)
constexpr int kRegs = 6;  // rbx rbp r12 r13 r14 r15
#if defined(__APPLE__)
#define SYM(name) "_" #name
#else
#define SYM(name) #name
#endif
// Fills the callee-saved registers with seed+1.., switches, and stores what they hold when
// this side resumes. Saves and restores its caller's values, as the ABI requires.
__asm__(
    ".text\n.globl " SYM(switch_with_pattern) "\n" SYM(switch_with_pattern) ":\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  pushq %rcx\n"  // out; seven pushes keep the call 16-byte aligned
    "  leaq 1(%rdx), %rbx\n  leaq 2(%rdx), %rbp\n  leaq 3(%rdx), %r12\n"
    "  leaq 4(%rdx), %r13\n  leaq 5(%rdx), %r14\n  leaq 6(%rdx), %r15\n"
    "  call " SYM(mt_fiber_switch) "\n"
    "  popq %rcx\n"
    "  movq %rbx, 0(%rcx)\n  movq %rbp, 8(%rcx)\n  movq %r12, 16(%rcx)\n"
    "  movq %r13, 24(%rcx)\n  movq %r14, 32(%rcx)\n  movq %r15, 40(%rcx)\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n");

static uint32_t get_fp_control() {
  uint32_t mxcsr;
  uint16_t cw;
  __asm__ volatile("stmxcsr %0\n fnstcw %1" : "=m"(mxcsr), "=m"(cw));
  return (mxcsr & 0xFFC0u) << 16 | cw;  // control bits, not the sticky exception flags
}
static void set_fp_control(uint32_t mxcsr, uint16_t cw) {
  __asm__ volatile("ldmxcsr %0\n fldcw %1" : : "m"(mxcsr), "m"(cw));
}
static uintptr_t stack_pointer() {
  uintptr_t sp;
  __asm__ volatile("movq %%rsp, %0" : "=r"(sp));
  return sp;
}
#elif defined(__aarch64__)
constexpr int kRegs = 18;  // x19-x28, d8-d15
#if defined(__APPLE__)
#define SYM(name) "_" #name
#else
#define SYM(name) #name
#endif
__asm__(
    ".text\n.globl " SYM(switch_with_pattern) "\n.p2align 2\n" SYM(switch_with_pattern) ":\n"
    "  sub sp, sp, #176\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n  str x3, [sp, #160]\n"
    "  add x19, x2, #1\n  add x20, x2, #2\n  add x21, x2, #3\n  add x22, x2, #4\n"
    "  add x23, x2, #5\n  add x24, x2, #6\n  add x25, x2, #7\n  add x26, x2, #8\n"
    "  add x27, x2, #9\n  add x28, x2, #10\n"
    "  add x9, x2, #11\n  fmov d8, x9\n  add x9, x2, #12\n  fmov d9, x9\n"
    "  add x9, x2, #13\n  fmov d10, x9\n  add x9, x2, #14\n  fmov d11, x9\n"
    "  add x9, x2, #15\n  fmov d12, x9\n  add x9, x2, #16\n  fmov d13, x9\n"
    "  add x9, x2, #17\n  fmov d14, x9\n  add x9, x2, #18\n  fmov d15, x9\n"
    "  bl " SYM(mt_fiber_switch) "\n"
    "  ldr x9, [sp, #160]\n"
    "  stp x19, x20, [x9, #0]\n  stp x21, x22, [x9, #16]\n  stp x23, x24, [x9, #32]\n"
    "  stp x25, x26, [x9, #48]\n  stp x27, x28, [x9, #64]\n"
    "  stp d8, d9, [x9, #80]\n  stp d10, d11, [x9, #96]\n  stp d12, d13, [x9, #112]\n"
    "  stp d14, d15, [x9, #128]\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #176\n  ret\n");

static uintptr_t stack_pointer() {
  uintptr_t sp;
  __asm__ volatile("mov %0, sp" : "=r"(sp));
  return sp;
}
#endif

static int failures = 0;
static void check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}
static bool pattern_ok(const uint64_t* got, uint64_t seed) {
  for (int i = 0; i < kRegs; ++i)
    if (got[i] != seed + 1 + uint64_t(i)) {
      std::printf("     register %d holds %#llx, expected %#llx\n", i,
                  (unsigned long long)got[i], (unsigned long long)(seed + 1 + i));
      return false;
    }
  return true;
}

// -- registers -------------------------------------------------------------------------------
static void* main_sp;
static void* fiber_sp;
static uint64_t fiber_regs[kRegs];
static bool fiber_fp_ok = true;

static void register_fiber(void*) {
  const uint64_t seed = 0x5A5A000000000000ull;
#if defined(__x86_64__)
  set_fp_control(0x7F80u, 0x0F7Fu);  // round toward zero, 64-bit x87 precision, round-up
  const uint32_t mine = get_fp_control();
#endif
  for (int round = 0; round < 3; ++round) {
    switch_with_pattern(&fiber_sp, main_sp, seed + uint64_t(round) * 0x100, fiber_regs);
    if (!pattern_ok(fiber_regs, seed + uint64_t(round) * 0x100)) fiber_regs[0] = ~0ull;
#if defined(__x86_64__)
    fiber_fp_ok = fiber_fp_ok && get_fp_control() == mine;
#endif
  }
  mt_fiber_switch(&fiber_sp, main_sp);
  __builtin_trap();
}

static void check_registers() {
  alignas(16) static unsigned char stack[64 * 1024];
  fiber_sp = mt_fiber_prepare(stack + sizeof stack, register_fiber, nullptr);
  uint64_t got[kRegs];
  const uint64_t seed = 0x3C3C000000000000ull;
#if defined(__x86_64__)
  const uint32_t mine = get_fp_control();  // before the fiber sets its own
  bool main_fp_ok = true;
#endif
  mt_fiber_switch(&main_sp, fiber_sp);  // the fiber sets its pattern and switches back
#if defined(__x86_64__)
  main_fp_ok = get_fp_control() == mine;
#endif
  bool main_ok = true, fiber_ok = true;
  for (int round = 0; round < 3; ++round) {
    switch_with_pattern(&main_sp, fiber_sp, seed + uint64_t(round), got);
    main_ok = main_ok && pattern_ok(got, seed + uint64_t(round));
    fiber_ok = fiber_ok && fiber_regs[0] != ~0ull;
#if defined(__x86_64__)
    main_fp_ok = main_fp_ok && get_fp_control() == mine;
#endif
  }
  check(main_ok, "callee-saved registers of the scheduler side survive the switches");
  check(fiber_ok, "callee-saved registers of the fiber side survive the switches");
#if defined(__x86_64__)
  check(main_fp_ok && fiber_fp_ok, "each context keeps its own MXCSR and x87 control word");
#else
  check(true, "callee-saved floating-point registers d8-d15 are part of the checks above");
#endif
}

// -- stack alignment -------------------------------------------------------------------------
typedef float vec4 __attribute__((vector_size(16)));
static bool aligned_entry = false, aligned_callee = false;
static float vector_sum = 0;

__attribute__((noinline)) static void callee(int depth) {
  volatile vec4 v = {1.0f, 2.0f, 3.0f, float(depth)};  // a 16-byte aligned stack slot
  aligned_callee = (reinterpret_cast<uintptr_t>(&v) % 16 == 0) &&
                   (reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) % 16 == 0);
  vec4 w = v;
  vector_sum = w[0] + w[1] + w[2] + w[3];
}

static void alignment_fiber(void*) {
  uintptr_t sp = stack_pointer();
  // At the fiber function's body the stack pointer is what the ABI gives a callee after
  // its prologue: arm64 keeps it 16-aligned always; on x86-64 the frame is 16-aligned.
  aligned_entry = reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) % 16 == 0;
#if defined(__aarch64__)
  aligned_entry = aligned_entry && sp % 16 == 0;
#else
  (void)sp;
#endif
  callee(4);
  mt_fiber_switch(&fiber_sp, main_sp);
  __builtin_trap();
}

static void check_alignment() {
  for (uintptr_t skew : {0u, 8u, 5u}) {  // a stack top need not be aligned: prepare aligns it
    alignas(16) static unsigned char stack[64 * 1024];
    aligned_entry = aligned_callee = false;
    fiber_sp = mt_fiber_prepare(stack + sizeof stack - skew, alignment_fiber, nullptr);
    mt_fiber_switch(&main_sp, fiber_sp);
    char what[96];
    std::snprintf(what, sizeof what, "a fresh fiber's stack is 16-byte aligned (top skewed by %u)",
                  unsigned(skew));
    check(aligned_entry && aligned_callee && vector_sum == 10.0f, what);
  }
}

// -- interleaved fibers ----------------------------------------------------------------------
static void* sps[3];
static long totals[3];
static int current = -1;

static void counting_fiber(void* arg) {
  const long id = reinterpret_cast<long>(arg);
  volatile long local[8];
  for (int i = 0; i < 8; ++i) local[i] = id * 1000 + i;
  long sum = 0;
  for (int step = 0; step < 1000; ++step) {
    for (int i = 0; i < 8; ++i) sum += local[i] - (id * 1000 + i);  // stays 0 if intact
    sum += 1;
    mt_fiber_switch(&sps[id], main_sp);
  }
  totals[id] = sum;
  mt_fiber_switch(&sps[id], main_sp);
  __builtin_trap();
}

static void check_interleaving() {
  alignas(16) static unsigned char stacks[3][32 * 1024];
  for (long i = 0; i < 3; ++i)
    sps[i] = mt_fiber_prepare(stacks[i] + sizeof stacks[i], counting_fiber,
                              reinterpret_cast<void*>(i));
  for (int step = 0; step < 1001; ++step)
    for (current = 0; current < 3; ++current) mt_fiber_switch(&main_sp, sps[current]);
  check(totals[0] == 1000 && totals[1] == 1000 && totals[2] == 1000,
        "three fibers switched round-robin 1000 times keep their own locals");
}

int main() {
  check_registers();
  check_alignment();
  check_interleaving();
  std::printf("%d failed\n", failures);
  return failures == 0 ? 0 : 1;
}

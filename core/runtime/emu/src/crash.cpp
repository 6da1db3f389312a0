// crash.cpp: reports of a kernel that stops the run.
//
// Where Metal would fault or stop the GPU (an invalid address, an integer division
// trap, a stack overflow), or where the checked build's array-bounds checks fire on an
// index out of an array of known size (undefined in MSL), the run writes where it
// happened (threadgroup, thread, pc, address) as its result document and exits with
// status 4; never a core dump.

#include "runtime.h"

namespace mt {

// ---------------------------------------------------------------------------------------
// Crashes: report where (group, thread, pc, address) and exit; never a core dump.

namespace {
// Threadgroups run on several OS threads, and two of them can fault at once (every group
// of a kernel that reads a wild pointer). Only the first writes the report and ends the
// process: a second writer would truncate the first one's report before _exit. The others
// wait here for that exit (pause is async-signal-safe).
std::atomic<bool> g_reporting{false};
void wait_for_the_first_report() {
  if (g_reporting.exchange(true))
    for (;;) pause();
}
}  // namespace

void crash_handler(int sig, siginfo_t* info, void* uctx) {
  wait_for_the_first_report();
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
                   what, overflow ? ": fiber stack overflow (large local arrays?)" : "", file_pc(pc), addr,
                   w ? w->group : 0, w && w->current ? int(w->current->tid) : -1);
  write_report(buf, size_t(n));
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
  wait_for_the_first_report();
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
                   detail, file_pc(reinterpret_cast<uintptr_t>(__builtin_return_address(0))),
                   w ? w->group : 0, w && w->current ? int(w->current->tid) : -1);
  write_report(buf, size_t(n));
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

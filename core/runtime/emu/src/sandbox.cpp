// sandbox.cpp: the process that runs a kernel can reach nothing but its job.
//
// MSL has no system calls: a Metal kernel reads and writes its buffers and nothing else.
// The emulator compiles kernels into native code, so a kernel that slipped past the text
// and symbol checks of build.py (a declaration of `system`, inline assembly) would run
// with the caller's rights. Defence in depth, on Linux, with the kernel's seccomp filters
// (no library: the BPF program is written out here, for x86-64 and arm64):
//
//   the whole program (the launch host, or a kernel executable), from its start, so before
//     any of a kernel's static initializers run (in a kernel executable at its start, under
//     the host in the launch child that loads the kernel's shared object): a deny list (new
//     programs, sockets, tracing, namespaces and mounts, kernel modules, io_uring,
//     userfaultfd); the launch server itself needs files and fork, and the child's loading
//     of a kernel needs files;
//   each launch child, once its kernel is loaded, its job mapped and its result file open,
//     before any of the kernel's functions runs: an allow list of what the runtime needs (memory, threads of this
//     process, futexes, signals, clocks, reads and writes of descriptors it already
//     holds). No open, no rename or unlink, no fork or exec, no new process: new threads
//     only (clone with CLONE_THREAD; clone3 answers ENOSYS, so the C library falls back
//     to clone, whose flags a filter can read). And resource limits: no core files, the
//     result file at most kMaxResultBytes, CPU time at most kMaxCpuSeconds, address space
//     what is mapped at entry plus kAddressMargin.
//
// A refused system call raises SIGSYS; the handler reports it as the launch's crash
// ("the emulator's sandbox refused system call openat (257)"), which run.py turns into a
// KernelCrashError naming the kernel and the MSL line. METALTILE_EMU_SANDBOX=off runs
// without the filters (qemu-user cannot filter a guest's system calls: `tox -e arm64`
// sets it); a kernel that cannot install them otherwise gets a launch error, never an
// unfiltered run. macOS: no seccomp; nothing here applies (untested there).

#include "runtime.h"

#ifdef __linux__
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#endif

namespace mt {

int g_result_fd = -1;
bool g_loading_library = false;

// A whole report replaces whatever the result file held (async-signal-safe: the crash
// handlers call it).
void write_report(const char* text, size_t n) {
  if (g_result_fd < 0) {
    ssize_t ignored = write(2, text, n);
    (void)ignored;
    return;
  }
  if (ftruncate(g_result_fd, 0) != 0) return;
  size_t done = 0;
  while (done < n) {
    ssize_t k = pwrite(g_result_fd, text + done, n - done, off_t(done));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    done += size_t(k);
  }
}

namespace {

bool sandbox_off() {
  const char* v = getenv("METALTILE_EMU_SANDBOX");
  return v && (strcmp(v, "off") == 0 || strcmp(v, "0") == 0);
}

#ifdef __linux__

#if defined(__x86_64__)
constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#else
#error "the sandbox knows x86-64 and arm64"
#endif

constexpr uint64_t kMaxResultBytes = uint64_t(256) << 20;
constexpr rlim_t kMaxCpuSeconds = 3600;
constexpr uint64_t kAddressMargin = uint64_t(16) << 30;

// The names a report shows for the calls a kernel reaching the host would make first.
struct SyscallName {
  long nr;
  const char* name;
};
const SyscallName kNames[] = {
#ifdef __NR_open
    {__NR_open, "open"},
#endif
#ifdef __NR_fork
    {__NR_fork, "fork"},
#endif
#ifdef __NR_vfork
    {__NR_vfork, "vfork"},
#endif
#ifdef __NR_unlink
    {__NR_unlink, "unlink"},
#endif
#ifdef __NR_rename
    {__NR_rename, "rename"},
#endif
#ifdef __NR_creat
    {__NR_creat, "creat"},
#endif
    {__NR_openat, "openat"},       {__NR_execve, "execve"},       {__NR_execveat, "execveat"},
    {__NR_clone, "clone"},         {__NR_clone3, "clone3"},       {__NR_socket, "socket"},
    {__NR_connect, "connect"},     {__NR_unlinkat, "unlinkat"},   {__NR_renameat2, "renameat2"},
    {__NR_mkdirat, "mkdirat"},     {__NR_kill, "kill"},           {__NR_ptrace, "ptrace"},
    {__NR_getdents64, "getdents64"},
    {__NR_wait4, "wait4"},         {__NR_chdir, "chdir"},         {__NR_fchmodat, "fchmodat"},
};

const char* syscall_name(long nr) {
  for (const SyscallName& s : kNames)
    if (s.nr == nr) return s.name;
  return "";
}

void refused(int, siginfo_t* info, void*) {
  char buf[512];
  const long nr = info->si_syscall;
  Worker* w = t_worker;
  const char* name = syscall_name(nr);
  if (g_result_fd < 0 || g_loading_library) {  // the kernel's static initializers
    const char* format_ = g_result_fd < 0
        ? "the emulator's sandbox refused system call %s%snumber %ld%s before any launch (a "
          "static initializer of the MSL source): MSL kernels cannot reach the host\n"
        : "{\"status\":\"crash\",\"message\":\"the emulator's sandbox refused system call "
          "%s%snumber %ld%s while the kernel was loaded (a static initializer of the MSL "
          "source): MSL kernels cannot reach the host\",\"pc\":0,\"address\":0,\"group\":0,\"thread\":-1}\n";
    int n = snprintf(buf, sizeof buf, format_, name, *name ? " (" : "", nr, *name ? ")" : "");
    write_report(buf, size_t(n));
    _exit(4);
  }
  int n = snprintf(buf, sizeof buf,
                   "{\"status\":\"crash\",\"message\":\"the emulator's sandbox refused system "
                   "call %s%snumber %ld%s: MSL kernels cannot reach the host\",\"pc\":%" PRIuPTR
                   ",\"address\":0,\"group\":%" PRIu64 ",\"thread\":%d}\n",
                   name, *name ? " (" : "", nr, *name ? ")" : "",
                   file_pc(reinterpret_cast<uintptr_t>(info->si_call_addr)),
                   w ? w->group : 0, w && w->current ? int(w->current->tid) : -1);
  write_report(buf, size_t(n));
  _exit(4);
}

// A BPF program: check the architecture, then per system call number an action.
struct Filter {
  std::vector<sock_filter> code;

  void load_arch_check() {
    code.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0));
    code.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    code.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#ifdef __x86_64__  // the x32 ABI's numbers are another table: none of them
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
    code.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP));
#endif
  }
  // With the number loaded: `nr` returns `action`.
  void on(long nr, uint32_t action) {
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(nr), 0, 1));
    code.push_back(BPF_STMT(BPF_RET | BPF_K, action));
  }
  // clone: allowed when its flags (argument 0, low word) create a thread of this process.
  void clone_threads_only() {
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, uint32_t(__NR_clone), 0, 4));
    code.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])));
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1));
    code.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    code.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP));
  }
  bool install(uint32_t otherwise) {
    code.push_back(BPF_STMT(BPF_RET | BPF_K, otherwise));
    sock_fprog prog{static_cast<unsigned short>(code.size()), code.data()};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
  }
};

int g_install_errno = 0;   // the whole-executable filter's failure, reported at launch

void catch_refusals() {
  struct sigaction sa{};
  sa.sa_sigaction = refused;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSYS, &sa, nullptr);
}

// Priority 101: before every constructor without one, so, in a kernel executable, before
// the kernel's own static initializers (the translation unit of the MSL source); the launch
// host's kernels are loaded later, by its launch children.
__attribute__((constructor(101))) void sandbox_executable() {
  if (sandbox_off()) return;
  catch_refusals();
  Filter f;
  f.load_arch_check();
  const long denied[] = {
      __NR_execve, __NR_execveat, __NR_socket, __NR_socketpair, __NR_connect, __NR_bind,
      __NR_listen, __NR_accept, __NR_accept4, __NR_sendto, __NR_sendmsg, __NR_recvfrom,
      __NR_recvmsg, __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev, __NR_mount,
      __NR_umount2, __NR_pivot_root, __NR_chroot, __NR_unshare, __NR_setns, __NR_bpf,
      __NR_perf_event_open, __NR_init_module, __NR_finit_module, __NR_delete_module,
      __NR_kexec_load, __NR_reboot, __NR_keyctl, __NR_add_key, __NR_request_key,
      __NR_io_uring_setup, __NR_userfaultfd, __NR_personality, __NR_open_by_handle_at};
  for (long nr : denied) f.on(nr, SECCOMP_RET_TRAP);
  if (!f.install(SECCOMP_RET_ALLOW)) g_install_errno = errno ? errno : EINVAL;
}

void limit(int resource, rlim_t value) {
  struct rlimit r{value, value};
  setrlimit(resource, &r);
}

// The address space mapped now, in bytes (from /proc, read while files can still be opened).
uint64_t mapped_bytes() {
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128] = {};
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  return strtoull(buf, nullptr, 10) * uint64_t(sysconf(_SC_PAGESIZE));
}

#endif  // __linux__

}  // namespace

void enter_sandbox() {
#ifdef __linux__
  if (sandbox_off()) return;
  if (g_install_errno)
    fail_launch("the emulator's sandbox could not be installed (seccomp: %s); set "
                "METALTILE_EMU_SANDBOX=off to run kernels without it (e.g. under qemu-user, "
                "which cannot filter a guest's system calls)", strerror(g_install_errno));
  limit(RLIMIT_CORE, 0);
  limit(RLIMIT_FSIZE, rlim_t(kMaxResultBytes));
  limit(RLIMIT_CPU, kMaxCpuSeconds);
  if (uint64_t mapped = mapped_bytes()) limit(RLIMIT_AS, rlim_t(mapped + kAddressMargin));
  catch_refusals();
  Filter f;
  f.load_arch_check();
  f.clone_threads_only();
  f.on(__NR_clone3, SECCOMP_RET_ERRNO | ENOSYS);
  const long allowed[] = {
      __NR_read, __NR_write, __NR_pread64, __NR_pwrite64, __NR_readv, __NR_writev,
      __NR_close, __NR_lseek, __NR_fstat, __NR_newfstatat, __NR_fcntl, __NR_ftruncate,
      __NR_msync, __NR_mmap, __NR_munmap, __NR_mprotect, __NR_mremap, __NR_madvise,
      __NR_brk, __NR_futex, __NR_set_robust_list, __NR_rseq, __NR_sched_yield,
      __NR_sched_getaffinity, __NR_getpid, __NR_gettid, __NR_tgkill, __NR_rt_sigreturn,
      __NR_rt_sigaction, __NR_rt_sigprocmask, __NR_sigaltstack, __NR_exit, __NR_exit_group,
      __NR_clock_gettime, __NR_clock_getres, __NR_clock_nanosleep, __NR_nanosleep,
      __NR_gettimeofday, __NR_getrandom, __NR_membarrier, __NR_restart_syscall,
      __NR_ppoll, __NR_getrusage, __NR_rt_sigsuspend, __NR_pipe2,
#ifdef __NR_pause
      __NR_pause,
#endif
#ifdef __NR_pipe
      __NR_pipe,
#endif
  };
  for (long nr : allowed) f.on(nr, SECCOMP_RET_ALLOW);
  if (!f.install(SECCOMP_RET_TRAP))
    fail_launch("the emulator's sandbox could not be installed (seccomp: %s); set "
                "METALTILE_EMU_SANDBOX=off to run kernels without it", strerror(errno));
#endif
}

}  // namespace mt

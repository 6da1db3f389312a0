// launch.cpp: one dispatch, from the job file to the result, and the launch server.
//
// Built once per toolchain WITHOUT instrumentation, with the other files of src/. Two
// programs are made of these objects, each with its own `main` (src/entry/):
//   the launch host (entry/host.cpp, Linux): built once, holding no kernel; every kernel
//           is a shared object it loads (build.py links each kernel's object into one);
//   a kernel executable (entry/executable.cpp: the kernel linked in, `kernel.bin`), where
//           the host is not used (another CPU under qemu-user, macOS).
// Either runs as `PROGRAM --serve`, a launch server (core/runtime/emu/launch_server.py). It
// reads one request per line on stdin, `LIBRARY<TAB>JOB<TAB>KERNEL<TAB>RESULT`, forks a
// child that runs that launch, writes `pid PID` on stdout as the child starts and `exit
// CODE` or `signal SIG` when it ends. The server itself never runs a kernel: every launch
// starts from the state the program had before its first one (nothing carries over
// between launches), a crash or a hang ends only that child, and the exec, the dynamic
// loading and the C++ runtime's start are paid once per server. A kernel executable also
// runs one launch and exits as `kernel.bin JOB KERNEL RESULT` (under qemu-user).
// The request's fields:
//   LIBRARY the kernel's shared object, which the launch child loads (entry/host.cpp);
//           empty for a kernel executable, which holds its kernels;
//   JOB     a file (job.py writes it; layout in job.h) holding the launch header and every
//           buffer, mapped shared so the caller sees the kernel's writes;
//   KERNEL  the kernel function to launch (the launcher's __mt_kernels table);
//   RESULT  where a JSON document with stats and findings (or the error) is written.
// Exit status: 0 ran (findings may exist), 3 launch error, 4 crash or out-of-bounds index
// into an array of known size (JSON says where).
//
// What Metal checks at dispatch is checked here before any thread runs, as a launch error:
// every [[buffer(i)]] a kernel parameter is bound to is given and large enough, and the
// threadgroup holds 1 to MT_MAX_THREADS_PER_GROUP threads.

#include <poll.h>
#include <sys/wait.h>
#include <cerrno>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "runtime.h"

namespace mt {

Launch g_launch;
std::vector<Worker*> g_workers;
KernelLibrary g_library;

uintptr_t file_pc(uintptr_t pc) {
  return pc >= g_library.lo && pc < g_library.hi ? pc - g_library.bias : 0;
}

// Zeroed shadow memory, mapped lazily. Large maps ask for transparent huge pages: a
// checked run touches much of the shadow of the buffers it reads, and 2 MiB pages turn
// thousands of page faults and TLB misses into a few. `touched_first_by_reads`: shadow the
// checker reads before it writes (the device granules' state bytes) would map the zero
// page on the read and copy it on the write, with a TLB shootdown across the workers' CPUs
// each time; below huge-page size such a map is populated up front instead.
void* map_shadow(size_t bytes, bool touched_first_by_reads) {
  const bool huge = bytes >= (size_t(2) << 20);
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#ifdef MAP_POPULATE
  if (touched_first_by_reads && !huge) flags |= MAP_POPULATE;
#endif
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, flags, -1, 0);
#ifdef MADV_HUGEPAGE
  if (p != MAP_FAILED && huge) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

// ---------------------------------------------------------------------------------------

namespace {

// The worker OS threads a launch runs: as many as asked, at most one per threadgroup.
uint32_t launch_workers(const JobHeader& job) {
  const uint64_t groups = uint64_t(job.grid[0]) * job.grid[1] * job.grid[2];
  const uint32_t n = uint32_t(std::min<uint64_t>(std::max<uint32_t>(job.workers, 1), groups));
  return n ? n : 1;
}

}  // namespace

// One launch: the kernels of `library` (entry/: open_library), the job file `job_path`,
// the kernel `kernel`, the result document `result_path`. Returns the exit status (launch
// errors and crashes exit from inside).
int run_launch(const char* library, const char* job_path, const char* kernel,
               const char* result_path) {
  // Opened first and kept: every report (results, launch errors, crashes) goes through
  // this descriptor, since the sandbox lets the kernel open no file.
  g_result_fd = open(result_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (g_result_fd < 0) {  // no report: run.py shows stderr with the exit status
    fprintf(stderr, "cannot open the result file %s: %s\n", result_path, strerror(errno));
    _exit(5);
  }
  install_crash_handlers();
  // Before the job and the sandbox: a library that cannot be loaded is a launch error, and
  // its static initializers run under the whole program's filter (sandbox.cpp).
  std::string error;
  if (!open_library(library, &g_library, &error)) fail_launch("%s", error.c_str());

  int fd = open(job_path, O_RDWR);
  if (fd < 0) fail_launch("cannot open job file %s", job_path);
  struct stat st;
  if (fstat(fd, &st) != 0) fail_launch("cannot read the size of job file %s", job_path);
  void* map = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) fail_launch("cannot map job file %s", job_path);
  close(fd);
  g_launch.map = static_cast<unsigned char*>(map);
  g_launch.map_size = size_t(st.st_size);
  const JobHeader* job = static_cast<const JobHeader*>(map);
  g_launch.job = job;
  if (memcmp(job->magic, kJobMagic, 8) != 0) fail_launch("job file has a wrong format version");

  for (uint32_t k = 0; k < g_library.count; ++k)
    if (strcmp(g_library.kernels[k].name, kernel) == 0) g_launch.kernel = &g_library.kernels[k];
  if (!g_launch.kernel) fail_launch("no kernel function named '%s' in the MSL source", kernel);

  const __mt_kernel_desc* kd = g_launch.kernel;
  for (uint32_t i = 0; i < kd->nparams; ++i) {
    const __mt_param_desc& p = kd->params[i];
    if (p.buffer_index < 0) continue;
    if (uint32_t(p.buffer_index) >= job->nbuffers)
      fail_launch("parameter '%s' is bound to [[buffer(%d)]] but only %u buffers were given",
                  p.name, p.buffer_index, job->nbuffers);
    if (job->buffers[p.buffer_index].size < p.min_bytes)
      fail_launch("parameter '%s' ([[buffer(%d)]]) needs at least %u bytes, the buffer holds %" PRIu64,
                  p.name, p.buffer_index, p.min_bytes, job->buffers[p.buffer_index].size);
  }

  for (uint32_t b = 0; b < job->nbuffers; ++b) g_launch.buffers[b] = g_launch.map + job->buffers[b].offset;
  g_launch.dev_lo = reinterpret_cast<uintptr_t>(g_launch.map) + sizeof(JobHeader);
  g_launch.dev_span = g_launch.map_size - sizeof(JobHeader);
  for (uint32_t b = 0; b < job->nbuffers; ++b) {
    size_t n = job->buffers[b].size ? job->buffers[b].size : 1;
    if (job->checks & kCheckRaces) {
      // Zero pages until touched: the per-byte words only for split granules, the atomic
      // words only when the kernel uses device atomics.
      const size_t granules = n / 8 + 1;
      g_launch.dev_state[b] = static_cast<std::atomic<uint8_t>*>(map_shadow(granules, true));
      g_launch.dev_granule[b] = static_cast<DevGranule*>(map_shadow(granules * sizeof(DevGranule)));
      g_launch.dev_writer[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      g_launch.dev_reader[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      g_launch.dev_atomic[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      if (g_launch.dev_state[b] == MAP_FAILED || g_launch.dev_granule[b] == MAP_FAILED ||
          g_launch.dev_writer[b] == MAP_FAILED || g_launch.dev_reader[b] == MAP_FAILED ||
          g_launch.dev_atomic[b] == MAP_FAILED)
        fail_launch("cannot map race-checker shadow memory for buffer %u (%zu bytes)", b,
                    granules * (1 + sizeof(DevGranule)) + n * 24);
    }
  }

  for (auto& o : g_launch.slot_offset) o.store(UINT32_MAX);
  g_launch.threads = job->threadgroup[0] * job->threadgroup[1] * job->threadgroup[2];
  if (g_launch.threads == 0 || g_launch.threads > kMaxThreadsPerGroup)
    fail_launch("threadgroup of %u threads; Metal allows 1 to %u", g_launch.threads, kMaxThreadsPerGroup);
  g_launch.simdgroups = (g_launch.threads + kSimdWidth - 1) / kSimdWidth;
  g_launch.groups = uint64_t(job->grid[0]) * job->grid[1] * job->grid[2];
  if (job->grid_threads[0] || job->grid_threads[1] || job->grid_threads[2])
    for (int d = 0; d < 3; ++d)
      if (job->grid_threads[d] == 0 ||
          (uint64_t(job->grid_threads[d]) + job->threadgroup[d] - 1) / job->threadgroup[d] !=
              job->grid[d])
        fail_launch("grid of (%u, %u, %u) threads in threadgroups of (%u, %u, %u) is not a grid of "
                    "(%u, %u, %u) threadgroups", job->grid_threads[0], job->grid_threads[1],
                    job->grid_threads[2], job->threadgroup[0], job->threadgroup[1],
                    job->threadgroup[2], job->grid[0], job->grid[1], job->grid[2]);
  const uint32_t nworkers = launch_workers(*job);
  for (uint32_t i = 0; i < nworkers; ++i) g_workers.push_back(new Worker());
  enter_sandbox();  // sandbox.cpp: from here on the kernel's code runs
  if (nworkers == 1) {
    worker_main(g_workers[0]);
  } else {
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < nworkers; ++i) threads.emplace_back(worker_main, g_workers[i]);
    for (std::thread& t : threads) t.join();
  }
  msync(map, g_launch.map_size, MS_SYNC);
  write_results();
  return 0;
}

namespace {

// Writes all of `text` to `fd` (the server's replies; no stdio buffer to inherit).
bool write_all(int fd, const char* text, size_t n) {
  while (n) {
    ssize_t k = write(fd, text, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    text += k;
    n -= size_t(k);
  }
  return true;
}

void on_child_exit(int) {}  // only interrupts ppoll

// Waits for launch child `pid`; gives up on it (kills it) when the caller closes the
// request pipe meanwhile, so a hung kernel never outlives its caller. SIGCHLD is blocked
// except inside ppoll, so an exit between waitpid and ppoll is never missed.
bool wait_child(pid_t pid, int* status, const sigset_t* during_poll) {
#ifndef __linux__  // no ppoll: a plain wait (the caller's watchdog still kills the child)
  (void)during_poll;
  while (waitpid(pid, status, 0) < 0)
    if (errno != EINTR) return false;
  return true;
#else
  for (;;) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return false;
    pollfd in{0, POLLIN, 0};
    int k = ppoll(&in, 1, nullptr, during_poll);
    if (k > 0 && (in.revents & (POLLIN | POLLHUP | POLLERR))) {
      kill(pid, SIGKILL);
      waitpid(pid, status, 0);
      return false;
    }
  }
#endif
}

constexpr uint64_t kMaxPreparedStacks = 16 * 1024;

// Before forking a launch, the server maps the fiber stacks it will need (scheduler.cpp,
// prepare_stacks), kept for the next launches of the same shape. A job it cannot read is
// left for the launch to report.
void prepare_for(const char* job_path) {
  int fd = open(job_path, O_RDONLY);
  if (fd < 0) return;
  JobHeader job;
  const bool read_all = pread(fd, &job, sizeof job, 0) == ssize_t(sizeof job);
  close(fd);
  if (!read_all || memcmp(job.magic, kJobMagic, 8) != 0) return;
  const uint64_t threads = uint64_t(job.threadgroup[0]) * job.threadgroup[1] * job.threadgroup[2];
  if (threads == 0 || threads > kMaxThreadsPerGroup) return;
  // An idle server keeps the page tables of the guards: a bound on what it holds.
  const uint32_t workers = launch_workers(job);
  if (uint64_t(workers) * threads > kMaxPreparedStacks) return;
  prepare_stacks(workers, uint32_t(threads), job.stack_bytes);
}

}  // namespace

// The launch server (see the top of this file). Requests are read a byte at a time, so
// nothing past a request's newline is consumed before the child that runs it is forked.
int serve() {
  sigset_t chld, during_poll;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, &during_poll);
  sigdelset(&during_poll, SIGCHLD);
  struct sigaction sa{};
  sa.sa_handler = on_child_exit;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGCHLD, &sa, nullptr);
  std::string line;
  for (;;) {
    line.clear();
    char c;
    for (;;) {
      ssize_t k = read(0, &c, 1);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) return 0;  // the caller closed the pipe: done
      if (c == '\n') break;
      line += c;
    }
    // LIBRARY, JOB, KERNEL, RESULT: the three tabs
    size_t tab[3], at = 0;
    int found = 0;
    for (; found < 3; ++found, ++at)
      if ((tab[found] = at = line.find('\t', at)) == std::string::npos) break;
    if (found < 3) {
      static const char bad[] = "error malformed request\n";
      if (!write_all(1, bad, sizeof bad - 1)) return 1;
      continue;
    }
    for (size_t t : tab) line[t] = '\0';
    const char* library = line.c_str();
    const char* job = library + tab[0] + 1;
    const char* kernel = library + tab[1] + 1;
    const char* result = library + tab[2] + 1;
    prepare_for(job);
    pid_t pid = fork();
    if (pid == 0) {
#ifdef __linux__
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // the server is gone: so is its launch
#endif
      signal(SIGCHLD, SIG_DFL);
      sigprocmask(SIG_SETMASK, &during_poll, nullptr);
      // The child talks only through the result file; stdin and stdout are the server's.
      int null = open("/dev/null", O_RDWR);
      if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        if (null > 2) close(null);
      }
      exit(run_launch(library, job, kernel, result));
    }
    char reply[64];
    int n = pid < 0 ? snprintf(reply, sizeof reply, "error fork failed: errno %d\n", errno)
                    : snprintf(reply, sizeof reply, "pid %d\n", int(pid));
    if (!write_all(1, reply, size_t(n))) return 1;
    if (pid < 0) continue;
    int status = 0;
    if (!wait_child(pid, &status, &during_poll)) return 0;
    n = WIFSIGNALED(status) ? snprintf(reply, sizeof reply, "signal %d\n", WTERMSIG(status))
                            : snprintf(reply, sizeof reply, "exit %d\n", WEXITSTATUS(status));
    if (!write_all(1, reply, size_t(n))) return 1;
  }
}

}  // namespace mt

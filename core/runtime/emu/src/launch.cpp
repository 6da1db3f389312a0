// launch.cpp: one dispatch, from the job file to the result.
//
// Built once per toolchain WITHOUT instrumentation, with the other files of src/, and
// linked into every kernel binary. The binary is run by core/runtime/emu/run.py as
// `kernel.bin JOB KERNEL RESULT`:
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

#include "runtime.h"

namespace mt {

Launch g_launch;
std::vector<Worker*> g_workers;

// Zeroed shadow memory, mapped lazily. Large maps ask for transparent huge pages: a
// checked run touches much of the shadow of the buffers it reads, and 2 MiB pages turn
// thousands of page faults and TLB misses into a few.
void* map_shadow(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
#ifdef MADV_HUGEPAGE
  if (p != MAP_FAILED && bytes >= (size_t(2) << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace mt

using namespace mt;

// ---------------------------------------------------------------------------------------

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s JOB KERNEL RESULT\n", argv[0]);
    return 2;
  }
  g_launch.result_path = argv[3];
  snprintf(g_crash_path, sizeof g_crash_path, "%s", argv[3]);
  install_crash_handlers();

  int fd = open(argv[1], O_RDWR);
  if (fd < 0) fail_launch("cannot open job file %s", argv[1]);
  struct stat st;
  if (fstat(fd, &st) != 0) fail_launch("cannot read the size of job file %s", argv[1]);
  void* map = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) fail_launch("cannot map job file %s", argv[1]);
  close(fd);
  g_launch.map = static_cast<unsigned char*>(map);
  g_launch.map_size = size_t(st.st_size);
  const JobHeader* job = static_cast<const JobHeader*>(map);
  g_launch.job = job;
  if (memcmp(job->magic, kJobMagic, 8) != 0) fail_launch("job file has a wrong format version");

  for (uint32_t k = 0; k < __mt_kernel_count; ++k)
    if (strcmp(__mt_kernels[k].name, argv[2]) == 0) g_launch.kernel = &__mt_kernels[k];
  if (!g_launch.kernel) fail_launch("no kernel function named '%s' in the MSL source", argv[2]);

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
      g_launch.dev_writer[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      g_launch.dev_reader[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      g_launch.dev_atomic[b] = static_cast<std::atomic<uint64_t>*>(map_shadow(n * 8));
      g_launch.dev_read_shared[b] = static_cast<std::atomic<uint8_t>*>(map_shadow(n / 8 + 1));
      if (g_launch.dev_writer[b] == MAP_FAILED || g_launch.dev_reader[b] == MAP_FAILED ||
          g_launch.dev_atomic[b] == MAP_FAILED || g_launch.dev_read_shared[b] == MAP_FAILED)
        fail_launch("cannot map race-checker shadow memory for buffer %u (%zu bytes)", b, n * 24);
    }
  }

  for (auto& o : g_launch.slot_offset) o.store(UINT32_MAX);
  g_launch.threads = job->threadgroup[0] * job->threadgroup[1] * job->threadgroup[2];
  if (g_launch.threads == 0 || g_launch.threads > kMaxThreadsPerGroup)
    fail_launch("threadgroup of %u threads; Metal allows 1 to %u", g_launch.threads, kMaxThreadsPerGroup);
  g_launch.simdgroups = (g_launch.threads + kSimdWidth - 1) / kSimdWidth;
  g_launch.groups = uint64_t(job->grid[0]) * job->grid[1] * job->grid[2];
  uint32_t nworkers = uint32_t(std::min<uint64_t>(std::max<uint32_t>(job->workers, 1), g_launch.groups));
  if (nworkers == 0) nworkers = 1;
  for (uint32_t i = 0; i < nworkers; ++i) g_workers.push_back(new Worker());
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

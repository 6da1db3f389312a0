// entry/host.cpp: `main` of the launch host (launch.cpp), the one program that runs every
// kernel of a process on Linux.
//
//   launch-host --serve   a launch server; each request names the kernel's shared object.
//
// The host is the runtime with no kernel in it, built once and linked with the C and C++
// libraries, exporting every symbol it defines (-rdynamic). A kernel is its own small
// shared object (build.py): its translation unit and launcher, no library on its link
// line, its undefined symbols (the checker's hooks, the runtime's functions, the math
// library and the few C++ ABI functions of admission.PROVIDED) bound to the host's when it
// is loaded (RTLD_NOW: all at once, none later inside the sandbox; RTLD_LOCAL: one
// kernel's symbols never bind another's).
//
// Each launch child loads the library it runs, after the fork and before the sandbox's
// allow list: the kernel's static initializers run there (under the whole program's deny
// list, as in a kernel executable), and a crash or refused call in one is that launch's
// report; the host itself never maps a kernel, so nothing of one reaches another's launch.
// Loading in the host before the fork instead (kept for the next launches) cost as much
// or more CPU per launch (32 fuzz kernels, 128 warm launches, 3 rounds alternated: 6.2-7.0
// ms against 5.1-6.2 ms) and would run every kernel's initializers in the shared host.

#include <dlfcn.h>
#include <link.h>

#include "../runtime.h"

namespace mt {
namespace {

struct Extent {
  uintptr_t bias, lo, hi;
};

// The address range of the loaded object whose load bias is `bias` (its PT_LOAD segments).
int find_extent(dl_phdr_info* info, size_t, void* data) {
  Extent* e = static_cast<Extent*>(data);
  if (info->dlpi_addr != e->bias || !info->dlpi_name || !*info->dlpi_name) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    e->lo = std::min<uintptr_t>(e->lo, e->bias + ph.p_vaddr);
    e->hi = std::max<uintptr_t>(e->hi, e->bias + ph.p_vaddr + ph.p_memsz);
  }
  return 1;
}

bool load(const char* path, KernelLibrary* library, std::string* error) {
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    *error = format("cannot load the kernel library %s: %s", path, why ? why : "dlopen failed");
    return false;
  }
  const auto* kernels = static_cast<const __mt_kernel_desc*>(dlsym(handle, "__mt_kernels"));
  const auto* count = static_cast<const uint32_t*>(dlsym(handle, "__mt_kernel_count"));
  link_map* map = nullptr;
  if (!kernels || !count || dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map) {
    *error = format("the kernel library %s has no launcher table (__mt_kernels)", path);
    return false;
  }
  Extent extent{map->l_addr, UINTPTR_MAX, 0};
  dl_iterate_phdr(find_extent, &extent);
  library->kernels = kernels;
  library->count = *count;
  library->bias = extent.bias;
  library->lo = extent.lo;
  library->hi = extent.hi;
  return true;
}

}  // namespace

bool open_library(const char* path, KernelLibrary* library, std::string* error) {
  if (!*path) {
    *error = "the launch host holds no kernel: the request names no kernel library";
    return false;
  }
  g_loading_library = true;  // a refused system call now is a static initializer's
  const bool ok = load(path, library, error);
  g_loading_library = false;
  return ok;
}

}  // namespace mt

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--serve") == 0) return mt::serve();
  fprintf(stderr, "usage: %s --serve\n", argv[0]);
  return 2;
}

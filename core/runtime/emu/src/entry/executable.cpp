// entry/executable.cpp: `main` of a kernel executable, `kernel.bin` (launch.cpp), the
// program a kernel is linked into where the launch host is not used: another CPU under
// qemu-user (cross.py), macOS (build.py: Builder.loads_libraries).
//
//   kernel.bin JOB KERNEL RESULT   one launch, then exit (how qemu-user runs it);
//   kernel.bin --serve             a launch server; requests name no library (empty field).
//
// The kernels are linked in: their table is the launcher's own, and their pcs are the
// file's addresses (a non-PIE executable), as the symbolizer reads them.

#include "../runtime.h"

namespace mt {

bool open_library(const char* path, KernelLibrary* library, std::string* error) {
  if (*path) {
    *error = format("a kernel executable runs its own kernels, not those of %s", path);
    return false;
  }
  library->kernels = __mt_kernels;
  library->count = __mt_kernel_count;
  return true;
}

}  // namespace mt

int main(int argc, char** argv) {
  if (argc == 2 && strcmp(argv[1], "--serve") == 0) return mt::serve();
  if (argc != 4) {
    fprintf(stderr, "usage: %s JOB KERNEL RESULT | %s --serve\n", argv[0], argv[0]);
    return 2;
  }
  return mt::run_launch("", argv[1], argv[2], argv[3]);
}

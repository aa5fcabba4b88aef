#include "common/allocator.hpp"

#include <dlfcn.h>

namespace archipelago {

AllocatorReport allocator_in_use() {
  AllocatorReport report;
  // Symbols only each allocator exports, looked up in the process's global scope: whichever one the
  // executable links or the environment preloads is the malloc every library calls.
  if (dlsym(RTLD_DEFAULT, "tc_malloc") != nullptr) {
    report.name = "tcmalloc";
    const auto version = reinterpret_cast<const char* (*)(int*, int*, const char**)>(dlsym(RTLD_DEFAULT, "tc_version"));
    if (version) report.name += std::string(" (") + version(nullptr, nullptr, nullptr) + ")";
    report.scalable = true;
  } else if (dlsym(RTLD_DEFAULT, "mallctl") != nullptr) {
    report.name = "jemalloc";
    report.scalable = true;
  } else {
    report.name = "glibc malloc";
  }
  report.message = "allocator: " + report.name +
                   (report.scalable ? ""
                                    : " -- SLOW: each step maps and faults in its large tensors; build with "
                                      "libgoogle-perftools-dev installed (./scripts/setup.sh does)");
  return report;
}

}  // namespace archipelago

#include "common/allocator.hpp"

#include <dlfcn.h>

namespace archipelago {

AllocatorReport allocator_in_use() {
  AllocatorReport report;
  // The object that defines the `malloc` every library calls: the first in the global scope (a
  // preloaded library, then the executable's own links, then libc).
  Dl_info info{};
  void* malloc_address = dlsym(RTLD_DEFAULT, "malloc");
  const std::string object = malloc_address && dladdr(malloc_address, &info) && info.dli_fname ? info.dli_fname : "";
  if (object.find("tcmalloc") != std::string::npos) {
    report.name = "tcmalloc";
    const auto version = reinterpret_cast<const char* (*)(int*, int*, const char**)>(dlsym(RTLD_DEFAULT, "tc_version"));
    if (version) report.name += std::string(" (") + version(nullptr, nullptr, nullptr) + ")";
    report.scalable = true;
  } else if (object.find("jemalloc") != std::string::npos) {
    report.name = "jemalloc";
    report.scalable = true;
  } else {
    report.name = "glibc malloc";
  }
  report.message = "allocator: " + report.name + (object.empty() ? "" : " (" + object + ")") +
                   (report.scalable ? ""
                                    : " -- SLOW: each step maps and faults in its large tensors; build with "
                                      "libgoogle-perftools-dev installed (./scripts/setup.sh does)");
  return report;
}

}  // namespace archipelago

// Which malloc this process runs on, as the dynamic linker resolved it.
//
// A training step allocates and frees tensors of tens of MiB; under glibc's malloc each of them is
// mapped, faulted in page by page and unmapped again, every step. Archipelago links a scalable
// allocator (tcmalloc from gperftools, CMake's ARCHIPELAGO_ALLOCATOR) and says at start which one
// serves it, so a build or an environment without it is seen at once. Any thread.
#pragma once

#include <string>

namespace archipelago {

struct AllocatorReport {
  std::string name;       // "tcmalloc (gperftools V)", "jemalloc" or "glibc malloc"
  bool scalable = false;  // tcmalloc or jemalloc
  std::string message;    // one line for the log
};

AllocatorReport allocator_in_use();

}  // namespace archipelago

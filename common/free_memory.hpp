// Gives back to the system the pages that malloc holds free.
//
// glibc keeps freed blocks below its mmap threshold (which rises to 32 MiB as large blocks are
// freed) in its arenas, resident, for reuse. A syncer's round frees hundreds of MB of update chunks
// that way (bench/syncer: 0.6 fp32 copies of the model held free at the peak of a 250 M-parameter
// round), so it asks for them to be given back before it stages a commit, the moment its memory
// peaks. The cost is that the next round faults those pages in again. Elsewhere a no-op.
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace archipelago {

inline void give_back_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace archipelago

// Reading a drill's checkpoint stores (RocksDB, storage/checkpoint_store.hpp) as its processes left
// them: at each kill of the process that writes one, and once the run is over.
//
// Each read opens the store, reads and closes it again; it never writes. Every read also compares
// the versions that earlier kills saw with the store now (StoreMemory), the evidence of
// digests_never_change. Called by the fault injector (apps/drill/faults.hpp) right after a kill,
// while the store's process is down, and by the runner once every process has stopped.
#pragma once

#include <cstdint>
#include <filesystem>

#include "apps/drill/observations.hpp"
#include "common/error.hpp"

namespace archipelago::apps::drill {

// The store as a killed process left it: its latest committed version (0: none). Every version's
// digests are compared with what earlier kills of that process read, and kept for the next one.
Expected<uint64_t> read_store_after_kill(const std::filesystem::path& store_dir, StoreMemory& memory);

// The store after the run: every version read back and verified, with its manifest; the versions
// earlier kills read compared with it once more (when there were any).
StoreObservation read_store_after_run(const std::filesystem::path& store_dir, StoreMemory& memory);

}  // namespace archipelago::apps::drill

// The workload the crash child commits and the crash test checks: the bytes of version v depend only
// on v, so the parent can recompute what every listed version must hold. Fragment f (parameters and
// optimizer state) changes every f+1 versions, so commits mix new blobs with deduplicated and carried
// ones, and retention frees some under fire.
#pragma once

#include "tests/storage/test_support.hpp"

namespace archipelago::storage::testing {

inline constexpr uint32_t kCrashFragments = 4;
inline constexpr uint32_t kCrashKeepLast = 4;

inline VersionData crash_version(uint64_t version) {
  VersionData data;
  data.version = version;
  for (uint32_t f = 0; f < kCrashFragments; ++f) {
    uint64_t generation = version / (f + 1);
    data.fragments[f] = pattern_blob(1000003ull * (f + 1) + generation, (256u << 10) >> f);
    data.optimizer_state[f] = pattern_blob(7000001ull * (f + 1) + generation, 16u << 10);
  }
  data.manifest_json = "{\"version\":" + std::to_string(version) + "}";
  return data;
}

// What the child commits: on odd versions it passes every fragment (unchanged ones deduplicate by
// hash), on even ones it carries the unchanged fragments from version-1 by id.
inline VersionData crash_commit(uint64_t version) {
  VersionData data = crash_version(version);
  if (version % 2 == 1 || version < 2) return data;
  for (uint32_t f = 0; f < kCrashFragments; ++f) {
    if (version / (f + 1) != (version - 1) / (f + 1)) continue;  // changed in this version
    data.fragments.erase(f);
    data.optimizer_state.erase(f);
    data.carried_fragments.push_back(f);
  }
  return data;
}

inline StoreOptions crash_store_options() {
  StoreOptions options;
  options.sync = true;
  options.retention.keep_last = kCrashKeepLast;
  options.file_blob_min_bytes = 100 << 10;  // fragments 0 and 1 as files, the rest inside RocksDB
  return options;
}

}  // namespace archipelago::storage::testing

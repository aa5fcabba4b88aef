#include "apps/drill/store_audit.hpp"

#include "apps/drill/invariants.hpp"
#include "storage/checkpoint_store.hpp"

namespace archipelago::apps::drill {
namespace {

Expected<Hashes> stored_hashes(storage::CheckpointStore& store) {
  auto list = store.list();
  if (!list) return list.error();
  Hashes out;
  for (const auto& info : *list) {
    for (const auto& e : info.entries) {
      out[info.version].push_back(std::to_string(static_cast<int>(e.role)) + "/" + std::to_string(e.fragment) + "/" +
                                  e.hash.to_hex());
    }
  }
  return out;
}

}  // namespace

Expected<uint64_t> read_store_after_kill(const std::filesystem::path& store_dir, StoreMemory& memory) {
  auto store = storage::CheckpointStore::open(store_dir.string());
  if (!store) return store.error();
  auto latest = (*store)->latest_committed_version();
  auto hashes = stored_hashes(**store);
  store->reset();
  if (hashes) {
    compare_snapshots(*hashes, memory);
    for (const auto& [v, e] : *hashes) memory.snapshots[v] = e;
  }
  return latest ? *latest : uint64_t{0};
}

StoreObservation read_store_after_run(const std::filesystem::path& store_dir, StoreMemory& memory) {
  StoreObservation seen;
  auto store = storage::CheckpointStore::open(store_dir.string());
  if (!store) {
    seen.error = "cannot open the store: " + store.error().reason;
    return seen;
  }
  auto list = (*store)->list();
  if (!list) {
    seen.error = "list: " + list.error().reason;
    return seen;
  }
  for (const auto& info : *list) {
    StoreObservation::Version version{info.version, false, "", info.manifest_json};
    auto data = (*store)->get(info.version);
    if (data) version.verified = true;
    else version.failure = data.error().reason;
    seen.versions.push_back(std::move(version));
  }
  auto after = stored_hashes(**store);
  if (after && (!memory.snapshots.empty() || memory.digests.compared() > 0)) {
    compare_snapshots(*after, memory);
    seen.digests = memory.digests;
  }
  return seen;
}

}  // namespace archipelago::apps::drill

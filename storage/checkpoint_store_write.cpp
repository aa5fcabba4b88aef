// CheckpointStore's writers: every change to the database goes through one WriteBatch built here,
// under the write mutex, and the writer-side caches change only after that batch succeeded.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "storage/checkpoint_store_impl.hpp"

namespace archipelago::storage {

Status CheckpointStore::Impl::write(std::string_view name, rocksdb::WriteBatch& batch) {
  if (options_.fault_hook) {
    Status injected = options_.fault_hook(name);
    if (!injected.ok()) return injected;
  }
  rocksdb::WriteOptions write;
  write.sync = options_.sync;
  rocksdb::Status status = db_->Write(write, &batch);
  if (!status.ok()) return rocks_error(std::string("writing ") + std::string(name), status);
  return Status::success();
}

void CheckpointStore::Impl::stage_event(rocksdb::WriteBatch& batch, uint64_t& next_sequence,
                                        std::string_view kind, const std::string& json) {
  uint64_t sequence = next_sequence++;
  batch.Put(events_cf_, encode_u64_key(sequence), encode_event(now_ms(), kind, json));
  // Trim in steps of 64 so that the table does not grow without bound nor collect a tombstone per event.
  if (options_.max_events > 0 && sequence >= options_.max_events && sequence % 64 == 0)
    batch.DeleteRange(events_cf_, encode_u64_key(0), encode_u64_key(sequence + 1 - options_.max_events));
}

Status CheckpointStore::Impl::stage_references(rocksdb::WriteBatch& batch, const std::vector<BlobEntry>& added,
                                               const std::map<std::string, BlobBytes>& bytes_of,
                                               const std::vector<uint64_t>& drops, CommitStats& stats,
                                               std::vector<BlobFiles::Pending>& new_files,
                                               std::vector<std::string>& dead_files) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> counts;  // blob key -> (added, removed) entries
  for (const BlobEntry& entry : added) ++counts[encode_blob_key(entry.hash, entry.size)].first;
  for (uint64_t version : drops) {
    std::string bytes;
    rocksdb::Status status = db_->Get(read_options(), versions_cf_, encode_u64_key(version), &bytes);
    Expected<VersionRecord> record = status.ok() ? decode_version_record(bytes)
                                                 : Expected<VersionRecord>(rocks_error("reading", status));
    if (!record.ok()) {
      // Its blobs stay referenced (leaked) rather than risk deleting bytes another version needs.
      log_->warn("dropping version {} whose record is unreadable ({}); its blobs stay", version,
                 record.error().to_string());
    } else {
      for (const BlobEntry& entry : record->entries) ++counts[encode_blob_key(entry.hash, entry.size)].second;
    }
    batch.Delete(versions_cf_, encode_u64_key(version));
    stats.versions_dropped.push_back(version);
  }
  for (const auto& [key, change] : counts) {
    const auto [plus, minus] = change;
    std::string bytes;
    BlobRef old_ref;
    rocksdb::Status status = db_->Get(read_options(), refs_cf_, key, &bytes);
    if (status.ok()) {
      Expected<BlobRef> decoded = decode_blob_ref(bytes);
      if (!decoded.ok()) return decoded.error();
      old_ref = *decoded;
    } else if (!status.IsNotFound()) {
      return rocks_error("reading a blob reference", status);
    }
    BlobRef new_ref = old_ref;
    new_ref.count = old_ref.count + plus >= minus ? old_ref.count + plus - minus : 0;
    if (old_ref.count == 0 && plus > 0) {
      auto passed = bytes_of.find(key);
      if (passed == bytes_of.end())  // a carried blob without a reference: the store is damaged
        return make_error(ErrorCode::inconsistent, "a carried blob has no reference entry");
      const BlobBytes& blob = passed->second;
      if (blob.size >= options_.file_blob_min_bytes) {
        new_ref.location = BlobLocation::file;
        new_files.push_back(BlobFiles::Pending{blob_file_name(key), blob.data, blob.size});
      } else {
        new_ref.location = BlobLocation::family;
        batch.Put(blobs_cf_, key, std::string_view(reinterpret_cast<const char*>(blob.data), blob.size));
      }
      ++stats.blobs_written;
      stats.bytes_written += blob.size;
      stats.blobs_deduplicated += plus - 1;
    } else {
      stats.blobs_deduplicated += plus;
    }
    if (new_ref.count == old_ref.count) continue;  // referenced before and after: nothing to write
    if (new_ref.count == 0) {
      if (old_ref.location == BlobLocation::file) dead_files.push_back(blob_file_name(key));
      else batch.Delete(blobs_cf_, key);
      batch.Delete(refs_cf_, key);
      ++stats.blobs_deleted;
    } else {
      batch.Put(refs_cf_, key, encode_blob_ref(new_ref));
    }
  }
  return Status::success();
}

Status CheckpointStore::Impl::carry_fragments(const VersionData& data, VersionRecord& record) {
  std::string bytes;
  rocksdb::Status status = db_->Get(read_options(), versions_cf_, encode_u64_key(high_water_), &bytes);
  if (!status.ok()) return rocks_error("carrying fragments from version " + std::to_string(high_water_), status);
  Expected<VersionRecord> base = decode_version_record(bytes);
  if (!base.ok()) return base.error();
  for (uint32_t fragment : data.carried_fragments) {
    if (data.fragments.count(fragment) || data.optimizer_state.count(fragment))
      return make_error(ErrorCode::invalid_argument, "fragment " + std::to_string(fragment) + " is both carried and passed");
    bool found = std::any_of(base->entries.begin(), base->entries.end(), [&](const BlobEntry& entry) {
      return entry.fragment == fragment && entry.role == BlobRole::parameters;
    });
    if (!found)
      return make_error(ErrorCode::not_found, "carried fragment " + std::to_string(fragment) + " is not in version " +
                                                  std::to_string(high_water_));
    for (const BlobEntry& entry : base->entries)
      if (entry.fragment == fragment) record.entries.push_back(entry);
  }
  return Status::success();
}

namespace {
// What tells a prepared commit's staged files from another's with the same content.
std::string staged_tag(uint64_t ticket) { return "p" + std::to_string(ticket); }
// A blob must stay under 4 GiB, the limit of a RocksDB value.
Status blob_fits(uint32_t fragment, uint64_t size) {
  if (size < (1ull << 32)) return Status::success();
  return make_error(ErrorCode::oversized, "fragment " + std::to_string(fragment) + " blob of " + std::to_string(size) +
                                              " bytes (RocksDB values stop at 4 GiB)");
}
// The fault hook's "prepare.fragment.<id>", once per fragment whose parameters a prepare writes.
template <class Blobs>
Status prepare_faults(const std::function<Status(std::string_view)>& hook, const std::map<uint32_t, Blobs>& fragments) {
  if (!hook) return Status::success();
  for (const auto& [fragment, blob] : fragments) {
    if (Status injected = hook("prepare.fragment." + std::to_string(fragment)); !injected.ok()) return injected;
  }
  return Status::success();
}
}  // namespace

Status CheckpointStore::Impl::hash_blobs(const VersionData& data, std::vector<BlobEntry>& entries,
                                         std::vector<const Blob*>& blobs) const {
  // Hashing is the only per-byte work besides the write itself, and runs outside the lock. Two
  // halves of the blobs hash on two threads, since a commit that changed one fragment still hashes all.
  for (auto [role, role_blobs] : {std::pair{BlobRole::parameters, &data.fragments},
                                  std::pair{BlobRole::optimizer_state, &data.optimizer_state}}) {
    for (const auto& [fragment, blob] : *role_blobs) {
      if (Status fits = blob_fits(fragment, blob.size()); !fits.ok()) return fits;
      entries.push_back(BlobEntry{role, fragment, {}, blob.size()});
      blobs.push_back(&blob);
    }
  }
  auto hash_range = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) entries[i].hash = hash_blob(blobs[i]->data(), blobs[i]->size());
  };
  uint64_t total_bytes = 0;
  for (const Blob* blob : blobs) total_bytes += blob->size();
  if (total_bytes >= (16u << 20) && blobs.size() >= 2) {
    std::thread helper(hash_range, 0, blobs.size() / 2);
    hash_range(blobs.size() / 2, blobs.size());
    helper.join();
  } else {
    hash_range(0, blobs.size());
  }
  return Status::success();
}

Expected<CommitStats> CheckpointStore::Impl::commit(const VersionData& data) {
  if (!data.manifest_json.empty() && !nlohmann::json::accept(data.manifest_json))
    return make_error(ErrorCode::invalid_argument, "manifest of version " + std::to_string(data.version) + " is not JSON");
  std::vector<BlobEntry> entries;
  std::vector<const Blob*> blobs;
  if (Status hashed = hash_blobs(data, entries, blobs); !hashed.ok()) return hashed.error();
  std::vector<BlobBytes> bytes;
  for (const Blob* blob : blobs) bytes.push_back(BlobBytes{blob->data(), blob->size()});
  return land(data, std::move(entries), bytes, {}, "");
}

Expected<CheckpointStore::PreparedCommit> CheckpointStore::Impl::prepare(VersionData data, uint64_t ticket) {
  PreparedCommit prepared;
  prepared.ticket = ticket;
  std::vector<const Blob*> blobs;
  if (Status hashed = hash_blobs(data, prepared.entries, blobs); !hashed.ok()) return hashed.error();
  // The large blobs no version references now are written (a blob referenced now but dropped before
  // the record is written then, from the bytes kept here).
  std::vector<BlobFiles::Pending> pending;
  std::set<std::string> seen;
  for (size_t i = 0; i < blobs.size(); ++i) {
    if (blobs[i]->size() < options_.file_blob_min_bytes) continue;
    const std::string key = encode_blob_key(prepared.entries[i].hash, prepared.entries[i].size);
    std::string ref;
    if (db_->Get(read_options(), refs_cf_, key, &ref).ok() || !seen.insert(key).second) continue;
    pending.push_back(BlobFiles::Pending{blob_file_name(key), blobs[i]->data(), blobs[i]->size()});
    prepared.staged.push_back(pending.back().name);
  }
  if (Status injected = prepare_faults(options_.fault_hook, data.fragments); !injected.ok()) return injected.error();
  if (Status written = files_->write_staged(pending, staged_tag(ticket)); !written.ok()) {
    files_->discard_staged(prepared.staged, staged_tag(ticket));
    return written.error();
  }
  // A staged blob's bytes are durable in its file: they go now, not at the record (a commit's
  // blobs are most of what a syncer holds in flight). The others stay for the record to write.
  for (size_t i = 0; i < blobs.size(); ++i) {
    const std::string name = blob_file_name(encode_blob_key(prepared.entries[i].hash, prepared.entries[i].size));
    if (std::find(prepared.staged.begin(), prepared.staged.end(), name) == prepared.staged.end()) continue;
    auto& role_blobs = prepared.entries[i].role == BlobRole::parameters ? data.fragments : data.optimizer_state;
    Blob().swap(role_blobs[prepared.entries[i].fragment]);
  }
  prepared.data = std::move(data);
  return prepared;
}

namespace {
// XXH3-128 of a file's `size` bytes (hash_blob's value), read in 4 MiB pieces; `keep` gets the bytes.
Expected<BlobHash> hash_file(const std::string& path, uint64_t size, Blob* keep) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) return make_error(ErrorCode::io, "cannot read " + path);
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_128bits_reset(state.get());
  std::vector<uint8_t> piece(std::min<uint64_t>(size, 4u << 20));
  uint64_t done = 0;
  while (done < size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(piece.size(), size - done));
    if (std::fread(piece.data(), 1, want, file) != want) {
      std::fclose(file);
      return make_error(ErrorCode::io, "short read of " + path);
    }
    XXH3_128bits_update(state.get(), piece.data(), want);
    if (keep) keep->insert(keep->end(), piece.begin(), piece.begin() + static_cast<std::ptrdiff_t>(want));
    done += want;
  }
  std::fclose(file);
  XXH128_hash_t hash = XXH3_128bits_digest(state.get());
  return BlobHash{hash.high64, hash.low64};
}
}  // namespace

Expected<CheckpointStore::PreparedCommit> CheckpointStore::Impl::prepare_incoming(IncomingCommit commit,
                                                                                uint64_t ticket) {
  PreparedCommit prepared;
  prepared.ticket = ticket;
  const std::string tag = staged_tag(ticket);
  auto fail = [&](Error error) {
    files_->discard_staged(prepared.staged, tag);
    return error;
  };
  if (Status injected = prepare_faults(options_.fault_hook, commit.fragments); !injected.ok()) return injected.error();
  std::set<std::string> seen;
  for (auto [role, blobs] : {std::pair{BlobRole::parameters, &commit.fragments},
                             std::pair{BlobRole::optimizer_state, &commit.optimizer_state}}) {
    auto& kept = role == BlobRole::parameters ? prepared.data.fragments : prepared.data.optimizer_state;
    for (auto& [fragment, blob] : *blobs) {
      if (Status fits = blob_fits(fragment, blob.size()); !fits.ok()) return fail(fits.error());
      const bool small = blob.size() < options_.file_blob_min_bytes;
      Blob bytes;
      Expected<BlobHash> hash = hash_file(blob.path(), blob.size(), small ? &bytes : nullptr);
      if (!hash) return fail(hash.error());
      prepared.entries.push_back(BlobEntry{role, fragment, *hash, blob.size()});
      kept[fragment] = std::move(bytes);  // empty for a staged blob (commit_prepared)
      if (small) continue;                // its file is unlinked with `commit`
      const std::string name = blob_file_name(encode_blob_key(*hash, blob.size()));
      if (!seen.insert(name).second) continue;  // the same content twice in this commit: staged once
      // Staged even when a version references it now: it may be dropped before the record.
      if (Status staged = files_->stage_file(blob.path(), name, tag); !staged.ok()) return fail(staged.error());
      blob.take_path();
      prepared.staged.push_back(name);
    }
  }
  return prepared;
}

Expected<CommitStats> CheckpointStore::Impl::commit_prepared(PreparedCommit&& prepared, uint64_t version,
                                                             std::string manifest_json,
                                                             std::vector<uint32_t> carried_fragments) {
  if (!manifest_json.empty() && !nlohmann::json::accept(manifest_json)) {
    discard(std::move(prepared));
    return make_error(ErrorCode::invalid_argument, "manifest of version " + std::to_string(version) + " is not JSON");
  }
  prepared.data.version = version;
  prepared.data.manifest_json = std::move(manifest_json);
  prepared.data.carried_fragments = std::move(carried_fragments);
  // In the order of the entries (hash_blobs); a blob a prepare staged has no bytes left.
  std::vector<BlobBytes> blobs;
  for (const auto* role_blobs : {&prepared.data.fragments, &prepared.data.optimizer_state}) {
    for (const auto& [fragment, blob] : *role_blobs) {
      const uint64_t size = prepared.entries[blobs.size()].size;
      blobs.push_back(BlobBytes{blob.size() == size ? blob.data() : nullptr, size});
    }
  }
  return land(prepared.data, std::move(prepared.entries), blobs, prepared.staged, staged_tag(prepared.ticket));
}

void CheckpointStore::Impl::discard(PreparedCommit&& prepared) {
  files_->discard_staged(prepared.staged, staged_tag(prepared.ticket));
}

Expected<CommitStats> CheckpointStore::Impl::land(const VersionData& data, std::vector<BlobEntry> entries,
                                                  const std::vector<BlobBytes>& blobs,
                                                  const std::vector<std::string>& staged, const std::string& tag) {
  // Whatever happens, no staged file outlives this call unpublished.
  std::vector<std::string> unpublished = staged;
  struct DiscardOnExit {
    BlobFiles& files;
    std::vector<std::string>& names;
    const std::string& tag;
    ~DiscardOnExit() { files.discard_staged(names, tag); }
  } discard_on_exit{*files_, unpublished, tag};

  VersionRecord record;
  record.version = data.version;
  record.manifest_json = data.manifest_json;
  record.entries = std::move(entries);
  std::map<std::string, BlobBytes> bytes_of;
  for (size_t i = 0; i < blobs.size(); ++i)
    bytes_of[encode_blob_key(record.entries[i].hash, record.entries[i].size)] = blobs[i];

  std::lock_guard<std::mutex> lock(write_mutex_);
  if (data.version <= high_water_)
    return make_error(ErrorCode::conflict, "version " + std::to_string(data.version) +
                                               " is not above the latest committed version " + std::to_string(high_water_));
  record.committed_unix_ms = now_ms();
  if (!data.carried_fragments.empty()) {
    Status carried = carry_fragments(data, record);
    if (!carried.ok()) return carried.error();
  }
  std::set<uint64_t> after = versions_;
  after.insert(data.version);
  RetentionDecision retention = plan_retention(after, pinned_, options_.retention);

  size_t family_bytes = 0;  // reserve the batch once rather than regrow it through a 100 MB copy
  for (const auto& [key, blob] : bytes_of)
    if (blob.size < options_.file_blob_min_bytes) family_bytes += blob.size;
  rocksdb::WriteBatch batch(family_bytes + (64u << 10));
  CommitStats stats;
  std::vector<BlobFiles::Pending> new_files;
  std::vector<std::string> dead_files;
  Status referenced = stage_references(batch, record.entries, bytes_of, retention.drop, stats, new_files, dead_files);
  if (!referenced.ok()) return referenced.error();
  batch.Put(versions_cf_, encode_u64_key(data.version), encode_version_record(record));
  batch.Put(meta_cf_, kHighWaterKey, std::to_string(data.version));
  uint64_t next_sequence = next_event_sequence_;
  stage_event(batch, next_sequence, "commit",
              nlohmann::json{{"version", data.version}, {"blobs_written", stats.blobs_written},
                             {"bytes_written", stats.bytes_written}, {"deduplicated", stats.blobs_deduplicated}}.dump());
  if (!retention.drop.empty())
    stage_event(batch, next_sequence, "retention",
                nlohmann::json{{"dropped", retention.drop}, {"blobs_deleted", stats.blobs_deleted},
                               {"reason", retention.reason}}.dump());
  if (options_.fault_hook) {
    if (Status injected = options_.fault_hook("commit.files"); !injected.ok()) return injected.error();
  }
  // The new files a prepare staged are published; the others (none, unless a blob was deduplicated
  // at prepare and dropped since) are written now.
  std::vector<BlobFiles::Pending> to_write;
  std::vector<std::string> to_publish;
  for (const BlobFiles::Pending& file : new_files) {
    auto it = std::find(unpublished.begin(), unpublished.end(), file.name);
    if (it == unpublished.end()) {
      to_write.push_back(file);
    } else {
      to_publish.push_back(file.name);
      unpublished.erase(it);
    }
  }
  for (const BlobFiles::Pending& file : to_write) {
    if (!file.data) return make_error(ErrorCode::inconsistent, "blob " + file.name + " was let go by its prepare but not staged");
  }
  if (Status files_written = files_->write_all(to_write); !files_written.ok()) return files_written.error();
  if (Status published = files_->publish(to_publish, tag); !published.ok()) return published.error();
  Status written = write("commit", batch);
  if (!written.ok()) return written.error();
  files_->remove_later(dead_files);

  versions_.swap(after);
  for (uint64_t dropped : retention.drop) versions_.erase(dropped);
  high_water_ = data.version;
  next_event_sequence_ = next_sequence;
  log_->debug("committed version {}: {} blobs ({} bytes) written, {} deduplicated; {}", data.version,
              stats.blobs_written, stats.bytes_written, stats.blobs_deduplicated, retention.reason);
  return stats;
}

Status CheckpointStore::Impl::set_pin(uint64_t version, bool pinned) {
  std::lock_guard<std::mutex> lock(write_mutex_);
  if (!versions_.count(version)) return make_error(ErrorCode::not_found, "no version " + std::to_string(version) + " to " + (pinned ? "pin" : "unpin"));
  if (pinned_.count(version) == static_cast<size_t>(pinned)) return Status::success();
  rocksdb::WriteBatch batch;
  if (pinned) batch.Put(meta_cf_, encode_pin_key(version), "");
  else batch.Delete(meta_cf_, encode_pin_key(version));
  uint64_t next_sequence = next_event_sequence_;
  stage_event(batch, next_sequence, pinned ? "pin" : "unpin", nlohmann::json{{"version", version}}.dump());
  Status written = write(pinned ? "pin" : "unpin", batch);
  if (!written.ok()) return written;
  if (pinned) pinned_.insert(version);
  else pinned_.erase(version);
  next_event_sequence_ = next_sequence;
  return Status::success();
}

Expected<std::vector<uint64_t>> CheckpointStore::Impl::apply_retention() {
  std::lock_guard<std::mutex> lock(write_mutex_);
  RetentionDecision retention = plan_retention(versions_, pinned_, options_.retention);
  if (retention.drop.empty()) return std::vector<uint64_t>{};
  rocksdb::WriteBatch batch;
  CommitStats stats;
  std::vector<BlobFiles::Pending> new_files;
  std::vector<std::string> dead_files;
  Status staged = stage_references(batch, {}, {}, retention.drop, stats, new_files, dead_files);
  if (!staged.ok()) return staged.error();
  uint64_t next_sequence = next_event_sequence_;
  stage_event(batch, next_sequence, "retention",
              nlohmann::json{{"dropped", retention.drop}, {"blobs_deleted", stats.blobs_deleted},
                             {"reason", retention.reason}}.dump());
  Status written = write("retention", batch);
  if (!written.ok()) return written.error();
  files_->remove_later(dead_files);
  for (uint64_t dropped : retention.drop) versions_.erase(dropped);
  next_event_sequence_ = next_sequence;
  log_->info("retention: {}", retention.reason);
  return retention.drop;
}

Status CheckpointStore::Impl::append_event(std::string_view kind, std::string_view json) {
  if (kind.empty()) return make_error(ErrorCode::invalid_argument, "event kind is empty");
  if (!nlohmann::json::accept(json)) return make_error(ErrorCode::invalid_argument, "event '" + std::string(kind) + "' text is not JSON");
  std::lock_guard<std::mutex> lock(write_mutex_);
  rocksdb::WriteBatch batch;
  uint64_t next_sequence = next_event_sequence_;
  stage_event(batch, next_sequence, kind, std::string(json));
  Status written = write("event", batch);
  if (!written.ok()) return written;
  next_event_sequence_ = next_sequence;
  return Status::success();
}

}  // namespace archipelago::storage

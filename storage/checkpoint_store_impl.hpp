// CheckpointStore's private half, shared by its three source files: checkpoint_store.cpp (open and
// the public face), checkpoint_store_write.cpp (commit, retention, pins, events) and
// checkpoint_store_read.cpp (get, latest, list, stats). Not for use outside storage/.
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <set>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include "common/log.hpp"
#include "storage/blob_files.hpp"
#include "storage/checkpoint_store.hpp"

namespace archipelago::storage {

// RocksDB's status as an error value, keeping the distinction callers branch on.
inline Error rocks_error(const std::string& what, const rocksdb::Status& status) {
  return make_error(status.IsNotFound() ? ErrorCode::not_found
                    : status.IsCorruption() ? ErrorCode::corrupt
                                            : ErrorCode::io,
                    what + ": " + status.ToString());
}

// A blob's bytes as a commit passes them: `data` is null once a prepare made them durable in a
// staged file and let them go (CheckpointStore::prepare).
struct BlobBytes {
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

inline std::string_view view(const Blob& blob) {
  return std::string_view(reinterpret_cast<const char*>(blob.data()), blob.size());
}

class CheckpointStore::Impl {
 public:
  ~Impl() { close(); }
  void close() {
    for (rocksdb::ColumnFamilyHandle* handle : handles_) db_->DestroyColumnFamilyHandle(handle);
    handles_.clear();
    versions_cf_ = blobs_cf_ = refs_cf_ = meta_cf_ = events_cf_ = nullptr;
    if (db_) db_->Close();
    db_.reset();
  }

  Status open(const std::string& path, StoreOptions options);
  // A read-only instance of the store at `path` (RocksDB's OpenForReadOnly, which takes no lock and
  // writes nothing): it sees what was durable when it was opened; catch_up opens it again.
  Status open_follower(const std::string& path);
  Status catch_up() { return open_follower(follower_path_); }
  // A follower whose last catch_up failed holds no database until the next one succeeds.
  Status follower_open() const {
    if (db_) return Status::success();
    return make_error(ErrorCode::unavailable, "the store at " + follower_path_ + " is not open (its last catch-up failed)");
  }
  Expected<CommitStats> commit(const VersionData& data);
  Expected<PreparedCommit> prepare(VersionData data, uint64_t ticket);
  Expected<PreparedCommit> prepare_incoming(IncomingCommit commit, uint64_t ticket);
  Expected<IncomingBlob> incoming(uint64_t size) {
    return IncomingBlob::create(files_->incoming_path(std::to_string(++incoming_files_)), size);
  }
  Expected<CommitStats> commit_prepared(PreparedCommit&& prepared, uint64_t version, std::string manifest_json,
                                        std::vector<uint32_t> carried_fragments);
  void discard(PreparedCommit&& prepared);
  Status read_version(const rocksdb::Snapshot* snapshot, uint64_t version, VersionData* out) const;
  Expected<VersionData> latest(bool copy_bytes, uint64_t* version_out) const;
  // read_version on a snapshot of its own, so that a concurrent retention cannot delete half of it.
  Status read_consistent(uint64_t version, VersionData* out) const {
    ReadView view(*this);
    return read_version(view.snapshot(), version, out);
  }
  // The newest intact version's number, and one version read whole (every blob verified): what
  // CheckpointStore and StoreFollower both answer.
  Expected<uint64_t> latest_version() const {
    uint64_t version = 0;
    Expected<VersionData> found = latest(false, &version);
    if (!found.ok()) return found.error();
    return version;
  }
  Expected<VersionData> get(uint64_t version) const {
    VersionData data;
    Status status = read_consistent(version, &data);
    if (!status.ok()) return status.error();
    return data;
  }
  Expected<std::vector<VersionInfo>> list() const;
  Status set_pin(uint64_t version, bool pinned);
  Expected<std::vector<uint64_t>> apply_retention();
  Expected<StoreStats> stats() const;
  Status append_event(std::string_view kind, std::string_view json);
  Expected<std::vector<Event>> recent_events(size_t count, std::string_view kind) const;
  uint64_t high_water() const {
    std::lock_guard<std::mutex> lock(write_mutex_);
    return high_water_;
  }

 private:
  // A snapshot to read on. A follower (a read-only instance) needs none: what it sees changes only
  // at catch_up. (Blob files are outside RocksDB: one removed meanwhile reads as not_found.)
  class ReadView {
   public:
    explicit ReadView(const Impl& impl) {
      if (!impl.follower_) managed_.emplace(impl.db_.get());
    }
    const rocksdb::Snapshot* snapshot() const { return managed_ ? managed_->snapshot() : nullptr; }

   private:
    mutable std::optional<rocksdb::ManagedSnapshot> managed_;
  };

  int64_t now_ms() const {
    if (options_.clock_unix_ms) return options_.clock_unix_ms();
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch()).count();
  }
  rocksdb::ReadOptions read_options(const rocksdb::Snapshot* snapshot = nullptr) const {
    rocksdb::ReadOptions read;
    read.verify_checksums = true;
    read.snapshot = snapshot;
    return read;
  }
  Status write(std::string_view name, rocksdb::WriteBatch& batch);
  void stage_event(rocksdb::WriteBatch& batch, uint64_t& next_sequence, std::string_view kind,
                   const std::string& json);
  // Stages the deletion of `drops` and every refcount change implied by adding `added` entries;
  // `bytes_of` finds the bytes of a blob the batch must store.
  // New large blobs go to `new_files` (to be written before the batch); blob files whose last
  // reference the batch removes go to `dead_files` (to be unlinked after it).
  Status stage_references(rocksdb::WriteBatch& batch, const std::vector<BlobEntry>& added,
                          const std::map<std::string, BlobBytes>& bytes_of,
                          const std::vector<uint64_t>& drops, CommitStats& stats,
                          std::vector<BlobFiles::Pending>& new_files, std::vector<std::string>& dead_files);
  // The entries of `data`'s blobs (parameters, then optimizer state), hashed, and the blobs in that
  // order; oversized when one is over 4 GiB.
  Status hash_blobs(const VersionData& data, std::vector<BlobEntry>& entries, std::vector<const Blob*>& blobs) const;
  // Lands a version under the write mutex: `staged` names blob files already written staged with
  // `tag` (published instead of written; those left unpublished are discarded).
  Expected<CommitStats> land(const VersionData& data, std::vector<BlobEntry> entries,
                             const std::vector<BlobBytes>& blobs, const std::vector<std::string>& staged,
                             const std::string& tag);
  // Appends the newest version's entries for data.carried_fragments to `record`.
  Status carry_fragments(const VersionData& data, VersionRecord& record);
  // Deletes blob files that no `refs` entry names: left by a crash between files and batch.
  Status sweep_orphan_files();
  // corrupt: an unreadable schema version; wrong_version: one newer than this build reads.
  static Status check_schema(const std::string& path, const std::string& value);
  // The column family handles, by name, from those RocksDB opened.
  void find_families(const std::vector<rocksdb::ColumnFamilyDescriptor>& descriptors);

  std::shared_ptr<spdlog::logger> log_ = component_logger("store");
  StoreOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
  bool follower_ = false;  // opened by open_follower: reads only
  std::string follower_path_;
  std::atomic<uint64_t> incoming_files_{0};  // names IncomingBlobs apart
  std::unique_ptr<BlobFiles> files_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* versions_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* blobs_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* refs_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* events_cf_ = nullptr;

  // Writer-side caches of what is in the database, guarded by write_mutex_ and changed only after
  // the batch that changes the database succeeded.
  mutable std::mutex write_mutex_;
  std::set<uint64_t> versions_;
  std::set<uint64_t> pinned_;
  uint64_t high_water_ = 0;
  uint64_t next_event_sequence_ = 0;
};

}  // namespace archipelago::storage

// The checkpoint store: every committed global parameter version, durably, in RocksDB.
//
// A version is the parameters of each fragment, the outer-optimizer state of each fragment and a small
// JSON manifest. `commit` writes a version in one atomic, (by default) synced WriteBatch, so after a
// crash at any instant the store holds exactly the versions whose `commit` returned success, and
// possibly the one in flight, whole or not at all. Version numbers are strictly increasing, even
// across retention and restarts. Blobs are content-addressed (XXH3-128 + size): a fragment that did not
// change since a kept version is not written again, and a blob no kept version references is deleted
// in the same batch that drops its last reference. Large blobs are files beside the database, written
// and synced before the batch that references them (blob_files.hpp). Every read re-hashes the bytes; a damaged version
// is reported (corrupt / not_found) and `latest_committed` falls back to the newest intact one.
//
// Thread-safety: every method may be called from any thread. Writers (commit, pin, unpin, retention,
// events) serialize on an internal mutex; readers run concurrently on a RocksDB snapshot (a read of a
// version that retention drops at that moment may report not_found for it). One process at a time may
// open a store (RocksDB's lock file). No method throws; errors are values.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "storage/blob_files.hpp"
#include "storage/retention.hpp"
#include "storage/store_format.hpp"

namespace archipelago::storage {

using Blob = std::vector<uint8_t>;

// One global version as the syncer produces it and a rejoining learner consumes it.
struct VersionData {
  uint64_t version = 0;
  std::map<uint32_t, Blob> fragments;        // fragment id -> fp32 parameters, raw bytes
  std::map<uint32_t, Blob> optimizer_state;  // fragment id -> opaque outer-optimizer state (momentum)
  std::string manifest_json;                 // caller's JSON (contributors, losses, ...); empty or valid JSON
  int64_t committed_unix_ms = 0;             // set by the store on commit; ignored on input
  // On commit only: fragments whose parameters and optimizer state are taken unchanged from the
  // newest committed version, without passing (or hashing) their bytes. Passing the unchanged bytes
  // instead works too; they are recognised by hash. Empty on read.
  std::vector<uint32_t> carried_fragments;
};

// What `list` says about a version without reading its blobs.
struct VersionInfo {
  uint64_t version = 0;
  int64_t committed_unix_ms = 0;
  bool pinned = false;
  uint64_t total_bytes = 0;         // parameters plus optimizer state
  std::vector<BlobEntry> entries;   // fragment ids, roles, hashes, sizes
  std::string manifest_json;
};

// What one commit did, for tests, benchmarks and the audit log.
struct CommitStats {
  uint32_t blobs_written = 0;
  uint64_t bytes_written = 0;       // blob bytes newly stored
  uint32_t blobs_deduplicated = 0;  // entries whose bytes were already stored
  std::vector<uint64_t> versions_dropped;
  uint32_t blobs_deleted = 0;
};

struct StoreStats {
  uint64_t versions = 0;
  uint64_t blobs = 0;       // distinct stored blobs
  uint64_t blob_bytes = 0;  // their total size
  uint64_t blob_files = 0;  // how many of them are kept as files
  uint64_t pinned = 0;
};

struct Event {
  uint64_t sequence = 0;  // increasing; survives restarts
  int64_t unix_ms = 0;
  std::string kind;
  std::string json;
};

// Fault-injection seam: called before each write batch reaches RocksDB with the name of the write
// ("commit.files" before a commit writes its blob files, then "commit", "pin", "unpin", "retention",
// "event"). A non-ok Status aborts that write and is returned
// to the caller as if RocksDB had refused it, so tests can prove a failed write leaves no trace.
using WriteFaultHook = std::function<Status(std::string_view write_name)>;

struct StoreOptions {
  bool sync = true;                        // fsync the WAL on every write; off only for tests/benchmarks
  RetentionPolicy retention{};             // applied after every commit, inside the commit's batch
  uint64_t file_blob_min_bytes = 1 << 20;  // blobs at least this large are stored as files (see blob_files.hpp)
  uint64_t max_events = 100000;            // the event table keeps roughly this many newest events
  WriteFaultHook fault_hook;               // empty in production
  std::function<int64_t()> clock_unix_ms;  // empty = system clock
};

class CheckpointStore {
 public:
  // Opens (creating if absent) the store at `path`. Fails with wrong_version for a store written by a
  // newer schema, io when RocksDB cannot open it (e.g. another process holds it).
  static Expected<std::unique_ptr<CheckpointStore>> open(const std::string& path, StoreOptions options = {});

  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  // Atomically stores `data` as the newest version and then applies retention in the same batch.
  // conflict: data.version is not above every version ever committed. invalid_argument: bad manifest
  // JSON, or a carried fragment that is also passed. oversized: a blob over 4 GiB. not_found: a
  // carried fragment the newest version lacks. io: RocksDB (or the fault hook) refused the write; nothing changed.
  Expected<CommitStats> commit(const VersionData& data);

  // A commit in two steps, for a caller with several commits under way (the syncer commits each
  // fragment's rounds independently): `prepare` checks and hashes the blobs and writes the large new
  // ones to staged files, durably, without the write mutex, so it runs on any thread while other
  // commits land; `commit_prepared` then writes the record exactly as `commit` would (the version
  // is chosen now, so records land in the order they are made), publishing the staged files rather
  // than writing them. A prepared commit that is not committed is dropped with `discard`; if the
  // process dies first, its staged files are temporaries the next open deletes. The fault hook
  // sees "prepare.fragment.<id>" once per fragment a prepare writes.
  struct PreparedCommit {
    uint64_t ticket = 0;                 // the caller's name for it (names its staged files)
    VersionData data;                    // the blobs not staged in files (kept: a blob deduplicated at
                                         // prepare may be gone by the record); a staged one is empty
    std::vector<BlobEntry> entries;      // hashed, in the order of data's parameters then optimizer state
    std::vector<std::string> staged;     // names of the blob files written staged
  };
  Expected<PreparedCommit> prepare(VersionData data, uint64_t ticket);
  // The same prepare for blobs that arrived as files, so that a commit's bytes are never held whole
  // in memory: `incoming` makes the file for one blob of `size` bytes (a temporary, in the blob
  // directory), the caller writes it as its pieces arrive, and `prepare_incoming` hashes each by
  // reading it back and renames a large one to its staged name (a small one is read back, to go into
  // RocksDB at the record). Files it did not stage are unlinked.
  struct IncomingCommit {
    std::map<uint32_t, IncomingBlob> fragments;        // as VersionData::fragments
    std::map<uint32_t, IncomingBlob> optimizer_state;  // as VersionData::optimizer_state
  };
  Expected<IncomingBlob> incoming(uint64_t size);
  Expected<PreparedCommit> prepare_incoming(IncomingCommit commit, uint64_t ticket);
  Expected<CommitStats> commit_prepared(PreparedCommit&& prepared, uint64_t version, std::string manifest_json,
                                        std::vector<uint32_t> carried_fragments);
  void discard(PreparedCommit&& prepared);

  // The newest version whose record and blobs all verify; damaged newer ones are logged and skipped.
  // not_found when no intact version exists.
  Expected<VersionData> latest_committed() const;
  Expected<uint64_t> latest_committed_version() const;  // same walk, without copying the bytes out

  // One version, every blob verified. not_found: no such version or a blob is missing. corrupt: a
  // checksum does not match.
  Expected<VersionData> get(uint64_t version) const;
  Status verify(uint64_t version) const;

  // Every stored version, oldest first, from the records alone (no blob reads, no verification).
  Expected<std::vector<VersionInfo>> list() const;

  // Highest version ever committed (0 when none); the next commit must exceed it.
  uint64_t high_water_version() const;

  // A pinned version survives retention until unpinned. not_found for an unknown version.
  Status pin(uint64_t version);
  Status unpin(uint64_t version);

  // Applies the retention policy now (e.g. after an unpin); returns the versions dropped.
  Expected<std::vector<uint64_t>> apply_retention();

  Expected<StoreStats> stats() const;

  // The audit log: append an event (kind, JSON text) stamped with the time; read the newest N,
  // newest first, of every kind or of `kind` only (however many events of other kinds came after
  // them, within the log's max_events). The store logs its own commits, drops, pins and unpins here too.
  Status append_event(std::string_view kind, std::string_view json);
  Expected<std::vector<Event>> recent_events(size_t count, std::string_view kind = {}) const;

  class Impl;

 private:
  explicit CheckpointStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A read-only view of a store that another process has open (a coordinator, a syncer shard):
// RocksDB's read-only instance, which takes no lock, writes nothing in the store's directory, and
// sees what was durable when it was opened; catch_up() opens it again to see what was committed
// since. (RocksDB 7.8's secondary instances, made for this, crash reading the store's blob files.)
// Reads verify every blob as CheckpointStore's do; a version that the owner's retention removed
// after the catch-up reads as not_found: catch up and ask again.
class StoreFollower {
 public:
  static Expected<std::unique_ptr<StoreFollower>> open(const std::string& path);
  ~StoreFollower();
  StoreFollower(const StoreFollower&) = delete;
  StoreFollower& operator=(const StoreFollower&) = delete;

  Status catch_up();
  Expected<uint64_t> latest_committed_version() const;
  Expected<VersionData> get(uint64_t version) const;

 private:
  explicit StoreFollower(std::unique_ptr<CheckpointStore::Impl> impl);
  std::unique_ptr<CheckpointStore::Impl> impl_;
};

}  // namespace archipelago::storage

// How the checkpoint store keeps its promises on RocksDB.
//
// Atomicity: a commit is one WriteBatch holding the new blobs, the refcount changes, the version
// record, the high-water mark, the dropped versions' deletions and the audit events; RocksDB applies a
// batch whole or not at all, also across a crash (WAL recovery), so no reader ever sees half a version.
// Garbage collection is reference counting kept in the same batch, so counts never drift from records.
// Large blobs are files made durable before that batch; files no batch references are swept on open.
// This file: opening (schema check, caches, sweep) and the public face.
#include "storage/checkpoint_store.hpp"

#include "storage/checkpoint_store_impl.hpp"
#include "storage/rocks_layout.hpp"

namespace archipelago::storage {

Status CheckpointStore::Impl::open(const std::string& path, StoreOptions options) {
  options_ = std::move(options);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = make_family_descriptors(path);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status status = rocksdb::DB::Open(make_db_options(), path, descriptors, &handles_, &raw);
  if (!status.ok()) return make_error(ErrorCode::io, "cannot open checkpoint store at " + path + ": " + status.ToString());
  db_.reset(raw);
  find_families(descriptors);

  std::string value;
  status = db_->Get(read_options(), meta_cf_, kSchemaVersionKey, &value);
  if (status.ok()) {
    if (Status readable = check_schema(path, value); !readable.ok()) return readable;
  } else if (status.IsNotFound()) {
    std::unique_ptr<rocksdb::Iterator> any(db_->NewIterator(read_options(), versions_cf_));
    any->SeekToFirst();
    if (any->Valid()) return make_error(ErrorCode::corrupt, "store at " + path + " holds versions but no schema version");
    rocksdb::WriteOptions write;
    write.sync = true;
    status = db_->Put(write, meta_cf_, kSchemaVersionKey, std::to_string(kSchemaVersion));
    if (!status.ok()) return rocks_error("writing the schema version", status);
  } else {
    return rocks_error("reading the schema version", status);
  }

  if (db_->Get(read_options(), meta_cf_, kHighWaterKey, &value).ok()) {
    try {
      high_water_ = std::stoull(value);
    } catch (...) {
      return make_error(ErrorCode::corrupt, "store at " + path + " has an unreadable high-water version '" + value + "'");
    }
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options(), versions_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    Expected<uint64_t> version = decode_u64_key(it->key().ToStringView());
    if (version.ok()) versions_.insert(*version);
  }
  if (!versions_.empty()) high_water_ = std::max(high_water_, *versions_.rbegin());
  it.reset(db_->NewIterator(read_options(), meta_cf_));
  for (it->Seek(kPinPrefix); it->Valid() && it->key().starts_with(kPinPrefix); it->Next()) {
    Expected<uint64_t> version = decode_u64_key(it->key().ToStringView().substr(std::string_view(kPinPrefix).size()));
    if (version.ok()) pinned_.insert(*version);
  }
  it.reset(db_->NewIterator(read_options(), events_cf_));
  it->SeekToLast();
  if (it->Valid()) {
    Expected<uint64_t> last = decode_u64_key(it->key().ToStringView());
    if (last.ok()) next_event_sequence_ = *last + 1;
  }
  files_ = std::make_unique<BlobFiles>(path + "/" + kBlobFilesDirectory);
  if (Status created = files_->create_directory(); !created.ok()) return created;
  if (Status swept = sweep_orphan_files(); !swept.ok()) return swept;
  log_->info("opened checkpoint store {}: {} versions (high water {}), {} pinned", path, versions_.size(),
             high_water_, pinned_.size());
  return Status::success();
}

Status CheckpointStore::Impl::check_schema(const std::string& path, const std::string& value) {
  uint64_t schema = 0;
  try {
    schema = std::stoull(value);
  } catch (...) {
    return make_error(ErrorCode::corrupt, "store at " + path + " has an unreadable schema version '" + value + "'");
  }
  if (schema > kSchemaVersion) {
    return make_error(ErrorCode::wrong_version,
                      "store at " + path + " was written with schema version " + std::to_string(schema) +
                          "; this build reads schema versions up to " + std::to_string(kSchemaVersion) +
                          " (use a newer build, or a different store path)");
  }
  return Status::success();
}

void CheckpointStore::Impl::find_families(const std::vector<rocksdb::ColumnFamilyDescriptor>& descriptors) {
  for (size_t i = 0; i < descriptors.size(); ++i) {
    const std::string& name = descriptors[i].name;
    if (name == kVersionsFamily) versions_cf_ = handles_[i];
    if (name == kBlobsFamily) blobs_cf_ = handles_[i];
    if (name == kRefsFamily) refs_cf_ = handles_[i];
    if (name == kMetaFamily) meta_cf_ = handles_[i];
    if (name == kEventsFamily) events_cf_ = handles_[i];
  }
}

Status CheckpointStore::Impl::open_follower(const std::string& path) {
  close();
  follower_ = true;
  follower_path_ = path;
  std::vector<std::string> existing;
  if (!rocksdb::DB::ListColumnFamilies(make_db_options(), path, &existing).ok()) {
    return make_error(ErrorCode::not_found, "no checkpoint store at " + path);
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& name : existing) descriptors.emplace_back(name, make_family_options(name));
  rocksdb::DBOptions db_options = make_db_options();
  db_options.create_if_missing = false;
  db_options.create_missing_column_families = false;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status status = rocksdb::DB::OpenForReadOnly(db_options, path, descriptors, &handles_, &raw);
  if (!status.ok()) return make_error(ErrorCode::io, "cannot read checkpoint store at " + path + ": " + status.ToString());
  db_.reset(raw);
  find_families(descriptors);
  // Not a store this build reads: closed again, so that no read goes to it.
  auto refuse = [&](Error error) -> Status {
    close();
    return error;
  };
  if (!versions_cf_ || !blobs_cf_ || !refs_cf_ || !meta_cf_) {
    return refuse(make_error(ErrorCode::corrupt, path + " is not a checkpoint store (a column family is missing)"));
  }
  std::string value;
  status = db_->Get(read_options(), meta_cf_, kSchemaVersionKey, &value);
  if (!status.ok()) return refuse(rocks_error("reading the schema version of " + path, status));
  if (Status readable = check_schema(path, value); !readable.ok()) return refuse(readable.error());
  files_ = std::make_unique<BlobFiles>(path + "/" + kBlobFilesDirectory);
  return Status::success();
}

Status CheckpointStore::Impl::sweep_orphan_files() {
  std::set<std::string> referenced;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options(), refs_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    Expected<BlobRef> ref = decode_blob_ref(it->value().ToStringView());
    if (ref.ok() && ref->location == BlobLocation::file) referenced.insert(blob_file_name(it->key().ToStringView()));
  }
  if (!it->status().ok()) return rocks_error("scanning blob references", it->status());
  size_t removed = 0;
  for (const std::string& name : files_->list_and_remove_temporaries()) {
    if (referenced.count(name)) continue;
    files_->remove(name);
    ++removed;
  }
  if (removed > 0) log_->warn("removed {} unreferenced blob files (left by an interrupted commit or GC)", removed);
  return Status::success();
}

// The public face forwards to Impl so that callers never see RocksDB headers, and turns any exception
// from below (allocation failure, a library throwing) into an error value at the boundary.
namespace {
template <class Body>
auto guarded(const char* what, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception& exception) {
    return make_error(ErrorCode::io, std::string(what) + " failed: " + exception.what());
  } catch (...) {
    return make_error(ErrorCode::io, std::string(what) + " failed with an unknown exception");
  }
}
}  // namespace

Expected<std::unique_ptr<CheckpointStore>> CheckpointStore::open(const std::string& path, StoreOptions options) {
  return guarded("open", [&]() -> Expected<std::unique_ptr<CheckpointStore>> {
    auto impl = std::make_unique<Impl>();
    Status opened = impl->open(path, std::move(options));
    if (!opened.ok()) return opened.error();
    return std::unique_ptr<CheckpointStore>(new CheckpointStore(std::move(impl)));
  });
}

CheckpointStore::CheckpointStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointStore::~CheckpointStore() = default;

Expected<CommitStats> CheckpointStore::commit(const VersionData& data) {
  return guarded("commit", [&] { return impl_->commit(data); });
}
Expected<CheckpointStore::PreparedCommit> CheckpointStore::prepare(VersionData data, uint64_t ticket) {
  return guarded("prepare", [&] { return impl_->prepare(std::move(data), ticket); });
}
Expected<CommitStats> CheckpointStore::commit_prepared(PreparedCommit&& prepared, uint64_t version,
                                                       std::string manifest_json,
                                                       std::vector<uint32_t> carried_fragments) {
  return guarded("commit", [&] {
    return impl_->commit_prepared(std::move(prepared), version, std::move(manifest_json), std::move(carried_fragments));
  });
}
Expected<IncomingBlob> CheckpointStore::incoming(uint64_t size) {
  return impl_->incoming(size);
}

Expected<CheckpointStore::PreparedCommit> CheckpointStore::prepare_incoming(IncomingCommit commit, uint64_t ticket) {
  return guarded("prepare", [&] { return impl_->prepare_incoming(std::move(commit), ticket); });
}

void CheckpointStore::discard(PreparedCommit&& prepared) { impl_->discard(std::move(prepared)); }

Expected<VersionData> CheckpointStore::latest_committed() const {
  return guarded("latest_committed", [&] { return impl_->latest(true, nullptr); });
}
Expected<uint64_t> CheckpointStore::latest_committed_version() const {
  return guarded("latest_committed_version", [&] { return impl_->latest_version(); });
}
Expected<VersionData> CheckpointStore::get(uint64_t version) const {
  return guarded("get", [&] { return impl_->get(version); });
}
Status CheckpointStore::verify(uint64_t version) const {
  return guarded("verify", [&] { return impl_->read_consistent(version, nullptr); });
}
Expected<std::vector<VersionInfo>> CheckpointStore::list() const {
  return guarded("list", [&] { return impl_->list(); });
}
uint64_t CheckpointStore::high_water_version() const { return impl_->high_water(); }
Status CheckpointStore::pin(uint64_t version) {
  return guarded("pin", [&] { return impl_->set_pin(version, true); });
}
Status CheckpointStore::unpin(uint64_t version) {
  return guarded("unpin", [&] { return impl_->set_pin(version, false); });
}
Expected<std::vector<uint64_t>> CheckpointStore::apply_retention() {
  return guarded("apply_retention", [&] { return impl_->apply_retention(); });
}
Expected<StoreStats> CheckpointStore::stats() const {
  return guarded("stats", [&] { return impl_->stats(); });
}
Status CheckpointStore::append_event(std::string_view kind, std::string_view json) {
  return guarded("append_event", [&] { return impl_->append_event(kind, json); });
}
Expected<std::vector<Event>> CheckpointStore::recent_events(size_t count, std::string_view kind) const {
  return guarded("recent_events", [&] { return impl_->recent_events(count, kind); });
}

}  // namespace archipelago::storage

namespace archipelago::storage {

Expected<std::unique_ptr<StoreFollower>> StoreFollower::open(const std::string& path) {
  return guarded("follow", [&]() -> Expected<std::unique_ptr<StoreFollower>> {
    auto impl = std::make_unique<CheckpointStore::Impl>();
    Status opened = impl->open_follower(path);
    if (!opened.ok()) return opened.error();
    return std::unique_ptr<StoreFollower>(new StoreFollower(std::move(impl)));
  });
}

StoreFollower::StoreFollower(std::unique_ptr<CheckpointStore::Impl> impl) : impl_(std::move(impl)) {}
StoreFollower::~StoreFollower() = default;

Status StoreFollower::catch_up() {
  return guarded("catch_up", [&] { return impl_->catch_up(); });
}
Expected<uint64_t> StoreFollower::latest_committed_version() const {
  return guarded("latest_committed_version", [&]() -> Expected<uint64_t> {
    if (Status open = impl_->follower_open(); !open.ok()) return open.error();
    return impl_->latest_version();
  });
}
Expected<VersionData> StoreFollower::get(uint64_t version) const {
  return guarded("get", [&]() -> Expected<VersionData> {
    if (Status open = impl_->follower_open(); !open.ok()) return open.error();
    return impl_->get(version);
  });
}

}  // namespace archipelago::storage

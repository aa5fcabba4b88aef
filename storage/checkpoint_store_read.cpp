// CheckpointStore's readers: each reads on a snapshot and re-hashes every blob it returns.
#include "storage/checkpoint_store_impl.hpp"

namespace archipelago::storage {

Status CheckpointStore::Impl::read_version(const rocksdb::Snapshot* snapshot, uint64_t version,
                                           VersionData* out) const {
  std::string bytes;
  rocksdb::Status status = db_->Get(read_options(snapshot), versions_cf_, encode_u64_key(version), &bytes);
  if (!status.ok()) return rocks_error("version " + std::to_string(version), status);
  Expected<VersionRecord> record = decode_version_record(bytes);
  if (!record.ok()) return make_error(record.error().code, "version " + std::to_string(version) + ": " + record.error().reason);
  if (record->version != version)
    return make_error(ErrorCode::corrupt, "record under version " + std::to_string(version) + " says " +
                                              std::to_string(record->version));
  if (out) {
    out->version = version;
    out->committed_unix_ms = record->committed_unix_ms;
    out->manifest_json = record->manifest_json;
  }
  rocksdb::PinnableSlice family_bytes;
  std::string file_bytes;
  for (const BlobEntry& entry : record->entries) {
    std::string what = "version " + std::to_string(version) + " fragment " + std::to_string(entry.fragment) +
                       (entry.role == BlobRole::parameters ? " parameters" : " optimizer state") + " blob " +
                       entry.hash.to_hex();
    std::string key = encode_blob_key(entry.hash, entry.size);
    std::string ref_bytes;
    status = db_->Get(read_options(snapshot), refs_cf_, key, &ref_bytes);
    if (status.IsNotFound()) return make_error(ErrorCode::not_found, what + " has no reference entry");
    if (!status.ok()) return rocks_error(what, status);
    Expected<BlobRef> ref = decode_blob_ref(ref_bytes);
    if (!ref.ok()) return make_error(ref.error().code, what + ": " + ref.error().reason);
    std::string_view blob;
    if (ref->location == BlobLocation::file) {
      Status read = files_->read(blob_file_name(key), file_bytes);
      if (!read.ok()) return make_error(read.error().code, what + ": " + read.error().reason);
      blob = file_bytes;
    } else {
      family_bytes.Reset();
      status = db_->Get(read_options(snapshot), blobs_cf_, key, &family_bytes);
      if (status.IsNotFound()) return make_error(ErrorCode::not_found, what + " is missing");
      if (!status.ok()) return rocks_error(what, status);
      blob = family_bytes.ToStringView();
    }
    if (blob.size() != entry.size)
      return make_error(ErrorCode::corrupt, what + " holds " + std::to_string(blob.size()) + " bytes, expected " +
                                                std::to_string(entry.size));
    if (!(hash_blob(reinterpret_cast<const uint8_t*>(blob.data()), blob.size()) == entry.hash))
      return make_error(ErrorCode::corrupt, what + " fails its checksum");
    if (out) {
      std::map<uint32_t, Blob>& target = entry.role == BlobRole::parameters ? out->fragments : out->optimizer_state;
      const uint8_t* begin = reinterpret_cast<const uint8_t*>(blob.data());
      target[entry.fragment].assign(begin, begin + blob.size());
    }
  }
  return Status::success();
}

Expected<VersionData> CheckpointStore::Impl::latest(bool copy_bytes, uint64_t* version_out) const {
  ReadView snapshot(*this);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options(snapshot.snapshot()), versions_cf_));
  for (it->SeekToLast(); it->Valid(); it->Prev()) {
    Expected<uint64_t> version = decode_u64_key(it->key().ToStringView());
    if (!version.ok()) {
      log_->warn("skipping a malformed version key: {}", version.error().to_string());
      continue;
    }
    VersionData data;
    Status status = read_version(snapshot.snapshot(), *version, copy_bytes ? &data : nullptr);
    if (status.ok()) {
      if (version_out) *version_out = *version;
      return data;
    }
    log_->warn("version {} is not usable, falling back to an older one: {}", *version, status.error().to_string());
  }
  if (!it->status().ok()) return rocks_error("scanning versions", it->status());
  return make_error(ErrorCode::not_found, "no intact committed version in the store");
}

Expected<std::vector<VersionInfo>> CheckpointStore::Impl::list() const {
  std::vector<VersionInfo> infos;
  std::set<uint64_t> pinned;
  {
    std::lock_guard<std::mutex> lock(write_mutex_);
    pinned = pinned_;
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options(), versions_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    Expected<VersionRecord> record = decode_version_record(it->value().ToStringView());
    if (!record.ok()) {
      log_->warn("list skips an unreadable version record: {}", record.error().to_string());
      continue;
    }
    VersionInfo info{record->version, record->committed_unix_ms, pinned.count(record->version) > 0, 0,
                     record->entries, record->manifest_json};
    for (const BlobEntry& entry : record->entries) info.total_bytes += entry.size;
    infos.push_back(std::move(info));
  }
  if (!it->status().ok()) return rocks_error("listing versions", it->status());
  return infos;
}

Expected<StoreStats> CheckpointStore::Impl::stats() const {
  StoreStats stats;
  ReadView snapshot(*this);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options(snapshot.snapshot()), refs_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    ++stats.blobs;
    Expected<BlobRef> ref = decode_blob_ref(it->value().ToStringView());
    if (ref.ok() && ref->location == BlobLocation::file) ++stats.blob_files;
    Expected<uint64_t> size = decode_u64_key(it->key().ToStringView().substr(16));
    if (size.ok()) stats.blob_bytes += *size;
  }
  it.reset(db_->NewIterator(read_options(snapshot.snapshot()), versions_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) ++stats.versions;
  it.reset(db_->NewIterator(read_options(snapshot.snapshot()), meta_cf_));
  for (it->Seek(kPinPrefix); it->Valid() && it->key().starts_with(kPinPrefix); it->Next()) ++stats.pinned;
  if (!it->status().ok()) return rocks_error("counting", it->status());
  return stats;
}

Expected<std::vector<Event>> CheckpointStore::Impl::recent_events(size_t count, std::string_view kind) const {
  std::vector<Event> events;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(read_options(), events_cf_));
  for (it->SeekToLast(); it->Valid() && events.size() < count; it->Prev()) {
    Expected<uint64_t> sequence = decode_u64_key(it->key().ToStringView());
    Expected<DecodedEvent> event = decode_event(it->value().ToStringView());
    if (!sequence.ok() || !event.ok()) {
      log_->warn("skipping an unreadable event");
      continue;
    }
    if (!kind.empty() && event->kind != kind) continue;
    events.push_back(Event{*sequence, event->unix_ms, std::move(event->kind), std::move(event->json)});
  }
  if (!it->status().ok()) return rocks_error("reading events", it->status());
  return events;
}

}  // namespace archipelago::storage

#include "storage/rocks_layout.hpp"

#include <algorithm>

#include <rocksdb/db.h>

#include "storage/store_format.hpp"

namespace archipelago::storage {

rocksdb::DBOptions make_db_options() {
  rocksdb::DBOptions options;
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  options.paranoid_checks = true;
  options.max_background_jobs = 2;
  options.keep_log_file_num = 4;
  // The WAL is the commit record; checkpoints are written rarely, so favour bounded WAL growth
  // (a flush once the WAL holds ~1 GiB) over fewer flushes.
  options.max_total_wal_size = 1ull << 30;
  return options;
}

rocksdb::ColumnFamilyOptions make_family_options(const std::string& name) {
  rocksdb::ColumnFamilyOptions options;
  if (name == kBlobsFamily) {
    // Blobs here are the small ones (large ones are files, blob_files.hpp), up to a MiB and written
    // once: keep them in RocksDB blob files so that compaction moves 24-byte references, not the
    // parameters; fp32 noise does not compress.
    options.enable_blob_files = true;
    options.min_blob_size = 4096;
    options.enable_blob_garbage_collection = true;
    options.blob_compression_type = rocksdb::kNoCompression;
    options.compression = rocksdb::kNoCompression;
  }
  return options;
}

std::vector<rocksdb::ColumnFamilyDescriptor> make_family_descriptors(const std::string& path) {
  std::vector<std::string> names = {rocksdb::kDefaultColumnFamilyName, kVersionsFamily, kBlobsFamily,
                                    kRefsFamily, kMetaFamily, kEventsFamily};
  std::vector<std::string> existing;
  if (rocksdb::DB::ListColumnFamilies(make_db_options(), path, &existing).ok())
    for (const std::string& name : existing)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors;
  for (const std::string& name : names) descriptors.emplace_back(name, make_family_options(name));
  return descriptors;
}

}  // namespace archipelago::storage

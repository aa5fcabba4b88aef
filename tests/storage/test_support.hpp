// Helpers shared by the storage tests and the crash child: temp dirs that clean themselves up,
// deterministic blob contents, and raw RocksDB access for planting damage.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <rocksdb/db.h>

#include "storage/checkpoint_store.hpp"
#include "storage/rocks_layout.hpp"

namespace archipelago::storage::testing {

// A fresh directory under /tmp, removed with everything in it when the object dies.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "storage_test_XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string store() const { return path_ + "/store"; }

 private:
  std::string path_;
};

// Bytes that depend only on (seed, size): a reader can recompute what a writer stored.
inline Blob pattern_blob(uint64_t seed, size_t size) {
  Blob blob(size);
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < size; i += 8) {
    state += 0x9e3779b97f4a7c15ull;  // splitmix64
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    for (size_t b = 0; b < 8 && i + b < size; ++b) blob[i + b] = static_cast<uint8_t>(z >> (8 * b));
  }
  return blob;
}

// Opens the store's database directly (no CheckpointStore), runs `body`, closes it.
inline rocksdb::Status with_raw_db(const std::string& path,
                                   const std::function<void(rocksdb::DB&, std::vector<rocksdb::ColumnFamilyHandle*>&,
                                                            const std::vector<rocksdb::ColumnFamilyDescriptor>&)>& body) {
  std::vector<rocksdb::ColumnFamilyDescriptor> descriptors = make_family_descriptors(path);
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* db = nullptr;
  rocksdb::Status status = rocksdb::DB::Open(make_db_options(), path, descriptors, &handles, &db);
  if (!status.ok()) return status;
  body(*db, handles, descriptors);
  for (auto* handle : handles) db->DestroyColumnFamilyHandle(handle);
  status = db->Close();
  delete db;
  return status;
}

inline rocksdb::ColumnFamilyHandle* family(std::vector<rocksdb::ColumnFamilyHandle*>& handles,
                                           const std::vector<rocksdb::ColumnFamilyDescriptor>& descriptors,
                                           const std::string& name) {
  for (size_t i = 0; i < descriptors.size(); ++i)
    if (descriptors[i].name == name) return handles[i];
  return nullptr;
}

// Counts the keys physically present in one column family (not the store's own bookkeeping).
inline size_t count_raw_keys(const std::string& path, const std::string& family_name) {
  size_t count = 0;
  rocksdb::Status status = with_raw_db(path, [&](rocksdb::DB& db, auto& handles, const auto& descriptors) {
    std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions(), family(handles, descriptors, family_name)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) ++count;
  });
  return status.ok() ? count : static_cast<size_t>(-1);
}

}  // namespace archipelago::storage::testing

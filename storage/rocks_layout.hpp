// How the checkpoint store lays itself out in RocksDB: database options and one descriptor per column
// family. Internal to storage/ and its tests (tests open the same database raw to corrupt it); users of
// the store include checkpoint_store.hpp, which keeps RocksDB out of sight. Pure functions.
#pragma once

#include <string>
#include <vector>

#include <rocksdb/db.h>
#include <rocksdb/options.h>

namespace archipelago::storage {

rocksdb::DBOptions make_db_options();

rocksdb::ColumnFamilyOptions make_family_options(const std::string& name);

// Descriptors for this build's families plus any other family already in the database at `path`
// (a store written by a newer schema may have more; RocksDB refuses to open without all of them).
std::vector<rocksdb::ColumnFamilyDescriptor> make_family_descriptors(const std::string& path);

}  // namespace archipelago::storage

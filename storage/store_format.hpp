// The on-disk format of the checkpoint store: key encodings, the version record, blob hashing.
//
// Shared by the store and by tests that write raw RocksDB entries (to corrupt a blob or plant a newer
// schema), the way LevelDB keeps `log_format.h` apart from the reader and writer. Everything here is a
// pure function of its arguments and safe from any thread. Changing an encoding means bumping
// `kSchemaVersion`: a build refuses a store whose schema version is newer than its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace archipelago::storage {

// Version 1: the column families and encodings below.
inline constexpr uint32_t kSchemaVersion = 1;

// Column families. `versions`: one record per committed version. `blobs`: content-addressed bytes.
// `refs`: how many version entries reference each blob, and where it lives (garbage collection). `meta`: schema version,
// high-water version, pins. `events`: the audit log.
inline constexpr const char* kVersionsFamily = "versions";
inline constexpr const char* kBlobsFamily = "blobs";
inline constexpr const char* kRefsFamily = "refs";
inline constexpr const char* kMetaFamily = "meta";
inline constexpr const char* kEventsFamily = "events";

// Keys in `meta` (values are decimal text so that `ldb` dumps stay readable).
inline constexpr const char* kSchemaVersionKey = "schema_version";
inline constexpr const char* kHighWaterKey = "high_water_version";
inline constexpr const char* kPinPrefix = "pin/";  // followed by the 8-byte big-endian version

// The directory, inside the store's directory, of blobs kept as files.
inline constexpr const char* kBlobFilesDirectory = "blob_files";

// XXH3-128 of a blob's bytes: its address and its checksum at once.
struct BlobHash {
  uint64_t high = 0;
  uint64_t low = 0;
  bool operator==(const BlobHash& other) const { return high == other.high && low == other.low; }
  bool operator<(const BlobHash& other) const {
    return high != other.high ? high < other.high : low < other.low;
  }
  std::string to_hex() const;
};

BlobHash hash_blob(const uint8_t* data, size_t size);

// What a blob is to a version: the parameters of a fragment or the outer-optimizer state of one.
enum class BlobRole : uint8_t { parameters = 0, optimizer_state = 1 };

// One line of a version record: which blob holds which fragment's bytes.
struct BlobEntry {
  BlobRole role = BlobRole::parameters;
  uint32_t fragment = 0;
  BlobHash hash;
  uint64_t size = 0;
};

// What the `versions` family stores per version. The manifest is the caller's JSON, kept verbatim.
struct VersionRecord {
  uint64_t version = 0;
  int64_t committed_unix_ms = 0;
  std::string manifest_json;
  std::vector<BlobEntry> entries;
};

// Big-endian so that RocksDB's bytewise order is numeric order (versions, event sequence numbers).
std::string encode_u64_key(uint64_t value);
Expected<uint64_t> decode_u64_key(std::string_view key);

// Blob key = hash (16 bytes) + size (8 bytes): two blobs share a key only if hash and size agree.
std::string encode_blob_key(const BlobHash& hash, uint64_t size);

std::string encode_pin_key(uint64_t version);

// The record ends in an XXH3-64 of everything before it; decoding checks it (ErrorCode::corrupt).
std::string encode_version_record(const VersionRecord& record);
Expected<VersionRecord> decode_version_record(std::string_view bytes);

// Where a blob's bytes live: in the `blobs` family, or in a file of the store's blob_files/ directory
// (large blobs; see blob_files.hpp). Decided when the blob is first stored, kept in its `refs` entry.
enum class BlobLocation : uint8_t { family = 0, file = 1 };

// `refs` values: how many version entries reference the blob (8 bytes LE), then its location (1 byte).
struct BlobRef {
  uint64_t count = 0;
  BlobLocation location = BlobLocation::family;
};
std::string encode_blob_ref(const BlobRef& ref);
Expected<BlobRef> decode_blob_ref(std::string_view bytes);

// A blob file's name: the hex of its blob key.
std::string blob_file_name(std::string_view blob_key);

// Event values: unix ms (8 bytes LE), kind length (4 bytes LE), kind, JSON text.
std::string encode_event(int64_t unix_ms, std::string_view kind, std::string_view json);
struct DecodedEvent {
  int64_t unix_ms = 0;
  std::string kind;
  std::string json;
};
Expected<DecodedEvent> decode_event(std::string_view bytes);

}  // namespace archipelago::storage

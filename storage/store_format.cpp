// Encodings of the checkpoint store's keys and values. Every decoder bounds-checks before it reads,
// so a damaged record turns into ErrorCode::corrupt or truncated, never into a wild read.
#include "storage/store_format.hpp"

#include <cstring>

#include <xxhash.h>

#include "common/byte_io.hpp"

namespace archipelago::storage {
namespace {

constexpr uint32_t kRecordMagic = 0x31525641;  // "AVR1" little-endian: Archipelago Version Record 1

void put_be(std::string& out, uint64_t value) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

std::string BlobHash::to_hex() const {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint64_t part : {high, low})
    for (int i = 15; i >= 0; --i) out.push_back(digits[(part >> (4 * i)) & 0xf]);
  return out;
}

BlobHash hash_blob(const uint8_t* data, size_t size) {
  XXH128_hash_t hash = XXH3_128bits(data, size);
  return BlobHash{hash.high64, hash.low64};
}

std::string encode_u64_key(uint64_t value) {
  std::string out;
  put_be(out, value);
  return out;
}

Expected<uint64_t> decode_u64_key(std::string_view key) {
  if (key.size() != 8) return make_error(ErrorCode::corrupt, "u64 key of " + std::to_string(key.size()) + " bytes");
  uint64_t value = 0;
  for (char c : key) value = (value << 8) | static_cast<uint8_t>(c);
  return value;
}

std::string encode_blob_key(const BlobHash& hash, uint64_t size) {
  std::string out;
  put_be(out, hash.high);
  put_be(out, hash.low);
  put_be(out, size);
  return out;
}

std::string encode_pin_key(uint64_t version) { return std::string(kPinPrefix) + encode_u64_key(version); }

std::string encode_version_record(const VersionRecord& record) {
  std::string out;
  put_le(out, kRecordMagic, 4);
  put_le(out, record.version, 8);
  put_le(out, static_cast<uint64_t>(record.committed_unix_ms), 8);
  put_le(out, record.manifest_json.size(), 4);
  out += record.manifest_json;
  put_le(out, record.entries.size(), 4);
  for (const BlobEntry& entry : record.entries) {
    put_le(out, static_cast<uint8_t>(entry.role), 1);
    put_le(out, entry.fragment, 4);
    put_le(out, entry.hash.high, 8);
    put_le(out, entry.hash.low, 8);
    put_le(out, entry.size, 8);
  }
  put_le(out, XXH3_64bits(out.data(), out.size()), 8);
  return out;
}

Expected<VersionRecord> decode_version_record(std::string_view bytes) {
  if (bytes.size() < 8) return make_error(ErrorCode::truncated, "version record of " + std::to_string(bytes.size()) + " bytes");
  std::string_view body = bytes.substr(0, bytes.size() - 8);
  uint64_t stored_checksum = 0;
  ByteReader trailer(bytes.substr(bytes.size() - 8));
  trailer.le(stored_checksum, 8);
  if (XXH3_64bits(body.data(), body.size()) != stored_checksum)
    return make_error(ErrorCode::corrupt, "version record checksum mismatch");

  ByteReader reader(body);
  uint64_t magic = 0, version = 0, unix_ms = 0, manifest_size = 0, entry_count = 0;
  if (!reader.le(magic, 4) || magic != kRecordMagic)
    return make_error(ErrorCode::corrupt, "version record has a bad magic number");
  VersionRecord record;
  if (!reader.le(version, 8) || !reader.le(unix_ms, 8) || !reader.le(manifest_size, 4) ||
      !reader.bytes(record.manifest_json, manifest_size) || !reader.le(entry_count, 4))
    return make_error(ErrorCode::truncated, "version record header ends early");
  constexpr size_t kEntryBytes = 1 + 4 + 8 + 8 + 8;
  if (entry_count * kEntryBytes != reader.remaining())
    return make_error(ErrorCode::inconsistent, "version record announces " + std::to_string(entry_count) +
                                                   " entries but holds " + std::to_string(reader.remaining()) + " bytes");
  record.version = version;
  record.committed_unix_ms = static_cast<int64_t>(unix_ms);
  record.entries.resize(entry_count);
  for (BlobEntry& entry : record.entries) {
    uint64_t role = 0, fragment = 0;
    reader.le(role, 1);
    reader.le(fragment, 4);
    reader.le(entry.hash.high, 8);
    reader.le(entry.hash.low, 8);
    reader.le(entry.size, 8);
    if (role > static_cast<uint8_t>(BlobRole::optimizer_state))
      return make_error(ErrorCode::unknown_type, "blob role " + std::to_string(role));
    entry.role = static_cast<BlobRole>(role);
    entry.fragment = static_cast<uint32_t>(fragment);
  }
  return record;
}

std::string encode_blob_ref(const BlobRef& ref) {
  std::string out;
  put_le(out, ref.count, 8);
  put_le(out, static_cast<uint8_t>(ref.location), 1);
  return out;
}

Expected<BlobRef> decode_blob_ref(std::string_view bytes) {
  BlobRef ref;
  uint64_t location = 0;
  ByteReader reader(bytes);
  if (bytes.size() != 9 || !reader.le(ref.count, 8) || !reader.le(location, 1))
    return make_error(ErrorCode::corrupt, "blob reference of " + std::to_string(bytes.size()) + " bytes");
  if (location > static_cast<uint8_t>(BlobLocation::file))
    return make_error(ErrorCode::unknown_type, "blob location " + std::to_string(location));
  ref.location = static_cast<BlobLocation>(location);
  return ref;
}

std::string blob_file_name(std::string_view blob_key) {
  static const char* digits = "0123456789abcdef";
  std::string name;
  for (char c : blob_key) {
    name.push_back(digits[static_cast<uint8_t>(c) >> 4]);
    name.push_back(digits[static_cast<uint8_t>(c) & 0xf]);
  }
  return name;
}

std::string encode_event(int64_t unix_ms, std::string_view kind, std::string_view json) {
  std::string out;
  put_le(out, static_cast<uint64_t>(unix_ms), 8);
  put_le(out, kind.size(), 4);
  out += kind;
  out += json;
  return out;
}

Expected<DecodedEvent> decode_event(std::string_view bytes) {
  ByteReader reader(bytes);
  uint64_t unix_ms = 0, kind_size = 0;
  DecodedEvent event;
  if (!reader.le(unix_ms, 8) || !reader.le(kind_size, 4) || !reader.bytes(event.kind, kind_size))
    return make_error(ErrorCode::truncated, "event record ends early");
  reader.bytes(event.json, reader.remaining());
  event.unix_ms = static_cast<int64_t>(unix_ms);
  return event;
}

}  // namespace archipelago::storage

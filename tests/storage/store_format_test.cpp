// Encodings of store_format.hpp: round trips, ordering, and damage detection.
#include "storage/store_format.hpp"

#include <doctest/doctest.h>

namespace archipelago::storage {
namespace {

VersionRecord sample_record() {
  VersionRecord record;
  record.version = 42;
  record.committed_unix_ms = 1700000000123;
  record.manifest_json = R"({"contributors":["a","b"]})";
  record.entries = {{BlobRole::parameters, 0, {1, 2}, 100}, {BlobRole::optimizer_state, 7, {3, 4}, 5}};
  return record;
}

TEST_CASE("a version record round-trips") {
  auto decoded = decode_version_record(encode_version_record(sample_record()));
  REQUIRE(decoded.ok());
  CHECK(decoded->version == 42);
  CHECK(decoded->committed_unix_ms == 1700000000123);
  CHECK(decoded->manifest_json == sample_record().manifest_json);
  REQUIRE(decoded->entries.size() == 2);
  CHECK(decoded->entries[1].role == BlobRole::optimizer_state);
  CHECK(decoded->entries[1].fragment == 7);
  CHECK(decoded->entries[1].hash == BlobHash{3, 4});
  CHECK(decoded->entries[1].size == 5);
}

TEST_CASE("every flipped bit and every truncation of a version record is caught") {
  std::string bytes = encode_version_record(sample_record());
  for (size_t i = 0; i < bytes.size() * 8; ++i) {
    std::string damaged = bytes;
    damaged[i / 8] ^= static_cast<char>(1 << (i % 8));
    CHECK(!decode_version_record(damaged).ok());
  }
  for (size_t length = 0; length < bytes.size(); ++length) CHECK(!decode_version_record(bytes.substr(0, length)).ok());
}

TEST_CASE("u64 keys sort numerically and blob keys tell hash and size apart") {
  CHECK(encode_u64_key(255) < encode_u64_key(256));
  CHECK(encode_u64_key(1) < encode_u64_key(1ull << 40));
  CHECK(decode_u64_key(encode_u64_key(123456789)).value() == 123456789);
  CHECK(decode_u64_key("short").error().code == ErrorCode::corrupt);
  CHECK(encode_blob_key({1, 2}, 3) != encode_blob_key({1, 2}, 4));
  CHECK(encode_blob_key({1, 2}, 3).size() == 24);
  const uint8_t bytes[] = {1, 2, 3};
  CHECK(hash_blob(bytes, 3) == hash_blob(bytes, 3));
  CHECK(!(hash_blob(bytes, 3) == hash_blob(bytes, 2)));
  CHECK(hash_blob(bytes, 3).to_hex().size() == 32);
}

TEST_CASE("events and blob references round-trip") {
  auto event = decode_event(encode_event(17, "pin", R"({"version":3})"));
  REQUIRE(event.ok());
  CHECK(event->unix_ms == 17);
  CHECK(event->kind == "pin");
  CHECK(event->json == R"({"version":3})");
  CHECK(!decode_event("abc").ok());
  auto ref = decode_blob_ref(encode_blob_ref(BlobRef{9, BlobLocation::file}));
  REQUIRE(ref.ok());
  CHECK(ref->count == 9);
  CHECK(ref->location == BlobLocation::file);
  CHECK(!decode_blob_ref("12345678").ok());
  CHECK(blob_file_name(std::string("\x01\xab", 2)) == "01ab");
}

}  // namespace
}  // namespace archipelago::storage

// Behaviour of CheckpointStore through its public API, plus raw-RocksDB damage where a test needs it.
#include "storage/checkpoint_store.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "tests/storage/test_support.hpp"

namespace archipelago::storage {
namespace {

using testing::count_raw_keys;
using testing::pattern_blob;
using testing::TempDir;

// A version of `fragments` fragments of `size` bytes; fragment f's bytes come from seeds[f].
VersionData make_version(uint64_t version, const std::vector<uint64_t>& seeds, size_t size) {
  VersionData data;
  data.version = version;
  for (uint32_t f = 0; f < seeds.size(); ++f) data.fragments[f] = pattern_blob(seeds[f], size);
  data.manifest_json = "{\"version\":" + std::to_string(version) + ",\"contributors\":[\"l0\",\"l1\"]}";
  return data;
}

std::unique_ptr<CheckpointStore> open_or_fail(const std::string& path, StoreOptions options = {}) {
  auto store = CheckpointStore::open(path, std::move(options));
  REQUIRE_MESSAGE(store.ok(), (store.ok() ? "" : store.error().to_string()));
  return std::move(store.value());
}

void check_same(const VersionData& actual, const VersionData& expected) {
  CHECK(actual.version == expected.version);
  CHECK(actual.fragments == expected.fragments);
  CHECK(actual.optimizer_state == expected.optimizer_state);
  CHECK(actual.manifest_json == expected.manifest_json);
}

TEST_CASE("commit, get, list and latest round-trip, also across a reopen") {
  TempDir dir;
  VersionData v1 = make_version(1, {11, 12, 13}, 4096);
  v1.optimizer_state[0] = pattern_blob(101, 4096);
  v1.optimizer_state[2] = pattern_blob(103, 100);
  VersionData v2 = make_version(2, {21, 12, 23}, 4096);
  v2.optimizer_state[0] = pattern_blob(201, 4096);
  {
    auto store = open_or_fail(dir.store());
    CHECK(store->latest_committed().error().code == ErrorCode::not_found);
    REQUIRE(store->commit(v1).ok());
    REQUIRE(store->commit(v2).ok());
    auto got = store->get(1);
    REQUIRE(got.ok());
    check_same(*got, v1);
    CHECK(got->committed_unix_ms > 0);
    auto latest = store->latest_committed();
    REQUIRE(latest.ok());
    check_same(*latest, v2);
    CHECK(store->get(3).error().code == ErrorCode::not_found);
  }
  auto store = open_or_fail(dir.store());
  auto latest = store->latest_committed();
  REQUIRE(latest.ok());
  check_same(*latest, v2);
  auto listed = store->list();
  REQUIRE(listed.ok());
  REQUIRE(listed->size() == 2);
  CHECK((*listed)[0].version == 1);
  CHECK((*listed)[1].version == 2);
  CHECK((*listed)[1].entries.size() == 4);  // three fragments, one optimizer state
  CHECK((*listed)[1].total_bytes == 4 * 4096);
  CHECK((*listed)[1].manifest_json == v2.manifest_json);
  CHECK(store->high_water_version() == 2);
}

TEST_CASE("a follower reads beside the store's owner, sees new commits at catch-up, and refuses reads while it cannot open") {
  TempDir dir;
  auto store = open_or_fail(dir.store());
  REQUIRE(store->commit(make_version(1, {11, 12}, 4096)).ok());
  auto follower = StoreFollower::open(dir.store());  // beside the owner, which holds the lock
  REQUIRE_MESSAGE(follower.ok(), (follower.ok() ? "" : follower.error().to_string()));
  auto latest = [&]() -> int64_t {
    auto v = (*follower)->latest_committed_version();
    return v ? static_cast<int64_t>(*v) : -1;
  };
  CHECK(latest() == 1);
  VersionData v2 = make_version(2, {21, 22}, 4096);
  REQUIRE(store->commit(v2).ok());
  CHECK(latest() == 1);  // what it saw when it opened
  REQUIRE((*follower)->catch_up().ok());
  CHECK(latest() == 2);
  auto got = (*follower)->get(2);
  REQUIRE(got.ok());
  check_same(*got, v2);
  // Its store gone: the catch-up fails, and reads say so instead of touching a closed database.
  const std::string moved = dir.path() + "/moved";
  std::filesystem::rename(dir.store(), moved);
  CHECK_FALSE((*follower)->catch_up().ok());
  CHECK((*follower)->latest_committed_version().error().code == ErrorCode::unavailable);
  CHECK((*follower)->get(2).error().code == ErrorCode::unavailable);
  std::filesystem::rename(moved, dir.store());
  REQUIRE((*follower)->catch_up().ok());
  CHECK(latest() == 2);
  CHECK(StoreFollower::open(dir.path() + "/nothing").error().code == ErrorCode::not_found);
}

TEST_CASE("versions must strictly increase, across restarts and retention") {
  TempDir dir;
  StoreOptions options;
  options.retention.keep_last = 1;
  {
    auto store = open_or_fail(dir.store(), options);
    REQUIRE(store->commit(make_version(5, {1}, 64)).ok());
    CHECK(store->commit(make_version(5, {2}, 64)).error().code == ErrorCode::conflict);
    CHECK(store->commit(make_version(3, {2}, 64)).error().code == ErrorCode::conflict);
    REQUIRE(store->commit(make_version(7, {2}, 64)).ok());
  }
  auto store = open_or_fail(dir.store(), options);
  auto stale = store->commit(make_version(6, {3}, 64));
  REQUIRE(!stale.ok());
  CHECK(stale.error().code == ErrorCode::conflict);
  CHECK(stale.error().reason.find("7") != std::string::npos);
  CHECK(store->commit(make_version(8, {3}, 64)).ok());
}

TEST_CASE("a manifest that is not JSON is refused") {
  TempDir dir;
  auto store = open_or_fail(dir.store());
  VersionData data = make_version(1, {1}, 64);
  data.manifest_json = "{not json";
  CHECK(store->commit(data).error().code == ErrorCode::invalid_argument);
  CHECK(store->list()->empty());
}

TEST_CASE("retention keeps the last K plus pinned versions and deletes unreferenced blobs") {
  TempDir dir;
  StoreOptions options;
  options.retention.keep_last = 2;
  {
    auto store = open_or_fail(dir.store(), options);
    CHECK(store->pin(1).error().code == ErrorCode::not_found);
    REQUIRE(store->commit(make_version(1, {10, 11, 12, 13}, 8192)).ok());
    REQUIRE(store->pin(1).ok());
    for (uint64_t v = 2; v <= 4; ++v)
      REQUIRE(store->commit(make_version(v, {v * 10, v * 10 + 1, v * 10 + 2, v * 10 + 3}, 8192)).ok());
    auto listed = store->list();
    REQUIRE(listed.ok());
    std::vector<uint64_t> versions;
    for (const auto& info : *listed) versions.push_back(info.version);
    CHECK(versions == std::vector<uint64_t>{1, 3, 4});
    CHECK((*listed)[0].pinned);
    CHECK(store->get(2).error().code == ErrorCode::not_found);
    CHECK(store->stats()->blobs == 12);
    CHECK(store->stats()->blob_bytes == 12 * 8192);

    REQUIRE(store->unpin(1).ok());
    CHECK(store->list()->size() == 3);  // unpinning alone drops nothing
    auto dropped = store->apply_retention();
    REQUIRE(dropped.ok());
    CHECK(*dropped == std::vector<uint64_t>{1});
    CHECK(store->stats()->blobs == 8);
    CHECK(store->stats()->pinned == 0);
    auto events = store->recent_events(1);
    REQUIRE(events.ok());
    CHECK(events->at(0).kind == "retention");
  }
  // The blobs are gone from RocksDB itself, not just from the store's bookkeeping.
  CHECK(count_raw_keys(dir.store(), kBlobsFamily) == 8);
  CHECK(count_raw_keys(dir.store(), kRefsFamily) == 8);
}

TEST_CASE("a commit that changes one fragment of eight writes one blob, GC frees the replaced one") {
  TempDir dir;
  StoreOptions options;
  options.retention.keep_last = 1;
  constexpr size_t kFragmentBytes = 64 * 1024;
  {
    auto store = open_or_fail(dir.store(), options);
    std::vector<uint64_t> seeds = {1, 2, 3, 4, 5, 6, 7, 8};
    auto first = store->commit(make_version(1, seeds, kFragmentBytes));
    REQUIRE(first.ok());
    CHECK(first->blobs_written == 8);
    CHECK(first->bytes_written == 8 * kFragmentBytes);
    seeds[5] = 99;
    auto second = store->commit(make_version(2, seeds, kFragmentBytes));
    REQUIRE(second.ok());
    CHECK(second->blobs_written == 1);
    CHECK(second->bytes_written == kFragmentBytes);
    CHECK(second->blobs_deduplicated == 7);
    CHECK(second->versions_dropped == std::vector<uint64_t>{1});
    CHECK(second->blobs_deleted == 1);  // fragment 5's old bytes; the other seven live on in version 2
    CHECK(store->stats()->blobs == 8);
    auto got = store->get(2);
    REQUIRE(got.ok());
    CHECK(got->fragments.at(5) == pattern_blob(99, kFragmentBytes));
    CHECK(got->fragments.at(4) == pattern_blob(5, kFragmentBytes));
  }
  CHECK(count_raw_keys(dir.store(), kBlobsFamily) == 8);
}

TEST_CASE("carried fragments are taken from the newest version without passing their bytes") {
  TempDir dir;
  auto store = open_or_fail(dir.store());
  VersionData v1 = make_version(1, {1, 2, 3}, 4096);
  v1.optimizer_state[1] = pattern_blob(11, 512);
  REQUIRE(store->commit(v1).ok());
  VersionData v2;
  v2.version = 2;
  v2.fragments[0] = pattern_blob(100, 4096);
  v2.carried_fragments = {1, 2};
  auto committed = store->commit(v2);
  REQUIRE(committed.ok());
  CHECK(committed->blobs_written == 1);
  CHECK(committed->blobs_deduplicated == 3);  // fragments 1 and 2 and fragment 1's optimizer state
  auto got = store->get(2);
  REQUIRE(got.ok());
  CHECK(got->fragments.at(0) == pattern_blob(100, 4096));
  CHECK(got->fragments.at(2) == v1.fragments.at(2));
  CHECK(got->optimizer_state.at(1) == v1.optimizer_state.at(1));
  CHECK(got->carried_fragments.empty());

  VersionData bad = v2;
  bad.version = 3;
  bad.carried_fragments = {0};  // also passed
  CHECK(store->commit(bad).error().code == ErrorCode::invalid_argument);
  bad.carried_fragments = {7};  // not in version 2
  CHECK(store->commit(bad).error().code == ErrorCode::not_found);
}

TEST_CASE("the event log appends, lists newest first and survives a reopen") {
  TempDir dir;
  int64_t fake_now = 1000;
  StoreOptions options;
  options.clock_unix_ms = [&] { return fake_now++; };
  {
    auto store = open_or_fail(dir.store(), options);
    REQUIRE(store->append_event("kill", R"({"learner":3})").ok());
    REQUIRE(store->append_event("restart", R"({"learner":3,"attempt":1})").ok());
    CHECK(store->append_event("kill", "not json").error().code == ErrorCode::invalid_argument);
    CHECK(store->append_event("", "{}").error().code == ErrorCode::invalid_argument);
  }
  auto store = open_or_fail(dir.store(), options);
  REQUIRE(store->append_event("drill", R"({"seed":7})").ok());
  auto events = store->recent_events(2);
  REQUIRE(events.ok());
  REQUIRE(events->size() == 2);
  CHECK(events->at(0).kind == "drill");
  CHECK(events->at(0).json == R"({"seed":7})");
  CHECK(events->at(1).kind == "restart");
  CHECK(events->at(1).json == R"({"learner":3,"attempt":1})");
  CHECK(events->at(0).sequence > events->at(1).sequence);
  CHECK(events->at(0).unix_ms > events->at(1).unix_ms);
  CHECK(store->recent_events(10)->size() == 3);
}

TEST_CASE("the newest events of one kind are found however many events of other kinds came after them") {
  TempDir dir;
  auto store = open_or_fail(dir.store(), StoreOptions{});
  for (int i = 0; i < 3; ++i) REQUIRE(store->append_event("admin", "{\"command\":" + std::to_string(i) + "}").ok());
  for (int i = 0; i < 5000; ++i) REQUIRE(store->append_event("commit", std::to_string(i)).ok());
  auto admin = store->recent_events(2, "admin");
  REQUIRE(admin.ok());
  REQUIRE(admin->size() == 2);
  CHECK(admin->at(0).json == R"({"command":2})");  // newest first
  CHECK(admin->at(1).json == R"({"command":1})");
  CHECK(store->recent_events(10, "admin")->size() == 3);
  CHECK(store->recent_events(10, "nothing-of-this-kind")->empty());
  auto all = store->recent_events(2);
  REQUIRE(all.ok());
  CHECK(all->at(0).kind == "commit");
}

TEST_CASE("the event log trims itself to about max_events") {
  TempDir dir;
  StoreOptions options;
  options.max_events = 16;
  auto store = open_or_fail(dir.store(), options);
  for (int i = 0; i < 200; ++i) REQUIRE(store->append_event("tick", std::to_string(i)).ok());
  auto events = store->recent_events(1000);
  REQUIRE(events.ok());
  CHECK(events->size() >= 16);
  CHECK(events->size() <= 16 + 64);
  CHECK(events->front().json == "199");
}

TEST_CASE("a store written by a newer schema is refused with a clear message") {
  TempDir dir;
  { open_or_fail(dir.store()); }
  rocksdb::Status status = testing::with_raw_db(dir.store(), [](rocksdb::DB& db, auto& handles, const auto& descriptors) {
    rocksdb::ColumnFamilyHandle* future = nullptr;
    REQUIRE(db.CreateColumnFamily(rocksdb::ColumnFamilyOptions(), "added_by_schema_2", &future).ok());
    db.DestroyColumnFamilyHandle(future);
    REQUIRE(db.Put(rocksdb::WriteOptions(), testing::family(handles, descriptors, kMetaFamily), kSchemaVersionKey,
                   std::to_string(kSchemaVersion + 1)).ok());
  });
  REQUIRE(status.ok());
  auto store = CheckpointStore::open(dir.store());
  REQUIRE(!store.ok());
  CHECK(store.error().code == ErrorCode::wrong_version);
  CHECK(store.error().reason.find("schema version " + std::to_string(kSchemaVersion + 1)) != std::string::npos);
}

TEST_CASE("a corrupt or missing blob is detected and latest falls back to the newest intact version") {
  TempDir dir;
  VersionData v1 = make_version(1, {1, 2, 3, 4}, 4096);
  VersionData v2 = make_version(2, {1, 2, 3, 40}, 4096);
  {
    auto store = open_or_fail(dir.store());
    REQUIRE(store->commit(v1).ok());
    REQUIRE(store->commit(v2).ok());
  }
  const Blob& changed = v2.fragments.at(3);
  std::string key = encode_blob_key(hash_blob(changed.data(), changed.size()), changed.size());
  auto blobs_family = [&](auto& handles, const auto& descriptors) {
    return testing::family(handles, descriptors, kBlobsFamily);
  };

  SUBCASE("flipped bytes") {
    REQUIRE(testing::with_raw_db(dir.store(), [&](rocksdb::DB& db, auto& handles, const auto& descriptors) {
      std::string damaged(reinterpret_cast<const char*>(changed.data()), changed.size());
      damaged[100] ^= 0x5a;
      REQUIRE(db.Put(rocksdb::WriteOptions(), blobs_family(handles, descriptors), key, damaged).ok());
    }).ok());
    auto store = open_or_fail(dir.store());
    CHECK(store->get(2).error().code == ErrorCode::corrupt);
    CHECK(store->verify(2).error().code == ErrorCode::corrupt);
  }
  SUBCASE("deleted blob") {
    REQUIRE(testing::with_raw_db(dir.store(), [&](rocksdb::DB& db, auto& handles, const auto& descriptors) {
      REQUIRE(db.Delete(rocksdb::WriteOptions(), blobs_family(handles, descriptors), key).ok());
    }).ok());
    auto store = open_or_fail(dir.store());
    CHECK(store->get(2).error().code == ErrorCode::not_found);
  }
  SUBCASE("damaged version record") {
    REQUIRE(testing::with_raw_db(dir.store(), [&](rocksdb::DB& db, auto& handles, const auto& descriptors) {
      auto* versions = testing::family(handles, descriptors, kVersionsFamily);
      std::string record;
      REQUIRE(db.Get(rocksdb::ReadOptions(), versions, encode_u64_key(2), &record).ok());
      record[record.size() / 2] ^= 0x01;
      REQUIRE(db.Put(rocksdb::WriteOptions(), versions, encode_u64_key(2), record).ok());
    }).ok());
    auto store = open_or_fail(dir.store());
    CHECK(store->get(2).error().code == ErrorCode::corrupt);
  }

  auto store = open_or_fail(dir.store());
  CHECK(store->get(1).ok());
  auto latest = store->latest_committed();
  REQUIRE(latest.ok());
  check_same(*latest, v1);
  CHECK(store->latest_committed_version().value() == 1);
  // The damaged version still counts for ordering: its number is never reused.
  CHECK(store->commit(make_version(2, {5}, 64)).error().code == ErrorCode::conflict);
}

size_t count_files(const std::string& store_path) {
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(store_path + "/" + kBlobFilesDirectory)) {
    (void)entry;
    ++files;
  }
  return files;
}

TEST_CASE("large blobs live in files: round trip, GC removes them, damage is detected") {
  TempDir dir;
  StoreOptions options;
  options.retention.keep_last = 1;
  options.file_blob_min_bytes = 32 * 1024;
  VersionData v1 = make_version(1, {1, 2, 3}, 64 * 1024);
  v1.optimizer_state[0] = pattern_blob(9, 1024);  // small: stays inside RocksDB
  VersionData v2 = make_version(2, {1, 2, 30}, 64 * 1024);
  {
    auto store = open_or_fail(dir.store(), options);
    REQUIRE(store->commit(v1).ok());
    CHECK(store->stats()->blob_files == 3);
    REQUIRE(store->commit(v2).ok());
    check_same(store->get(2).value(), v2);
    CHECK(store->stats()->blob_files == 3);
  }
  CHECK(count_files(dir.store()) == 3);  // fragment 2's old file went with version 1
  CHECK(count_raw_keys(dir.store(), kBlobsFamily) == 0);

  // An orphan (as a crash between file write and batch leaves) is swept on open.
  { std::ofstream(dir.store() + "/" + kBlobFilesDirectory + "/" + std::string(48, 'a')) << "orphan"; }
  const Blob& changed = v2.fragments.at(2);
  std::string file = dir.store() + "/" + kBlobFilesDirectory + "/" +
                     blob_file_name(encode_blob_key(hash_blob(changed.data(), changed.size()), changed.size()));
  {
    std::fstream damage(file, std::ios::in | std::ios::out | std::ios::binary);
    damage.seekp(1000);
    damage.put('\x42');
  }
  auto store = open_or_fail(dir.store(), options);
  CHECK(count_files(dir.store()) == 3);
  CHECK(store->get(2).error().code == ErrorCode::corrupt);
  std::filesystem::remove(file);
  CHECK(store->get(2).error().code == ErrorCode::not_found);
  CHECK(store->latest_committed().error().code == ErrorCode::not_found);  // nothing older was kept
}

TEST_CASE("a commit refused by the fault hook leaves no trace, before or after its files are written") {
  for (std::string fail_at : {"commit.files", "commit"}) {
    CAPTURE(fail_at);
    TempDir dir;
    bool failing = false;
    StoreOptions options;
    options.retention.keep_last = 1;
    options.file_blob_min_bytes = 1024;  // fragments as files, optimizer state inside RocksDB
    options.fault_hook = [&](std::string_view name) -> Status {
      if (failing && name == fail_at) return make_error(ErrorCode::io, "injected: disk full");
      return Status::success();
    };
    auto version = [](uint64_t number, uint64_t seed) {
      VersionData data = make_version(number, {seed, seed + 1}, 2048);
      data.optimizer_state[0] = pattern_blob(seed + 2, 100);
      return data;
    };
    {
      auto store = open_or_fail(dir.store(), options);
      REQUIRE(store->commit(version(1, 10)).ok());
      failing = true;
      auto refused = store->commit(version(2, 20));
      REQUIRE(!refused.ok());
      CHECK(refused.error().code == ErrorCode::io);
      CHECK(store->list()->size() == 1);
      CHECK(store->stats()->blobs == 3);
      CHECK(store->high_water_version() == 1);
      CHECK(store->latest_committed_version().value() == 1);
      failing = false;
    }
    auto store = open_or_fail(dir.store(), options);
    CHECK(count_files(dir.store()) == 2);  // files of the refused commit were swept
    REQUIRE(store->commit(version(2, 20)).ok());
    check_same(store->latest_committed().value(), version(2, 20));
    CHECK(store->stats()->blobs == 3);
  }
}

// Staged files of prepared commits (temporaries) in the store's blob directory.
size_t count_staged(const std::string& store_path) {
  size_t staged = 0;
  for (const auto& entry : std::filesystem::directory_iterator(store_path + "/" + kBlobFilesDirectory))
    staged += entry.path().extension() == ".tmp";
  return staged;
}

TEST_CASE("two-step commits: prepared apart, recorded in the order they land, staged files never leak") {
  TempDir dir;
  StoreOptions options;
  options.retention.keep_last = 2;
  options.file_blob_min_bytes = 1024;  // every fragment a file
  auto store = open_or_fail(dir.store(), options);
  REQUIRE(store->commit(make_version(1, {10, 11}, 2048)).ok());

  // Fragment 0's new value and fragment 1's are prepared as two commits; fragment 1's lands first.
  VersionData only0, only1;
  only0.fragments[0] = pattern_blob(20, 2048);
  only1.fragments[1] = pattern_blob(21, 2048);
  auto prepared0 = store->prepare(only0, 7);
  auto prepared1 = store->prepare(only1, 8);
  REQUIRE(prepared0.ok());
  REQUIRE(prepared1.ok());
  CHECK(prepared0->staged.size() == 1);
  CHECK(prepared0->data.fragments.at(0).empty());  // durable in its staged file: the bytes are let go
  CHECK(count_staged(dir.store()) == 2);
  CHECK(store->latest_committed_version().value() == 1);  // nothing lands at prepare
  REQUIRE(store->commit_prepared(std::move(*prepared1), 2, "{\"v\":2}", {0}).ok());
  REQUIRE(store->commit_prepared(std::move(*prepared0), 3, "{\"v\":3}", {1}).ok());
  // Each record carries the other fragment from the newest version at the moment it landed.
  auto v2 = store->get(2).value();
  CHECK(v2.fragments.at(0) == pattern_blob(10, 2048));
  CHECK(v2.fragments.at(1) == pattern_blob(21, 2048));
  auto v3 = store->get(3).value();
  CHECK(v3.fragments.at(0) == pattern_blob(20, 2048));
  CHECK(v3.fragments.at(1) == pattern_blob(21, 2048));
  CHECK(v3.manifest_json == "{\"v\":3}");
  CHECK(store->verify(3).ok());
  CHECK(count_staged(dir.store()) == 0);
  CHECK(store->stats()->blob_files == 3);  // versions 2 and 3 (blobs 10, 21, 20); version 1 dropped

  // A blob that was referenced at prepare (so not staged) and dropped before the record is written
  // from the bytes the prepared commit kept.
  VersionData back;
  back.fragments[0] = pattern_blob(20, 2048);  // the content version 3 holds
  auto dedup = store->prepare(back, 9);
  REQUIRE(dedup.ok());
  CHECK(dedup->staged.empty());
  CHECK(dedup->data.fragments.at(0) == pattern_blob(20, 2048));  // not staged: kept for the record
  VersionData other = make_version(4, {30, 31}, 2048);
  REQUIRE(store->commit(other).ok());
  REQUIRE(store->commit(make_version(5, {40, 41}, 2048)).ok());  // 3 (and with it blob 20) dropped
  REQUIRE(store->commit_prepared(std::move(*dedup), 6, "{}", {1}).ok());
  auto v6 = store->get(6).value();
  CHECK(v6.fragments.at(0) == pattern_blob(20, 2048));
  CHECK(v6.fragments.at(1) == pattern_blob(41, 2048));

  // A prepared commit whose record is refused, or that is discarded, leaves no file behind.
  VersionData late;
  late.fragments[0] = pattern_blob(50, 2048);
  auto refused = store->prepare(late, 10);
  REQUIRE(refused.ok());
  auto conflict = store->commit_prepared(std::move(*refused), 6, "{}", {1});
  REQUIRE(!conflict.ok());
  CHECK(conflict.error().code == ErrorCode::conflict);
  auto dropped = store->prepare(late, 11);
  REQUIRE(dropped.ok());
  CHECK(count_staged(dir.store()) == 1);
  store->discard(std::move(*dropped));
  CHECK(count_staged(dir.store()) == 0);
  CHECK(store->stats()->blob_files == 3);  // versions 5 and 6: blobs 40, 41, 20
}

// Writes `blob` into a new incoming file in pieces of 300 bytes, last piece first.
IncomingBlob incoming_of(CheckpointStore& store, const Blob& blob) {
  auto file = store.incoming(blob.size());
  REQUIRE(file.ok());
  std::vector<uint64_t> starts;
  for (uint64_t at = 0; at < blob.size(); at += 300) starts.push_back(at);
  std::reverse(starts.begin(), starts.end());
  for (uint64_t at : starts) {
    const size_t n = std::min<uint64_t>(300, blob.size() - at);
    REQUIRE(file->write_at(at, blob.data() + at, n).ok());
  }
  CHECK_FALSE(file->write_at(blob.size(), blob.data(), 1).ok());  // past the end
  return std::move(*file);
}

TEST_CASE("blobs that arrive as files are prepared and recorded like bytes, and no file outlives its commit") {
  TempDir dir;
  StoreOptions options;
  options.retention.keep_last = 2;
  options.file_blob_min_bytes = 1024;  // fragments of 2048 bytes are files; the 512-byte state is not
  auto store = open_or_fail(dir.store(), options);
  REQUIRE(store->commit(make_version(1, {10, 11}, 2048)).ok());

  CheckpointStore::IncomingCommit commit;
  commit.fragments[0] = incoming_of(*store, pattern_blob(20, 2048));
  commit.optimizer_state[0] = incoming_of(*store, pattern_blob(22, 512));
  commit.fragments[1] = incoming_of(*store, pattern_blob(11, 2048));  // the content version 1 holds
  CHECK(count_staged(dir.store()) == 3);  // the incoming files are temporaries
  auto prepared = store->prepare_incoming(std::move(commit), 7);
  REQUIRE(prepared.ok());
  // Both large blobs are staged (one of them is referenced now, and may be dropped before the
  // record); the small one was read back and its file removed.
  CHECK(prepared->staged.size() == 2);
  CHECK(count_staged(dir.store()) == 2);
  CHECK(prepared->data.fragments.at(0).empty());
  CHECK(prepared->data.optimizer_state.at(0) == pattern_blob(22, 512));
  // The hashes are those of the bytes: the same entries as preparing the bytes themselves.
  VersionData same;
  same.fragments[0] = pattern_blob(20, 2048);
  same.fragments[1] = pattern_blob(11, 2048);
  same.optimizer_state[0] = pattern_blob(22, 512);
  auto by_bytes = store->prepare(same, 8);
  REQUIRE(by_bytes.ok());
  REQUIRE(by_bytes->entries.size() == prepared->entries.size());
  for (size_t i = 0; i < prepared->entries.size(); ++i) {
    CHECK(by_bytes->entries[i].hash == prepared->entries[i].hash);
    CHECK(by_bytes->entries[i].size == prepared->entries[i].size);
  }
  store->discard(std::move(*by_bytes));

  REQUIRE(store->commit_prepared(std::move(*prepared), 2, "{}", {}).ok());
  auto v2 = store->get(2).value();
  CHECK(v2.fragments.at(0) == pattern_blob(20, 2048));
  CHECK(v2.fragments.at(1) == pattern_blob(11, 2048));
  CHECK(v2.optimizer_state.at(0) == pattern_blob(22, 512));
  CHECK(store->verify(2).ok());
  CHECK(count_staged(dir.store()) == 0);
  CHECK(store->stats()->blob_files == 3);  // blobs 10, 11 (shared by versions 1 and 2) and 20

  // A commit given up before its prepare leaves nothing: an IncomingBlob unlinks its own file.
  {
    CheckpointStore::IncomingCommit dropped;
    dropped.fragments[0] = incoming_of(*store, pattern_blob(30, 2048));
    CHECK(count_staged(dir.store()) == 1);
  }
  CHECK(count_staged(dir.store()) == 0);
  // An incoming file a crash left behind is a temporary that the next open deletes.
  auto left = store->incoming(2048);
  REQUIRE(left.ok());
  const std::string left_path = left->take_path();  // no longer unlinked by its object
  store.reset();
  CHECK(std::filesystem::exists(left_path));
  store = open_or_fail(dir.store(), options);
  CHECK_FALSE(std::filesystem::exists(left_path));
}

TEST_CASE("a slow prepare does not hold back another commit") {
  TempDir dir;
  StoreOptions options;
  options.file_blob_min_bytes = 1024;
  std::atomic<bool> in_slow_prepare{false};
  std::atomic<bool> release{false};
  options.fault_hook = [&](std::string_view name) -> Status {
    if (name == "prepare.fragment.0") {
      in_slow_prepare = true;
      while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Status::success();
  };
  auto store = open_or_fail(dir.store(), options);
  REQUIRE(store->commit(make_version(1, {10, 11}, 2048)).ok());
  VersionData only0;
  only0.fragments[0] = pattern_blob(20, 2048);
  Expected<CheckpointStore::PreparedCommit> slow = make_error(ErrorCode::io, "not run");
  std::thread preparing([&] { slow = store->prepare(only0, 1); });
  while (!in_slow_prepare) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // While fragment 0's prepare is stuck, fragment 1 prepares and lands twice.
  for (uint64_t v : {2, 3}) {
    VersionData only1;
    only1.fragments[1] = pattern_blob(20 + v, 2048);
    auto prepared = store->prepare(only1, 10 + v);
    REQUIRE(prepared.ok());
    REQUIRE(store->commit_prepared(std::move(*prepared), v, "{}", {0}).ok());
  }
  CHECK(store->latest_committed_version().value() == 3);
  release = true;
  preparing.join();
  REQUIRE(slow.ok());
  REQUIRE(store->commit_prepared(std::move(*slow), 4, "{}", {1}).ok());
  auto v4 = store->get(4).value();
  CHECK(v4.fragments.at(0) == pattern_blob(20, 2048));
  CHECK(v4.fragments.at(1) == pattern_blob(23, 2048));
}

TEST_CASE("a second open of a store that is already open is refused") {
  TempDir dir;
  auto first = open_or_fail(dir.store());
  auto second = CheckpointStore::open(dir.store());
  REQUIRE(!second.ok());
  CHECK(second.error().code == ErrorCode::io);
}

}  // namespace
}  // namespace archipelago::storage

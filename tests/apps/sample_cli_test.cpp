// `archipelago sample` as a user runs it, on a run that `archipelago train` just made: a seeded
// sample is the same text twice, `train` printed one of its final version, bad input exits 2 with
// its reason, and a damaged store blob is refused with the version named.
#include <filesystem>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "../storage/test_support.hpp"
#include "../support/run_cli.hpp"

namespace {

using archipelago::testing::last_line_json;
using archipelago::testing::run_cli;

}  // namespace

TEST_CASE("sample: a seeded sample is the same text twice, train prints one, bad input and damage are refused") {
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-sample-test";
  std::filesystem::remove_all(dir);
  const std::string run_dir = (dir / "run").string();
  const std::string data = (std::filesystem::temp_directory_path() / "archipelago-test-data").string();
  auto train = run_cli("train --json --run-dir " + run_dir +
                           " --set model.preset=tiny --set train.learners=2 --set inner.batch_size=8"
                           " --set train.inner_steps=10 --set train.max_tokens=81920 --set train.max_seconds=0"
                           " --set train.threads=1 --set runtime.store_sync=false --set data.eval_batches=2"
                           " --set data.cache_dir=" + data,
                       240);
  CAPTURE(train.out);
  REQUIRE(train.exit_code == 0);
  const auto summary = last_line_json(train.out);
  const uint64_t final_version = summary["final_version"].get<uint64_t>();
  REQUIRE(final_version >= 2);
  // train's summary carries a sample of its final version.
  REQUIRE(summary.contains("sample"));
  CHECK(summary["sample"]["version"] == final_version);
  CHECK(summary["sample"]["text"].get<std::string>().size() > 0);

  auto sample = [&](const std::string& options) {
    auto outcome = run_cli("sample --json --run-dir " + run_dir + " --tokens 48 " + options, 60);
    CAPTURE(outcome.out);
    REQUIRE(outcome.exit_code == 0);
    return last_line_json(outcome.out);
  };
  const auto first = sample("--seed 7 --prompt 'The '");
  const auto again = sample("--seed 7 --prompt 'The '");
  const auto other = sample("--seed 8 --prompt 'The '");
  CHECK(first["version"] == final_version);
  CHECK(first["tokens"] == 48);
  CHECK(first["kv_cache"] == true);
  CHECK(first["text"] == again["text"]);
  CHECK(first["text"] != other["text"]);
  // An earlier version is asked for by number (retention keeps the newest 20).
  const auto earlier = sample("--version " + std::to_string(final_version - 1) + " --temperature 0");
  CHECK(earlier["version"] == final_version - 1);

  auto refused = [&](const std::string& arguments, int code, const std::string& reason) {
    auto outcome = run_cli("sample " + arguments, 60);
    CAPTURE(arguments);
    CAPTURE(outcome.out);
    CHECK(outcome.exit_code == code);
    CHECK(outcome.out.find(reason) != std::string::npos);
  };
  refused("--run-dir " + (dir / "nowhere").string(), 2, "no run directory");
  refused("--run-dir " + run_dir + " --version 999999", 2, "version 999999 is not a committed version");
  refused("--run-dir " + run_dir + " --top-p 0", 2, "--top-p must be in (0, 1]");
  refused("--run-dir " + run_dir + " --temperature -1", 2, "--temperature must be");

  // Every stored blob damaged in place: the version is refused by its checksums, and named.
  namespace st = archipelago::storage;
  const std::string store = run_dir + "/store";
  size_t damaged = 0;
  REQUIRE(st::testing::with_raw_db(store, [&](rocksdb::DB& db, auto& handles, const auto& descriptors) {
            auto* blobs = st::testing::family(handles, descriptors, st::kBlobsFamily);
            std::unique_ptr<rocksdb::Iterator> it(db.NewIterator(rocksdb::ReadOptions(), blobs));
            std::vector<std::pair<std::string, std::string>> changed;
            for (it->SeekToFirst(); it->Valid(); it->Next()) {
              std::string value = it->value().ToString();
              value[value.size() / 2] ^= 0x40;
              changed.emplace_back(it->key().ToString(), value);
            }
            for (const auto& [key, value] : changed) damaged += db.Put(rocksdb::WriteOptions(), blobs, key, value).ok();
          }).ok());
  REQUIRE(damaged > 0);
  refused("--run-dir " + run_dir + " --version " + std::to_string(final_version), 1,
          "version " + std::to_string(final_version) + " does not verify");
  std::filesystem::remove_all(dir);
}

// Using a trained model as a user does, on runs that `archipelago train` just made: `sample` (a
// seeded sample is the same text twice, `train` printed one of its final version, bad input exits 2
// with its reason, a damaged store blob is refused with the version named), `eval` (a version and
// its export score alike, in bits per byte too) and `--init-from` (a run started from an export
// begins at the exported version's held-out loss; a mis-shaped export is refused naming the tensor).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "../storage/test_support.hpp"
#include "../support/run_cli.hpp"

namespace {

using archipelago::testing::last_line_json;
using archipelago::testing::run_cli;

const std::string kTiny =
    " --set model.preset=tiny --set train.learners=2 --set inner.batch_size=8 --set train.inner_steps=10"
    " --set train.max_seconds=0 --set train.threads=1 --set runtime.store_sync=false --set data.eval_batches=2"
    " --set data.cache_dir=" + (std::filesystem::temp_directory_path() / "archipelago-test-data").string();

}  // namespace

TEST_CASE("sample: a seeded sample is the same text twice, train prints one, bad input and damage are refused") {
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-sample-test";
  std::filesystem::remove_all(dir);
  const std::string run_dir = (dir / "run").string();
  auto train = run_cli("train --json --run-dir " + run_dir + kTiny + " --set train.max_tokens=81920", 240);
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

TEST_CASE("eval and --init-from: an export scores as its version does, and a run started from it begins at its loss") {
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-init-from-test";
  std::filesystem::remove_all(dir);
  const std::string run_dir = (dir / "run").string(), exported = (dir / "export").string();
  auto train = run_cli("train --json --no-sample --run-dir " + run_dir + kTiny + " --set train.max_tokens=81920", 240);
  CAPTURE(train.out);
  REQUIRE(train.exit_code == 0);
  const auto first = last_line_json(train.out);
  CHECK_FALSE(first.contains("sample"));  // --no-sample
  CHECK(first["heldout_bits_per_byte"].get<double>() ==
        doctest::Approx(first["heldout_loss"].get<double>() / std::log(2.0)).epsilon(1e-9));
  const uint64_t version = first["final_version"].get<uint64_t>();
  REQUIRE(run_cli("export --run-dir " + run_dir + " --out " + exported, 60).exit_code == 0);

  // eval: the version and its export on the same text, in nats and in bits per byte (bytes: loss / ln 2).
  const std::string text = (dir / "text.txt").string();
  {
    std::ofstream out(text);
    for (int i = 0; i < 200; ++i) out << "In the beginning was the word, and the word was with the text " << i << ".\n";
  }
  auto eval = [&](const std::string& model) {
    auto outcome = run_cli("eval --json --text " + text + " " + model, 60);
    CAPTURE(outcome.out);
    REQUIRE(outcome.exit_code == 0);
    return last_line_json(outcome.out);
  };
  const auto stored = eval("--run-dir " + run_dir);
  const auto from_export = eval("--export " + exported);
  CHECK(stored["version"] == version);
  CHECK(from_export["version"] == version);
  CHECK(stored["tokens"].get<int64_t>() == static_cast<int64_t>(std::filesystem::file_size(text)) - 1);
  CHECK(from_export["loss"].get<double>() == doctest::Approx(stored["loss"].get<double>()).epsilon(1e-6));
  CHECK(stored["bits_per_byte"].get<double>() ==
        doctest::Approx(stored["loss"].get<double>() / std::log(2.0)).epsilon(1e-9));
  {
    auto not_export = run_cli("eval --text " + text + " --export " + run_dir, 60);
    CHECK(not_export.exit_code == 2);
    CHECK(not_export.out.find("is not an export") != std::string::npos);
  }

  // A new run from the export starts where the exported version ended: its first held-out loss
  // (same held-out text) is the one the first run measured for that version.
  auto resumed = run_cli("train --json --no-sample --run-dir " + (dir / "second").string() + kTiny +
                             " --set train.max_tokens=8192 --init-from " + exported,
                         240);
  CAPTURE(resumed.out);
  REQUIRE(resumed.exit_code == 0);
  const auto second = last_line_json(resumed.out);
  CHECK(second["initial_heldout_loss"].get<double>() == doctest::Approx(first["heldout_loss"].get<double>()).epsilon(1e-6));
  // A model of another shape is refused, naming the tensor.
  auto refused = run_cli("train --run-dir " + (dir / "third").string() + kTiny +
                             " --set model.preset=small --set train.max_tokens=8192 --init-from " + exported,
                         60);
  CHECK(refused.exit_code == 2);
  CHECK(refused.out.find("tensor token_embedding.weight is [256, 64] in the export") != std::string::npos);
  std::filesystem::remove_all(dir);
}

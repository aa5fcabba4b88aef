// `archipelago train` as a user runs it: a real process, its exit code, its stdout.
#include <cstdio>
#include <filesystem>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "../support/run_cli.hpp"

namespace {

using archipelago::testing::last_line_json;

archipelago::testing::CliOutcome run(const std::string& arguments) {
  return archipelago::testing::run_cli(arguments, 240);
}

}  // namespace

TEST_CASE("train --json runs a bounded tiny job and prints the summary as the last line") {
  auto dir = std::filesystem::temp_directory_path() / "archipelago-cli-test";
  std::filesystem::remove_all(dir);
  const std::string data = (std::filesystem::temp_directory_path() / "archipelago-test-data").string();
  for (std::string mode : {"sync", "ddp"}) {
    auto outcome = run("train --json --engine reference --run-dir " + (dir / mode).string() +
                       " --set model.preset=tiny --set data.tokenizer=bytes --set train.mode=" +
                       mode + " --set train.learners=2 --set train.inner_steps=10 --set train.max_tokens=81920"
                       " --set train.max_seconds=0 --set inner.batch_size=8 --set data.eval_batches=2 --set train.threads=1"
                       " --set data.cache_dir=" + data);
    CAPTURE(outcome.out);
    REQUIRE(outcome.exit_code == 0);
    auto summary = last_line_json(outcome.out);
    for (const char* key : {"mode", "learners", "inner_steps", "tokens", "heldout_loss", "wall_s", "bytes_sent",
                            "bytes_ddp_equivalent"}) {
      CHECK_MESSAGE(summary.contains(key), key);
    }
    CHECK(summary["mode"] == mode);
    CHECK(summary["tokens"].get<int64_t>() == 81920);
    CHECK(summary["heldout_loss"].get<double>() < summary["initial_heldout_loss"].get<double>());
    CHECK(std::filesystem::exists(dir / mode / "metrics.jsonl"));
    CHECK(std::filesystem::exists(dir / mode / "summary.json"));
    // The reference engine has no links: its bytes are computed and labelled so.
    CHECK(summary["bytes_measured"] == false);
    if (mode == "sync") CHECK(summary["bytes_sent"].get<int64_t>() < summary["bytes_ddp_equivalent"].get<int64_t>());
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("train refuses a bad configuration with exit code 2 and names the key") {
  auto outcome = run("train --set outer.fragments=zero");
  CHECK(outcome.exit_code == 2);
  CHECK(outcome.out.find("outer.fragments") != std::string::npos);
  outcome = run("train --engine reference --set train.mode=async --set model.preset=tiny --set data.tokenizer=bytes --set train.max_seconds=1 --run-dir " +
                (std::filesystem::temp_directory_path() / "archipelago-cli-bad").string());
  CHECK(outcome.exit_code == 2);
  CHECK(outcome.out.find("train.mode") != std::string::npos);
  // An outer optimizer the mode would ignore is refused before anything starts.
  outcome = run("train --set train.mode=sync --set outer.optimizer=delayed_nesterov");
  CHECK(outcome.exit_code == 2);
  CHECK(outcome.out.find("outer.optimizer") != std::string::npos);
  std::filesystem::remove_all(std::filesystem::temp_directory_path() / "archipelago-cli-bad");
}

TEST_CASE("the allocator: the build's own is named at start, and a run under a preloaded jemalloc trains a SentencePiece tokenizer, encodes and commits") {
  // Memory the SentencePiece shim allocates goes back through the shim (training/spm_shim.cpp): a
  // malloc that is not the shim's (a preloaded jemalloc here, the linked tcmalloc otherwise) must
  // never be handed a buffer it does not own. jemalloc aborts or corrupts on such a free.
  const std::filesystem::path jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
  REQUIRE_MESSAGE(std::filesystem::exists(jemalloc), "libjemalloc2 is installed by scripts/setup.sh");
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-cli-allocator";
  std::filesystem::remove_all(dir);
  const std::string data = (std::filesystem::temp_directory_path() / "archipelago-test-data").string();
  const std::string run_args = "train --json --run-dir " + (dir / "run").string() +
                               " --set model.preset=tiny --set data.tokenizer='\"bpe:512\"' --set train.learners=1"
                               " --set train.inner_steps=10 --set train.max_tokens=40960 --set train.max_seconds=0"
                               " --set inner.batch_size=8 --set data.eval_batches=2 --set train.threads=1"
                               " --set data.cache_dir=" + data;
  auto outcome = archipelago::testing::run_cli_with_env("LD_PRELOAD=" + jemalloc.string(), run_args, 240);
  CAPTURE(outcome.out);
  REQUIRE(outcome.exit_code == 0);
  CHECK(outcome.out.find("allocator: jemalloc") != std::string::npos);
  auto summary = last_line_json(outcome.out);
  CHECK(summary["tokenizer"]["kind"] == "spm");  // trained on the corpus by the shim
  CHECK(summary["tokenizer"]["vocab"] == 512);
  CHECK(summary["versions_committed"].get<int64_t>() >= 1);
  CHECK(summary["heldout_loss"].get<double>() < summary["initial_heldout_loss"].get<double>());
  // Without a preload the build's own allocator serves it, and says so.
  auto plain = run("train --engine reference --set train.mode=sync --run-dir " + (dir / "plain").string() +
                   " --set model.preset=tiny --set data.tokenizer=bytes --set train.max_tokens=8192 --set train.max_seconds=0"
                   " --set inner.batch_size=8 --set data.eval_batches=1 --set train.threads=1 --set data.cache_dir=" + data);
  CAPTURE(plain.out);
  CHECK(plain.exit_code == 0);
  CHECK(plain.out.find(ARCHIPELAGO_EXPECTED_ALLOCATOR) != std::string::npos);
  std::filesystem::remove_all(dir);
}

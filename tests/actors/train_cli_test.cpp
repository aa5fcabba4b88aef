// `archipelago train` on the actor runtime as a user runs it: a real process, fault injection,
// the JSON summary, and --resume continuing from the latest committed version.
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "../support/run_cli.hpp"

namespace {

using archipelago::testing::last_line_json;

archipelago::testing::CliOutcome run(const std::string& arguments) {
  return archipelago::testing::run_cli(arguments, 120);
}

}  // namespace

TEST_CASE("train (actors engine) survives injected learner kills and --resume continues the run") {
  const auto dir = std::filesystem::temp_directory_path() / "archipelago-actors-cli";
  std::filesystem::remove_all(dir);
  const std::string data = (std::filesystem::temp_directory_path() / "archipelago-test-data").string();
  const std::string common = " --set model.preset=tiny --set data.tokenizer=bytes --set train.learners=2 --set inner.batch_size=8"
                             " --set data.eval_batches=2 --set train.inner_steps=10 --set runtime.store_sync=false"
                             " --set train.threads=1 --set data.cache_dir=" + data;
  auto first = run("train --json --run-dir " + dir.string() + common +
                   " --set train.max_seconds=8 --set faults.kill_learner_every_s=3");
  CAPTURE(first.out);
  REQUIRE(first.exit_code == 0);
  auto summary = last_line_json(first.out);
  for (const char* key : {"engine", "mode", "versions_committed", "goodput", "restarts", "rejected_updates",
                          "heldout_loss", "bytes_sent", "bytes_ddp_equivalent", "tokens"}) {
    CHECK_MESSAGE(summary.contains(key), key);
  }
  CHECK(summary["engine"] == "actors");
  CHECK(summary["mode"] == "decoupled");
  CHECK(summary["restarts"].get<int>() >= 1);
  CHECK(summary["versions_committed"].get<int>() > 0);
  CHECK(summary["goodput"].get<double>() > 0);
  CHECK(summary["goodput"].get<double>() <= 1);
  CHECK(summary["bytes_sent"].get<int64_t>() < summary["bytes_ddp_equivalent"].get<int64_t>());
  CHECK(std::filesystem::exists(dir / "store"));
  CHECK(std::filesystem::exists(dir / "metrics.jsonl"));
  // Progress lines show a value not measured yet as a dash, never "nan" (the sampled text at the end
  // may hold those letters: "anand" did once).
  CHECK(first.out.find("progress ") != std::string::npos);
  {
    std::istringstream lines(first.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("progress ", 0) != 0) continue;
      CAPTURE(line);
      CHECK(line.find("=nan") == std::string::npos);
      CHECK(line.find("=-nan") == std::string::npos);
    }
  }
  CHECK(first.out.find("heldout_loss=\u2014") != std::string::npos);  // before the first evaluation

  // A second run in the same directory without --resume is refused (exit 2); --resume continues.
  auto refused = run("train --run-dir " + dir.string() + common + " --set train.max_seconds=2");
  CHECK(refused.exit_code == 2);
  auto resumed = run("train --json --resume " + dir.string() + " --set train.max_seconds=4 --set faults.kill_learner_every_s=0");
  CAPTURE(resumed.out);
  REQUIRE(resumed.exit_code == 0);
  auto again = last_line_json(resumed.out);
  CHECK(again["start_version"].get<uint64_t>() == summary["final_version"].get<uint64_t>());
  CHECK(again["final_version"].get<uint64_t>() > again["start_version"].get<uint64_t>());
  // The resumed run's first rounds do not release the old run's momentum again: its final version
  // scores no worse than the version it resumed from (within 0.01 nat of evaluation noise).
  CHECK(again["heldout_loss"].get<double>() <= summary["heldout_loss"].get<double>() + 0.01);
  std::filesystem::remove_all(dir);
}

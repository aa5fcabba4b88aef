// The data-parallel baseline as a user runs it: `archipelago train` with train.mode = "ddp" starts
// real worker processes that all-reduce over gloo on loopback, and `archipelago ddp-worker`
// processes started by hand meet at a store, as on machines of their own. Bytes are the kernel's
// counts on the workers' sockets.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "../support/run_cli.hpp"
#include "common/child_process.hpp"
#include "run/data_parallel_job.hpp"

namespace {

namespace fs = std::filesystem;
using archipelago::testing::last_line_json;
using nlohmann::json;

const std::string kTiny =
    " --set model.preset=tiny --set data.tokenizer=bytes --set train.learners=2 --set train.inner_steps=10"
    " --set train.max_tokens=40960 --set train.max_seconds=0 --set inner.batch_size=8 --set data.eval_batches=2"
    " --set train.threads=1 --set train.mode=ddp";

std::string data_dir() { return (fs::temp_directory_path() / "archipelago-test-data").string(); }

json run_train(const fs::path& dir, const std::string& engine) {
  auto outcome = archipelago::testing::run_cli("train --json --no-sample --engine " + engine + " --run-dir " +
                                                   dir.string() + kTiny + " --set data.cache_dir=" + data_dir(),
                                               300);
  CAPTURE(outcome.out);
  REQUIRE(outcome.exit_code == 0);
  return last_line_json(outcome.out);
}

}  // namespace

TEST_CASE("train.mode = ddp is a gloo job: bytes measured on its sockets, the reference engine's losses") {
  const fs::path dir = fs::temp_directory_path() / "archipelago-ddp-test";
  fs::remove_all(dir);
  const json gloo = run_train(dir / "gloo", "actors");
  const json reference = run_train(dir / "reference", "reference");
  CAPTURE(gloo.dump());

  REQUIRE(gloo["mode"] == "ddp");
  CHECK(gloo["bytes_measured"] == true);
  CHECK(gloo["parameters_agree"] == true);
  REQUIRE(gloo["workers"].size() == 2);
  CHECK(gloo["tokens"] == reference["tokens"]);
  CHECK(gloo["steps"] == reference["steps"]);

  // Both directions measured; in a ring of two what one worker sends the other receives.
  int64_t sent = 0, received = 0, broadcast = 0;
  for (const auto& w : gloo["workers"]) {
    CHECK(w["bytes_sent"].get<int64_t>() > 0);
    CHECK(w["bytes_received"].get<int64_t>() > 0);
    sent += w["bytes_sent"].get<int64_t>();
    received += w["bytes_received"].get<int64_t>();
    broadcast += w["broadcast_bytes"].get<int64_t>();
  }
  CHECK(sent == gloo["bytes_sent"].get<int64_t>());
  CHECK(std::abs(static_cast<double>(sent - received)) <= 0.001 * sent);
  // The ring formula every computed baseline uses is what gloo sent, up to the start-up broadcast,
  // the progress reports' counters and framing.
  const double ring = gloo["bytes_ddp_equivalent"].get<double>();
  REQUIRE(ring > 0);
  CHECK((sent - broadcast) / ring == doctest::Approx(1.0).epsilon(0.02));

  // The same batches, the same mean gradient: the reference engine's data-parallel run, to float
  // rounding (a sum over two workers instead of a scaled accumulation).
  CHECK(gloo["initial_heldout_loss"].get<double>() ==
        doctest::Approx(reference["initial_heldout_loss"].get<double>()).epsilon(1e-6));
  CHECK(gloo["heldout_loss"].get<double>() == doctest::Approx(reference["heldout_loss"].get<double>()).epsilon(0.005));
  CHECK(gloo["heldout_loss"].get<double>() < gloo["initial_heldout_loss"].get<double>() - 0.1);
  fs::remove_all(dir);
}

TEST_CASE("ddp-worker processes started by hand meet at a store, train together and agree") {
  const fs::path dir = fs::temp_directory_path() / "archipelago-ddp-workers-test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The configuration a job across machines would hand every worker.
  {
    std::ofstream config(dir / "run.toml");
    config << "[model]\npreset = \"tiny\"\n[data]\ntokenizer = \"bytes\"\neval_batches = 2\ncache_dir = \"" << data_dir()
           << "\"\n[inner]\nbatch_size = 8\n[train]\nmode = \"ddp\"\nlearners = 2\ninner_steps = 5\n"
              "max_tokens = 20480\nmax_seconds = 0\nthreads = 1\n";
  }
  const int port = archipelago::free_port();
  REQUIRE(port > 0);
  std::vector<std::unique_ptr<archipelago::ChildProcess>> workers;
  for (int rank = 0; rank < 2; ++rank) {
    archipelago::ChildOptions options;
    options.binary = ARCHIPELAGO_BINARY;
    options.arguments = {"ddp-worker", "--config", (dir / "run.toml").string(), "--store",
                         "127.0.0.1:" + std::to_string(port), "--rank", std::to_string(rank), "--world", "2"};
    if (rank == 0) options.arguments.push_back("--host-store");
    options.out = dir / ("rank-" + std::to_string(rank) + ".out");
    options.err = dir / ("rank-" + std::to_string(rank) + ".err");
    workers.push_back(std::make_unique<archipelago::ChildProcess>(options));
  }
  std::vector<json> results;
  for (auto& w : workers) {
    const int code = w->wait(240);
    CAPTURE(w->err());
    REQUIRE(code == 0);
    results.push_back(json::parse(w->last_out_line()));
  }
  CHECK(results[0]["rank"] == 0);
  CHECK(results[1]["rank"] == 1);
  CHECK(results[0]["parameter_digest"] == results[1]["parameter_digest"]);
  CHECK(results[0]["steps"] == results[1]["steps"]);
  for (const auto& r : results) {
    CHECK(r["bytes_sent"].get<int64_t>() > 0);
    CHECK(r["store_bytes_sent"].get<int64_t>() > 0);  // the store connection is counted apart
  }
  // Rank 0's progress lines came before its result.
  CHECK(workers[0]->out().find("progress {") != std::string::npos);
  fs::remove_all(dir);
}


TEST_CASE("a gloo job whose worker is SIGKILLed restarts every worker from the checkpoint and ends where an unbroken job ends") {
  const fs::path dir = fs::temp_directory_path() / "archipelago-ddp-restart-test";
  fs::remove_all(dir);
  const std::string longer = " --set train.max_tokens=102400";  // 100 steps: room to kill one mid-run
  auto unbroken = archipelago::testing::run_cli("train --json --no-sample --run-dir " + (dir / "unbroken").string() + kTiny +
                                                    longer + " --set data.cache_dir=" + data_dir(),
                                                300);
  CAPTURE(unbroken.out);
  REQUIRE(unbroken.exit_code == 0);
  const json expected = last_line_json(unbroken.out);
  REQUIRE(expected["restarts"] == 0);

  archipelago::ChildOptions options;
  options.binary = ARCHIPELAGO_BINARY;
  options.arguments = {"train", "--json", "--no-sample", "--run-dir", (dir / "broken").string()};
  for (const std::string& set : {std::string("model.preset=tiny"), std::string("data.tokenizer=bytes"),
                                 std::string("train.learners=2"), std::string("train.inner_steps=10"),
                                 std::string("train.max_tokens=102400"), std::string("train.max_seconds=0"),
                                 std::string("inner.batch_size=8"), std::string("data.eval_batches=2"),
                                 std::string("train.threads=1"), std::string("train.mode=ddp"),
                                 "data.cache_dir=" + data_dir()}) {
    options.arguments.insert(options.arguments.end(), {"--set", set});
  }
  fs::create_directories(dir);
  options.out = dir / "broken.out";
  options.err = dir / "broken.err";
  archipelago::ChildProcess train(options);
  // Once rank 0 has written its first checkpoint, rank 1 dies.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  pid_t victim = 0;
  while (std::chrono::steady_clock::now() < deadline && train.running()) {
    if (fs::exists(dir / "broken" / "ddp-checkpoint.bin")) {
      victim = archipelago::run::find_data_parallel_worker(dir / "broken" / "config.toml", 1);
      if (victim > 0) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(victim > 0);
  REQUIRE(kill(victim, SIGKILL) == 0);
  const int code = train.wait(300);
  CAPTURE(train.err());
  REQUIRE(code == 0);
  const json summary = json::parse(train.last_out_line());
  CAPTURE(summary.dump());
  REQUIRE(summary["restarts"] == 1);
  CHECK(summary["restart_events"][0]["rank"] == 1);
  CHECK(summary["restart_events"][0]["exit_code"] == 128 + SIGKILL);
  const int64_t resumed = summary["workers"][0]["resumed_from_step"].get<int64_t>();
  CHECK(resumed > 0);
  CHECK(resumed % 10 == 0);  // a report's step: where rank 0 wrote its checkpoint
  CHECK(resumed < summary["steps"].get<int64_t>());
  // Same checkpointed state, same batches from there: the parameters of the unbroken job, bit for bit.
  CHECK(summary["steps"] == expected["steps"]);
  CHECK(summary["workers"][0]["parameter_digest"] == expected["workers"][0]["parameter_digest"]);
  CHECK(summary["heldout_loss"] == expected["heldout_loss"]);
  CHECK(summary["initial_heldout_loss"] == expected["initial_heldout_loss"]);
  // Goodput, measured by the job: the restart's start-up and the steps redone since the checkpoint are lost.
  CHECK(expected["goodput"].get<double>() > 0);
  CHECK(expected["goodput"].get<double>() <= 1);
  CHECK(summary["goodput"].get<double>() < expected["goodput"].get<double>());
  CHECK(summary["kept_step_s"].get<double>() <= summary["allocated_s"].get<double>());
  fs::remove_all(dir);
}

TEST_CASE("a corrupt data-parallel checkpoint is refused with its reason, never a silent start over") {
  const fs::path dir = fs::temp_directory_path() / "archipelago-ddp-corrupt-test";
  fs::remove_all(dir);
  fs::create_directories(dir / "run");
  {
    std::ofstream bad(dir / "run" / "ddp-checkpoint.bin", std::ios::binary);
    bad << "ARCHDDP1 but not the rest";
  }
  auto outcome = archipelago::testing::run_cli("train --json --no-sample --run-dir " + (dir / "run").string() + kTiny +
                                                   " --set data.cache_dir=" + data_dir(),
                                               120);
  CAPTURE(outcome.out);
  CHECK(outcome.exit_code != 0);
  CHECK(outcome.out.find("ddp-checkpoint.bin") != std::string::npos);
  CHECK(outcome.out.find("move it away") != std::string::npos);
  CHECK(outcome.out.find("restarting every worker") == std::string::npos);  // a restart would not mend it
  CHECK(outcome.out.find("data-parallel workers on gloo") == std::string::npos);  // refused before any worker starts
  CHECK(fs::file_size(dir / "run" / "ddp-checkpoint.bin") == std::string("ARCHDDP1 but not the rest").size());
  fs::remove_all(dir);
}

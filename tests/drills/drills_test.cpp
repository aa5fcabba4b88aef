// The CI drills end to end. `archipelago drill --config config/drills/ci.toml` starts a coordinator
// and two nodes as real processes, kills a learner (console), corrupts one of a learner's updates
// in flight (drill hook), SIGKILLs a node and the coordinator (restarting both), freezes a node and
// throttles a learner, under the DiLoCo run and the ddp-like stall baseline, after a fault-free run;
// then checks its own invariants on the processes, the RocksDB stores and what the coordinators
// logged (their commit logs, their refusals). ci-netns.toml (as root) puts two sites in network
// namespaces, cuts one site's link and SIGKILLs the other site.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace fs = std::filesystem;
using archipelago::testing::last_line_json;
using archipelago::testing::run_cli;

namespace {

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

struct ScratchDir {
  fs::path dir = fs::temp_directory_path() / ("archipelago-drill-test-" + std::to_string(getpid()));
  ScratchDir() { fs::remove_all(dir); }
  ~ScratchDir() { fs::remove_all(dir); }
};

// `archipelago drill --config config/drills/NAME.toml --seed SEED --json --report DIR`, which must
// exit 0; its JSON line.
nlohmann::json passing_drill(const std::string& name, int seed, const ScratchDir& scratch, int timeout_s) {
  const std::string config = std::string(ARCHIPELAGO_SOURCE_DIR) + "/config/drills/" + name + ".toml";
  auto outcome = run_cli("drill --config " + config + " --seed " + std::to_string(seed) + " --json --report " +
                             scratch.dir.string(), timeout_s);
  CAPTURE(outcome.out);
  REQUIRE(outcome.exit_code == 0);
  return last_line_json(outcome.out);
}

}  // namespace

TEST_CASE("the CI drill: every fault recovered within its bound, every invariant held, the JSON line and the report") {
  ScratchDir scratch;
  const auto result = passing_drill("ci", 7, scratch, 400);

  // The fields a caller reads.
  REQUIRE(result["goodput"]["diloco"].is_number());
  REQUIRE(result["goodput"]["ddp"].is_number());
  // The real data-parallel job ran under the same schedule: every kill landed on its workers and
  // restarted the whole job; its goodput is its own measurement.
  REQUIRE(result["goodput"]["ddp_gloo"].is_number());
  CHECK(result["goodput"]["ddp_gloo"].get<double>() > 0);
  CHECK(result["goodput"]["ddp_gloo"].get<double>() < result["goodput"]["fault_free"].get<double>());
  CHECK(result["ddp_gloo_job"]["kills"] == 4);  // learner-N's worker, node-1's two, rank 0
  CHECK(result["ddp_gloo_job"]["restarts"].get<int>() >= 1);
  CHECK(result["ddp_gloo_job"]["bytes_sent"].get<int64_t>() > 0);
  CHECK(result["ddp_gloo_job"]["not_applicable"].size() == 1);  // the corrupted update
  REQUIRE(result["invariants_total"].is_number_integer());
  CHECK(result["invariants_passed"] == result["invariants_total"]);
  CHECK(result["invariants_total"].get<int>() >= 7);
  for (const auto& invariant : result["invariants"]) {  // each one observed something: none holds vacuously
    CAPTURE(invariant.dump());
    CHECK(invariant["observations"].get<int64_t>() > 0);
  }
  CHECK(result["kills"].get<int>() == 3);  // the timeline's learner, node and coordinator kills
  for (const char* kind : {"learner", "node", "coordinator"}) {
    CAPTURE(kind);
    REQUIRE(result["recovery_s"][kind]["n"].get<int>() == 1);
    CHECK(result["recovery_s"][kind]["median"].get<double>() > 0);
    CHECK(result["recovery_s"][kind]["max"].get<double>() >= result["recovery_s"][kind]["median"].get<double>());
  }
  CHECK(result["recovery_s"]["coordinator"]["max"].get<double>() < 2.0);
  CHECK(result["recovery_s"]["freeze"]["n"].get<int>() == 1);
  CHECK(result["recovery_s"]["slow_learner"]["n"].get<int>() == 1);
  CHECK(result["recovery_s"]["corrupt"]["n"].get<int>() == 1);
  // What a model of the drill reads (archipelago sim --from-drill).
  CHECK(result["slots"] == 4);
  CHECK(result["inner_steps"] == 10);
  CHECK(result["fault_counts"]["learner"] == 1);
  CHECK(result["fault_counts"]["corrupt"] == 1);
  CHECK(result["down_s"]["coordinator"]["n"] == 1);
  CHECK(result["down_s"]["node"]["median"].get<double>() > 0.5);  // it is restarted 0.5 s after its SIGKILL
  REQUIRE(result["step_s"].is_number());
  CHECK(result["step_s"].get<double>() > 0);
  CHECK(result["ledger_s"]["diloco"]["merged"].get<double>() > 0);
  // What no clock saw in the DiLoCo run (its kills, freeze and outages included) is one part, small.
  double allocated_s = 0;
  for (const auto& [part, seconds] : result["ledger_s"]["diloco"].items()) allocated_s += seconds.get<double>();
  CAPTURE(result["ledger_s"].dump());
  REQUIRE(result["ledger_s"]["diloco"]["unaccounted"].is_number());
  CHECK(std::abs(result["ledger_s"]["diloco"]["unaccounted"].get<double>()) < 0.03 * allocated_s);
  std::set<std::string> names;
  for (const auto& check : result["invariants"]) {
    CAPTURE(check.dump());
    CHECK(check["passed"] == true);
    CHECK(!check["evidence"].get<std::string>().empty());
    names.insert(check["name"].get<std::string>());
  }
  for (const char* name : {"versions_strictly_increasing_and_verified", "digests_never_change", "no_update_applied_twice",
                           "killed_learners_back_within_bound", "coordinator_resumed_from_last_committed",
                           "coordinator_next_commit_within_bound", "loss_below_start", "loss_within_margin_of_fault_free",
                           "corrupted_updates_refused"}) {
    CHECK_MESSAGE(names.count(name) == 1, name);
  }
  // The checks judged what the coordinators wrote: the commit log of both incarnations (one
  // coordinator kill), and the one corruption matched to its refusal in the coordinator's log.
  auto evidence_of = [&](const std::string& name) {
    for (const auto& check : result["invariants"]) {
      if (check["name"] == name) return check["evidence"].get<std::string>();
    }
    return std::string();
  };
  const std::string versions = evidence_of("versions_strictly_increasing_and_verified");
  CHECK_MESSAGE(versions.find("in the commit log from 2 incarnation(s)") != std::string::npos, versions);
  const std::string corrupt = evidence_of("corrupted_updates_refused");
  CHECK_MESSAGE(corrupt.find("1 of 1 updates sent with a flipped payload bit matched") != std::string::npos, corrupt);
  CHECK_MESSAGE(corrupt.find("; 0 malformed refusals without an injection") != std::string::npos, corrupt);
  std::istringstream commit_log(slurp(scratch.dir / "diloco" / "run" / "commits.jsonl"));
  std::set<std::string> incarnations;
  uint64_t previous = 0;
  int commits = 0;
  for (std::string line; std::getline(commit_log, line);) {
    const auto commit = nlohmann::json::parse(line);
    CHECK(commit["version"].get<uint64_t>() > previous);
    previous = commit["version"].get<uint64_t>();
    incarnations.insert(commit["pid"].dump() + "@" + commit["syncer_started_unix_ms"].dump());
    commits += 1;
  }
  CHECK(incarnations.size() == 2);
  CHECK(commits > 2);

  // Faults stall every learner in the ddp-like baseline, only their victims under DiLoCo.
  CHECK(result["goodput"]["diloco"].get<double>() > result["goodput"]["ddp"].get<double>());

  // The goodput is the coordinator's ledger: the fault-free run has one coordinator incarnation, and the
  // drill's figure is the one in its summary.json.
  auto summary = nlohmann::json::parse(slurp(scratch.dir / "fault_free" / "run" / "summary.json"));
  CHECK(result["goodput"]["fault_free"].get<double>() == doctest::Approx(summary["goodput"].get<double>()).epsilon(1e-9));

  // The report and its plots.
  const std::string report = slurp(scratch.dir / "report.md");
  CHECK(report.find("invariants held") != std::string::npos);
  for (const char* svg : {"loss.svg", "goodput.svg", "recovery.svg"}) {
    const std::string text = slurp(scratch.dir / svg);
    CAPTURE(svg);
    CHECK(text.rfind("<svg", 0) == 0);
    CHECK(text.find("</svg>") != std::string::npos);
    CHECK(report.find(svg) != std::string::npos);
  }
  CHECK(slurp(scratch.dir / "loss.svg").find("<polyline") != std::string::npos);
}

TEST_CASE("the network drill: a site's link cut in network namespaces and restored, then a whole site SIGKILLed") {
  if (geteuid() != 0) {
    // A skip CTest shows as such (SKIP_RETURN_CODE 77, tests/drills/CMakeLists.txt), never a pass.
    std::fprintf(stderr, "skipped: network namespaces need root\n");
    std::fflush(stderr);
    std::_Exit(77);
  }
  ScratchDir scratch;
  const auto result = passing_drill("ci-netns", 3, scratch, 300);
  CHECK(result["netns"] == true);
  CHECK(result["invariants_passed"] == result["invariants_total"]);
  REQUIRE(result["recovery_s"]["cut"]["n"].get<int>() == 1);
  CHECK(result["recovery_s"]["site"]["n"].get<int>() == 1);
  CHECK(result["kills"].get<int>() == 1);  // kill_site SIGKILLs site-1's one node process
  // The nodes really were in the site namespaces: they reached the coordinator at the hub's address.
  const std::string node = slurp(scratch.dir / "diloco" / "node-0.0.err") + slurp(scratch.dir / "diloco" / "node-0.0.out");
  CHECK_MESSAGE(node.find("joined the coordinator at 10.79.0.1:") != std::string::npos, node.substr(0, 2000));
  const std::string report = slurp(scratch.dir / "report.md");
  CHECK(report.find("ip link set s0 down") != std::string::npos);
  // Nothing of the drill's network is left behind.
  const std::string prefix = result["netns_prefix"].get<std::string>();
  REQUIRE(prefix.rfind("adrill", 0) == 0);
  FILE* pipe = popen("ip netns list 2>&1", "r");
  REQUIRE(pipe != nullptr);
  std::string namespaces;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe)) namespaces += buffer;
  pclose(pipe);
  CHECK_MESSAGE(namespaces.find(prefix + "-") == std::string::npos, namespaces);
}

TEST_CASE("a drill file with an unknown key or fault is refused with exit code 2 and the key named") {
  ScratchDir scratch;
  fs::create_directories(scratch.dir);
  std::ofstream(scratch.dir / "bad.toml") << "[drill]\nduration_s = 10\nlearners = 3\n";
  auto outcome = run_cli("drill --config " + (scratch.dir / "bad.toml").string(), 30);
  CHECK(outcome.exit_code == 2);
  CHECK_MESSAGE(outcome.out.find("drill.learners: unknown key") != std::string::npos, outcome.out);
  std::ofstream(scratch.dir / "bad2.toml") << "[[timeline]]\nat_s = 1\nfault = \"meteor\"\n";
  outcome = run_cli("drill --config " + (scratch.dir / "bad2.toml").string(), 30);
  CHECK(outcome.exit_code == 2);
  CHECK_MESSAGE(outcome.out.find("timeline.fault") != std::string::npos, outcome.out);
}

TEST_CASE("a drill whose scheduled fault could not be carried out fails, unless its file allows skipped faults") {
  ScratchDir scratch;
  fs::create_directories(scratch.dir);
  // One node, and a kill of node-3, which does not exist: the drill must skip it.
  auto write = [&](const std::string& name, bool allow) {
    std::ofstream(scratch.dir / name)
        << "[drill]\nduration_s = 12\nwarmup_s = 2\nquiet_tail_s = 3\nnodes = 1\nlearners_per_node = 2\n"
        << "baseline = false\nreference = false\n" << (allow ? "allow_skipped = true\n" : "")
        << "sets = [\"model.preset=tiny\", \"data.tokenizer=bytes\", \"inner.batch_size=8\", \"data.eval_batches=2\","
           " \"train.inner_steps=10\", \"inner.warmup_steps=10\", \"runtime.store_sync=false\", \"train.threads=1\","
           " \"runtime.drain_timeout_s=5\"]\n"
        << "[[timeline]]\nat_s = 5\nfault = \"kill_node\"\ntarget = \"node-3\"\n"
        // A learner that is not alive when its fault is due (here one that never was): another takes it.
        << "[[timeline]]\nat_s = 6\nfault = \"kill_learner\"\ntarget = \"learner-7\"\n";
  };
  auto skipped_check = [](const nlohmann::json& result) {
    for (const auto& check : result["invariants"]) {
      if (check["name"] == "no_scheduled_fault_skipped") return check;
    }
    return nlohmann::json();
  };
  write("skip.toml", false);
  auto outcome = run_cli("drill --json --config " + (scratch.dir / "skip.toml").string() + " --report " +
                             (scratch.dir / "report").string(),
                         180);
  CAPTURE(outcome.out);
  CHECK(outcome.exit_code == 1);
  auto result = last_line_json(outcome.out);
  REQUIRE(result["skipped_faults"]["diloco"].size() == 1);
  CHECK(result["skipped_faults"]["diloco"][0]["target"] == "node-3");
  CHECK(result["skipped_faults"]["diloco"][0]["why"] == "no such node");
  // The learner kill was delivered to learner-0 and the line says from whom and why.
  REQUIRE(result["redirected_faults"]["diloco"].size() == 1);
  const auto& redirected = result["redirected_faults"]["diloco"][0];
  CHECK(redirected["fault"] == "kill_learner");
  CHECK(redirected["target"] == "learner-0");
  CHECK(redirected["retargeted_from"] == "learner-7");
  CHECK(redirected["retarget_why"] == "learner-7 was not known");
  CHECK(result["kills"].get<int>() == 1);
  auto check = skipped_check(result);
  REQUIRE(check.is_object());
  CHECK(check["passed"] == false);
  CHECK(result["invariants_passed"].get<int>() < result["invariants_total"].get<int>());

  write("allowed.toml", true);
  outcome = run_cli("drill --json --config " + (scratch.dir / "allowed.toml").string() + " --report " +
                        (scratch.dir / "report-allowed").string(),
                    180);
  result = last_line_json(outcome.out);
  check = skipped_check(result);
  REQUIRE(check.is_object());
  CHECK(check["passed"] == true);
  CHECK(check["evidence"].get<std::string>().find("allowed") != std::string::npos);
  CHECK(result["skipped_faults"]["diloco"].size() == 1);  // still recorded
}

TEST_CASE("the shard drill: syncer shard 1 SIGKILLed twice resumes from its store while shard 0 keeps committing") {
  ScratchDir scratch;
  const auto result = passing_drill("shard-loss", 5, scratch, 300);
  CHECK(result["kills"].get<int>() == 2);
  REQUIRE(result["recovery_s"]["shard"]["n"].get<int>() == 2);
  CHECK(result["recovery_s"]["shard"]["max"].get<double>() < 2.0);
  CHECK(result["invariants_passed"] == result["invariants_total"]);
  std::set<std::string> names;
  for (const auto& check : result["invariants"]) {
    CAPTURE(check.dump());
    CHECK(check["passed"] == true);
    CHECK(check["observations"].get<int64_t>() > 0);
    names.insert(check["name"].get<std::string>());
  }
  // Each shard's store is checked on its own; the kills are checked against shard 1's store, and the
  // loss is the model assembled from both shards.
  for (const char* name : {"versions_strictly_increasing_and_verified", "shard_1_versions_strictly_increasing_and_verified",
                           "shard_1_digests_never_change", "no_update_applied_twice", "shard_1_no_update_applied_twice",
                           "shard_resumed_from_last_committed", "shard_next_commit_within_bound",
                           "other_shards_committed_while_one_was_down", "ledger_covers_the_run", "loss_below_start"}) {
    CHECK_MESSAGE(names.count(name) == 1, name);
  }
  // Shard 1's commit log has the lines of its three incarnations.
  for (const auto& check : result["invariants"]) {
    if (check["name"] != "shard_1_versions_strictly_increasing_and_verified") continue;
    const std::string evidence = check["evidence"].get<std::string>();
    CHECK_MESSAGE(evidence.find("in the commit log from 3 incarnation(s)") != std::string::npos, evidence);
  }
}

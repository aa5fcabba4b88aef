// Syncer shards as separate processes: two coordinator processes each own half of the fragments
// (`coordinator --shard I --shards 2`), two nodes name both, and a SIGKILLed shard resumes from its
// own store while the other keeps committing. Loopback only, bounded waits.
#include <csignal>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "messages/chunking.hpp"
#include "storage/checkpoint_store.hpp"
#include "tests/multisite/process.hpp"
#include "tests/multisite/run_args.hpp"

using namespace multisite;

namespace {

// A coordinator's command line as syncer shard `shard` of 2, in its own run directory.
std::vector<std::string> shard_args(const Scratch& s, int port, int shard) {
  auto arguments = coordinator_args(s, port, {"train.mode=decoupled", "train.max_seconds=0", "outer.fragments=4"},
                                    {"--shard", std::to_string(shard), "--shards", "2", "--admin-token-file",
                                     s.token.string()});
  for (size_t i = 0; i + 1 < arguments.size(); ++i) {
    if (arguments[i] == "--run-dir") arguments[i + 1] = (s.dir / ("run-" + std::to_string(shard))).string();
  }
  return arguments;
}

std::vector<std::string> sharded_node_args(const Scratch& s, int port0, int port1, const std::string& name) {
  auto arguments = node_args(s, port0, name);
  for (size_t i = 0; i + 1 < arguments.size(); ++i) {
    if (arguments[i] == "--coordinator") {
      arguments[i + 1] = "127.0.0.1:" + std::to_string(port0) + ",127.0.0.1:" + std::to_string(port1);
    }
  }
  return arguments;
}

// version -> fragment -> digest of its parameters, of every committed version in a shard's store.
using Digests = std::map<uint64_t, std::map<uint32_t, uint64_t>>;
Digests stored_digests(const fs::path& store_dir) {
  auto store = archipelago::storage::CheckpointStore::open(store_dir.string());
  REQUIRE_MESSAGE(store, (store ? "" : store.error().reason));
  auto list = (*store)->list();
  REQUIRE(list);
  Digests out;
  for (const auto& info : *list) {
    auto data = (*store)->get(info.version);
    REQUIRE_MESSAGE(data, (data ? "" : data.error().reason));
    for (const auto& [fragment, blob] : data->fragments) {
      out[info.version][fragment] = archipelago::messages::chunk_checksum(blob.data(), blob.size());
    }
  }
  return out;
}

// `archipelago eval` of the model assembled from both shards' run directories.
double assembled_loss(const Scratch& s, const std::vector<std::string>& versions) {
  std::vector<std::string> arguments{"eval", "--json", "--run-dir", (s.dir / "run-0").string(), "--run-dir",
                                     (s.dir / "run-1").string(), "--text", kData + "/kjv.txt", "--max-bytes", "12000"};
  for (const auto& v : versions) {
    arguments.push_back("--version");
    arguments.push_back(v);
  }
  Process eval("eval", arguments, s.dir);
  REQUIRE_MESSAGE(eval.wait(120) == 0, eval.all());
  auto j = eval.summary();
  REQUIRE_MESSAGE(j.is_object(), eval.all());
  CHECK(j["shard_versions"].size() == 2);
  return j["loss"].get<double>();
}

}  // namespace

TEST_CASE("two syncer shards in two processes: a SIGKILLed shard resumes from its store while the other keeps committing") {
  Scratch s("shards");
  const int port0 = free_port();
  int port1 = free_port();
  while (port1 == port0) port1 = free_port();
  Process shard0("shard-0", shard_args(s, port0, 0), s.dir);
  auto shard1 = std::make_unique<Process>("shard-1", shard_args(s, port1, 1), s.dir);
  await_listening(shard0);
  await_listening(*shard1);
  Process a("node-a", sharded_node_args(s, port0, port1, "node-a"), s.dir);
  Process b("node-b", sharded_node_args(s, port0, port1, "node-b"), s.dir);
  // Every learner joined both shards, and both shards commit their own fragments.
  REQUIRE_MESSAGE(wait_until([&] { return count_of(shard0.err(), "joined at version") >= 4 &&
                                          count_of(shard1->err(), "joined at version") >= 4 &&
                                          shard0.last_value("version") >= 5 && shard1->last_value("version") >= 5; }, 90),
                  shard0.all() << shard1->all() << a.all() << b.all());

  // The console of a sharded run asks every shard: each answers for its own fragments and versions.
  const std::string both = "127.0.0.1:" + std::to_string(port0) + ",127.0.0.1:" + std::to_string(port1);
  auto status = console_answer(s.dir, both, "status", s.token);
  REQUIRE_MESSAGE(status["shards"].size() == 2, status.dump());
  for (int k = 0; k < 2; ++k) {
    const auto& answer = status["shards"][k]["answer"];
    CHECK(answer["shard"]["index"] == k);
    CHECK(answer["shard"]["fragments"] == nlohmann::json::array({k, k + 2}));
    CHECK(answer["committed_version"].get<uint64_t>() >= 5);
  }

  // A live evaluator follows both shards' stores while they train (and while shard 1 is down):
  // each time a shard's latest version changes it scores the model assembled from both.
  Process follower("eval-follow",
                   {"eval", "--follow", "--every", "1", "--json", "--run-dir", (s.dir / "run-0").string(), "--run-dir",
                    (s.dir / "run-1").string(), "--text", kData + "/kjv.txt", "--max-bytes", "12000"},
                   s.dir);
  auto followed = [&] {
    std::vector<nlohmann::json> lines;
    std::istringstream out(follower.out());
    for (std::string line; std::getline(out, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object()) lines.push_back(std::move(j));
    }
    return lines;
  };
  REQUIRE_MESSAGE(wait_until([&] { return followed().size() >= 2; }, 60), follower.all());

  shard1->kill(SIGKILL);
  shard1->wait(10);
  const Digests before = stored_digests(s.dir / "run-1" / "store");
  REQUIRE(!before.empty());
  const uint64_t last_committed = before.rbegin()->first;
  REQUIRE_MESSAGE(wait_until([&] { return count_of(a.err(), "lost the coordinator at 127.0.0.1:" + std::to_string(port1)) >= 1 &&
                                          count_of(b.err(), "lost the coordinator at 127.0.0.1:" + std::to_string(port1)) >= 1; },
                             20),
                  a.all() << b.all());
  // Shard 0's fragments keep committing while shard 1 is down.
  const int64_t shard0_at_kill = shard0.last_value("version");
  REQUIRE_MESSAGE(wait_until([&] { return shard0.last_value("version") >= shard0_at_kill + 3; }, 40), shard0.all());

  // The follower goes on while shard 1 is down: it scores shard 0's new versions with shard 1's last.
  REQUIRE_MESSAGE(wait_until([&] {
                    for (const auto& line : followed()) {
                      if (line["shard_versions"][0].get<int64_t>() > shard0_at_kill &&
                          line["shard_versions"][1].get<uint64_t>() <= last_committed) return true;
                    }
                    return false;
                  }, 30),
                  follower.all());

  Process restarted("shard-1-restarted", shard_args(s, port1, 1), s.dir);
  await_listening(restarted);
  REQUIRE_MESSAGE(wait_until([&] { return count_of(a.err(), "joined syncer shard 1") >= 2 &&
                                          count_of(b.err(), "joined syncer shard 1") >= 2; }, 40),
                  a.all() << b.all() << restarted.all());
  REQUIRE_MESSAGE(wait_until([&] { return restarted.last_value("version") >= static_cast<int64_t>(last_committed) + 3; }, 60),
                  restarted.all() << a.all());
  // ... and after shard 1's restart: it reads the restarted shard's new versions.
  REQUIRE_MESSAGE(wait_until([&] {
                    const auto lines = followed();
                    return !lines.empty() && lines.back()["shard_versions"][1].get<uint64_t>() > last_committed;
                  }, 30),
                  follower.all());
  follower.kill(SIGTERM);
  REQUIRE_MESSAGE(follower.wait(60) == 0, follower.all());
  const auto lines = followed();
  REQUIRE_MESSAGE(lines.size() >= 4, follower.all());
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto& was = lines[i - 1]["shard_versions"];
    const auto& now = lines[i]["shard_versions"];
    REQUIRE(now.size() == 2);
    CHECK(now != was);  // scored only when a shard's version changed
    CHECK(now[0].get<uint64_t>() >= was[0].get<uint64_t>());
    CHECK(now[1].get<uint64_t>() >= was[1].get<uint64_t>());
  }

  shard0.kill(SIGTERM);
  restarted.kill(SIGTERM);
  REQUIRE_MESSAGE(shard0.wait(60) == 0, shard0.all());
  REQUIRE_MESSAGE(restarted.wait(60) == 0, restarted.all());
  CHECK_MESSAGE(a.wait(30) == 0, a.all());
  CHECK_MESSAGE(b.wait(30) == 0, b.all());

  auto s0 = shard0.summary(), s1 = restarted.summary();
  REQUIRE_MESSAGE(s0.is_object(), shard0.all());
  REQUIRE_MESSAGE(s1.is_object(), restarted.all());
  CHECK(s0["shard"] == 0);
  CHECK(s1["shard"] == 1);
  CHECK(s1["resumed_from_version"].get<uint64_t>() == last_committed);
  CHECK(s1["final_version"].get<uint64_t>() > last_committed);
  // A shard's ledger is its share of the slots' time: shard 0, never killed, merged most of what
  // the learners computed for its fragments (against all of their compute, most would be lost).
  const auto& ledger0 = s0["goodput_seconds"];
  CHECK_MESSAGE(ledger0["merged"].get<double>() > ledger0["in_flight"].get<double>() + ledger0["lost"].get<double>(),
                ledger0.dump());
  // Nodes sent each fragment only to its owner, and nothing they may not send.
  for (const auto* summary : {&s0, &s1}) {
    CHECK_MESSAGE((*summary)["rejected_by_reason"].value("not_owner", int64_t{0}) == 0, summary->dump());
    CHECK_MESSAGE((*summary)["refused"]["total"].get<int64_t>() == 0, (*summary)["refused"].dump());
  }
  // Every fragment committed on its owner: shard k's commits are of fragments p with p mod 2 = k.
  for (int k = 0; k < 2; ++k) {
    const auto& commits = (k == 0 ? s0 : s1)["fragment_commits"];
    REQUIRE(commits.size() == 4);
    for (int p = 0; p < 4; ++p) {
      CAPTURE(k);
      CAPTURE(p);
      if (p % 2 == k) CHECK(commits[p].get<int64_t>() > 0);
      else CHECK(commits[p].get<int64_t>() == 0);
    }
  }

  // No version shard 1 committed before its kill was lost or changed.
  const Digests after1 = stored_digests(s.dir / "run-1" / "store");
  for (const auto& [version, fragments] : before) {
    auto it = after1.find(version);
    REQUIRE_MESSAGE(it != after1.end(), "committed version " << version << " of shard 1 was lost");
    CHECK_MESSAGE(it->second == fragments, "committed version " << version << " of shard 1 changed");
  }
  // Every learner's copy of every fragment is the one its owner committed at that version.
  const Digests after0 = stored_digests(s.dir / "run-0" / "store");
  int compared = 0;
  for (Process* node : {&a, &b}) {
    auto n = node->summary();
    REQUIRE_MESSAGE(n.is_object(), node->all());
    CHECK(n["shards"].size() == 2);
    CHECK(n["routed"]["updates_routed"].get<int64_t>() > 0);
    CHECK(n["routed"]["joins_replayed"].get<int64_t>() >= 2);  // its learners, to the restarted shard
    REQUIRE(n["learner_digests"].size() == 2);
    for (const auto& [learner, fragments] : n["learner_digests"].items()) {
      REQUIRE(fragments.size() == 4);
      for (uint32_t p = 0; p < 4; ++p) {
        const auto& store = p % 2 == 0 ? after0 : after1;
        const auto version = fragments[p]["version"].get<uint64_t>();
        CAPTURE(learner);
        CAPTURE(p);
        CAPTURE(version);
        auto it = store.find(version);
        REQUIRE(it != store.end());
        CHECK(it->second.at(p) == fragments[p]["digest"].get<uint64_t>());
        compared += 1;
      }
    }
  }
  CHECK(compared == 16);
  // The model assembled from both shards' latest versions predicts text better than the initial one.
  const double initial = assembled_loss(s, {"1", "1"});
  const double trained = assembled_loss(s, {});
  CHECK(trained < initial - 0.05);
  // The live evaluator scored the same assembled models: its last one, like the final one, beats θ0.
  CHECK_MESSAGE(lines.back()["loss"].get<double>() < initial - 0.05, follower.out());
  // One shard's directory alone, one named twice, or a version short: refused, with the reason.
  auto refused = [&](const std::vector<std::string>& extra, const std::string& reason) {
    std::vector<std::string> arguments{"eval", "--text", kData + "/kjv.txt", "--max-bytes", "1000"};
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    Process eval("eval-refused", arguments, s.dir);
    CHECK(eval.wait(60) == 2);
    CHECK_MESSAGE(eval.err().find(reason) != std::string::npos, eval.err());
  };
  const auto run0 = (s.dir / "run-0").string(), run1 = (s.dir / "run-1").string();
  refused({"--run-dir", run1}, "is syncer shard 1 of 2: name every shard's run directory");
  refused({"--run-dir", run0, "--run-dir", run0}, "two run directories are shard 0");
  refused({"--run-dir", run0, "--run-dir", run1, "--version", "1"}, "one version per run directory");
}

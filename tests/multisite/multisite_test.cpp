// Coordinator and nodes as real processes on loopback: training, node and coordinator kills with
// restarts, authentication, TLS. Every test bounds its waits, uses 127.0.0.1 and free ports, and
// its Process objects kill what they started when a check fails.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <tuple>

#include <doctest/doctest.h>

#include "storage/checkpoint_store.hpp"
#include "tests/multisite/process.hpp"
#include "tests/multisite/run_args.hpp"

using namespace multisite;

namespace {

// version -> (role, fragment, hash) of every committed version in a run's store.
using Hashes = std::map<uint64_t, std::vector<std::tuple<int, uint32_t, std::string>>>;
Hashes stored_hashes(const fs::path& store_dir) {
  auto store = archipelago::storage::CheckpointStore::open(store_dir.string());
  REQUIRE_MESSAGE(store, (store ? "" : store.error().reason));
  auto list = (*store)->list();
  REQUIRE(list);
  Hashes out;
  for (const auto& info : *list) {
    for (const auto& e : info.entries) out[info.version].emplace_back(static_cast<int>(e.role), e.fragment, e.hash.to_hex());
  }
  return out;
}

}  // namespace

TEST_CASE("a coordinator and two nodes of two learners train over loopback to a lower held-out loss") {
  Scratch s("train");
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=14"}), s.dir);
  await_listening(coordinator);
  Process a("node-a", node_args(s, port, "node-a"), s.dir);
  Process b("node-b", node_args(s, port, "node-b"), s.dir);
  const int code = coordinator.wait(90);
  CAPTURE(coordinator.all());
  REQUIRE(code == 0);
  CHECK_MESSAGE(a.wait(30) == 0, a.all());
  CHECK_MESSAGE(b.wait(30) == 0, b.all());
  auto summary = coordinator.summary();
  REQUIRE(summary.is_object());
  CHECK(summary["versions_committed"].get<int64_t>() > 0);
  CHECK(summary["resumed_from_version"].is_null());
  CHECK(summary["learners_seen"].get<int>() == 4);
  CHECK(summary["joins_accepted"].get<int>() == 2);
  CHECK(summary["stopped_by"] == "max_seconds");
  CHECK_MESSAGE(summary["refused"]["total"].get<int64_t>() == 0, summary["refused"].dump());  // nodes send only what they may
  CHECK(a.summary()["refused"]["total"].get<int64_t>() == 0);
  CHECK(summary["heldout_loss"].get<double>() < summary["initial_heldout_loss"].get<double>());
  CHECK(summary["bytes_cross_site"].get<int64_t>() == 0);  // one site: "local"
  CHECK(summary["bytes_links_total"].get<int64_t>() > 0);
  for (Process* node : {&a, &b}) {
    auto n = node->summary();
    REQUIRE_MESSAGE(n.is_object(), node->all());
    CHECK(n["steps"].get<int64_t>() > 0);
    CHECK(n["bytes_sent"].get<int64_t>() > 0);
    CHECK(n["bytes_received"].get<int64_t>() > 0);
    CHECK(n["stopped_by"] == "coordinator");
  }
  // Both sides count the same bytes on a link (nothing is in flight once everything stopped).
  int64_t node_sent = a.summary()["bytes_sent"].get<int64_t>() + b.summary()["bytes_sent"].get<int64_t>();
  int64_t coordinator_received = 0;
  for (const auto& link : summary["links"]) coordinator_received += link["bytes_received"].get<int64_t>();
  CHECK(coordinator_received == node_sent);
}

TEST_CASE("a SIGKILLed node: the others keep committing and when restarted its learners rejoin and contribute") {
  Scratch s("node-kill");
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=32"}), s.dir);
  await_listening(coordinator);
  Process a("node-a", node_args(s, port, "node-a"), s.dir);
  // node-b keeps learner checkpoints: its restarted learners continue their unsent work.
  const std::vector<std::string> state{"--state-dir", (s.dir / "node-b-state").string()};
  auto b = std::make_unique<Process>("node-b", node_args(s, port, "node-b", state), s.dir);
  // Every learner joined the syncer and the monitor counts it alive (a join alone does not make the
  // monitor know it: its first heartbeat does, up to runtime.heartbeat_s later) before the kill, and
  // both of node-b's learners have written a checkpoint.
  auto checkpoints = [&] {
    int n = 0;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(s.dir / "node-b-state" / "learners", ec)) {
      n += entry.path().extension() == ".ckpt";
    }
    return n;
  };
  REQUIRE_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "joined at version") >= 4 &&
                                          coordinator.last_value("version") >= 4 && coordinator.last_value("alive") == 4 &&
                                          checkpoints() == 2; }, 60),
                  coordinator.all() << b->all());

  b->kill(SIGKILL);
  // The monitor sees the node's learners die (CAF down signal), not only after a heartbeat timeout.
  REQUIRE_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "declared dead") >= 2; }, 10), coordinator.all());
  const int64_t at_kill = coordinator.last_value("version");
  REQUIRE_MESSAGE(wait_until([&] { return coordinator.last_value("version") >= at_kill + 3; }, 15), coordinator.all());

  Process b2("node-b-restarted", node_args(s, port, "node-b", state), s.dir);
  REQUIRE_MESSAGE(wait_until([&] { return count_of(coordinator.err(), "admitted node 'node-b'") == 2; }, 30),
                  coordinator.all() << b2.all());
  const int code = coordinator.wait(90);
  CAPTURE(coordinator.all());
  REQUIRE(code == 0);
  CHECK_MESSAGE(a.wait(30) == 0, a.all());
  CHECK_MESSAGE(b2.wait(30) == 0, b2.all());
  auto summary = coordinator.summary();
  auto restarted = b2.summary();
  REQUIRE(restarted.is_object());
  const int first = restarted["first_learner"].get<int>();
  for (int m = first; m < first + 2; ++m) {
    auto learner = summary["learners"]["learner-" + std::to_string(m)];
    CAPTURE(learner.dump());
    CHECK(learner["joins"].get<int>() >= 2);
    // Work of the rejoined incarnation reached a committed version.
    CHECK(learner["first_merge_after_join_s"].get<double>() > learner["joined_s"].get<double>());
  }
  CHECK(summary["versions_committed"].get<int64_t>() > at_kill);
  CHECK_MESSAGE(count_of(b2.err(), "with its checkpoint of step") == 2, b2.all());
}

TEST_CASE("a SIGKILLed coordinator restarts from its store: nodes reconnect and committed versions never change") {
  Scratch s("coordinator-kill");
  const int port = free_port();
  const auto run_started = std::chrono::steady_clock::now();
  auto first = std::make_unique<Process>("coordinator-1", coordinator_args(s, port, {"train.max_seconds=0"}), s.dir);
  await_listening(*first);
  Process a("node-a", node_args(s, port, "node-a"), s.dir);
  Process b("node-b", node_args(s, port, "node-b"), s.dir);
  REQUIRE_MESSAGE(wait_until([&] { return count_of(first->err(), "joined at version") >= 4 &&
                                          first->last_value("version") >= 5; }, 60),
                  first->all());
  first->kill(SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const Hashes before = stored_hashes(s.dir / "run" / "store");
  REQUIRE(!before.empty());
  const uint64_t last_committed = before.rbegin()->first;
  REQUIRE_MESSAGE(wait_until([&] { return a.err().find("lost the coordinator") != std::string::npos &&
                                          b.err().find("lost the coordinator") != std::string::npos; }, 15),
                  a.all() << b.all());

  const double down_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  Process second("coordinator-2", coordinator_args(s, port, {"train.max_seconds=0"}), s.dir);
  await_listening(second);
  REQUIRE_MESSAGE(wait_until([&] { return count_of(second.err(), "admitted node") >= 2; }, 30),
                  second.all() << a.all() << b.all());
  REQUIRE_MESSAGE(wait_until([&] { return second.last_value("version") >= static_cast<int64_t>(last_committed) + 3; }, 40),
                  second.all());
  second.kill(SIGTERM);
  const int code = second.wait(60);
  CAPTURE(second.all());
  REQUIRE(code == 0);
  CHECK_MESSAGE(a.wait(30) == 0, a.all());
  CHECK_MESSAGE(b.wait(30) == 0, b.all());
  auto summary = second.summary();
  CHECK(summary["resumed_from_version"].get<uint64_t>() == last_committed);
  CHECK(summary["start_version"].get<uint64_t>() == last_committed);
  CHECK(summary["final_version"].get<uint64_t>() > last_committed);
  CHECK(summary["stopped_by"] == "signal");
  CHECK(a.summary()["sessions"].get<int>() >= 2);
  CHECK(b.summary()["sessions"].get<int>() >= 2);

  const Hashes after = stored_hashes(s.dir / "run" / "store");
  for (const auto& [version, entries] : before) {
    auto it = after.find(version);
    REQUIRE_MESSAGE(it != after.end(), "committed version " << version << " was lost");
    CHECK_MESSAGE(it->second == entries, "committed version " << version << " changed");
  }
  CHECK(after.rbegin()->first == summary["final_version"].get<uint64_t>());

  // The goodput ledger went on from the resumed version's carry: the last coordinator's covers the
  // run from the first one's start (4 slots), its downtime included, and no part is negative (work
  // the nodes computed while no coordinator ran, merged by the second, was measured by the second).
  const double cluster_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_started).count();
  const auto& seconds = summary["goodput_seconds"];
  double allocated = 0, smallest = 1e9;
  std::string smallest_part;
  for (const auto& [part, v] : seconds.items()) {
    allocated += v.get<double>();
    if (v.get<double>() < smallest) smallest = v.get<double>(), smallest_part = part;
  }
  CAPTURE(seconds.dump());
  CHECK(allocated / 4 <= cluster_s);
  CHECK(allocated / 4 >= cluster_s - 10);  // the first start's model build, the last one's final evaluation
  // The second process's own clock is less by the first one's time and the time no coordinator ran.
  CHECK(allocated / 4 - summary["wall_s"].get<double>() >= down_s);
  CHECK_MESSAGE(smallest >= -0.01 * allocated, smallest_part << " = " << smallest);
  CHECK(seconds["merged"].get<double>() > 0);
}

TEST_CASE("a coordinator restarted with a new train.max_seconds keeps its nodes, one that changes inner.lr is refused, the key named") {
  Scratch s("coordinator-reconfigured");
  const int port = free_port();
  auto first = std::make_unique<Process>("coordinator-1", coordinator_args(s, port, {"train.max_seconds=0"}), s.dir);
  await_listening(*first);
  Process a("node-a", node_args(s, port, "node-a"), s.dir);
  REQUIRE_MESSAGE(wait_until([&] { return first->last_value("version") >= 3; }, 60), first->all());
  first->kill(SIGKILL);
  REQUIRE_MESSAGE(wait_until([&] { return a.err().find("lost the coordinator") != std::string::npos; }, 15), a.all());
  const uint64_t last_committed = stored_hashes(s.dir / "run" / "store").rbegin()->first;

  // The operator extends the run and slows the progress lines: the node takes both and trains on.
  auto second = std::make_unique<Process>(
      "coordinator-2", coordinator_args(s, port, {"train.max_seconds=600", "runtime.progress_interval_s=0.5"}), s.dir);
  await_listening(*second);
  REQUIRE_MESSAGE(wait_until([&] { return second->last_value("version") >= static_cast<int64_t>(last_committed) + 3; }, 40),
                  second->all() << a.all());
  CHECK(a.running());
  CHECK_MESSAGE(a.err().find("changed run-control keys only (runtime.progress_interval_s, train.max_seconds): taken; "
                             "train.max_seconds is now 600") != std::string::npos,
                a.all());
  second->kill(SIGKILL);

  // A restart that changes what is trained: the node stops (exit 3) and names the key.
  Process third("coordinator-3", coordinator_args(s, port, {"train.max_seconds=600", "inner.lr=0.001"}), s.dir);
  await_listening(third);
  CHECK_MESSAGE(a.wait(40) == 3, a.all() << third.all());
  CHECK_MESSAGE(a.err().find("changes inner.lr, which changes what is trained") != std::string::npos, a.all());
  third.kill(SIGTERM);
  CHECK(third.wait(60) == 0);
}

TEST_CASE("a wrong or missing token is refused with a clear error on both sides and counted") {
  Scratch s("auth");
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=0"}), s.dir);
  await_listening(coordinator);
  auto wrong = node_args(s, port, "intruder");
  for (auto& a : wrong) {
    if (a == s.token.string()) a = s.wrong_token.string();
  }
  Process intruder("intruder", wrong, s.dir);
  CHECK_MESSAGE(intruder.wait(30) == 3, intruder.all());
  CHECK_MESSAGE(intruder.err().find("refused this node: unauthenticated") != std::string::npos, intruder.all());
  CHECK(intruder.err().find("correct-horse") == std::string::npos);  // never the secret

  auto missing = node_args(s, port, "no-token");
  missing.erase(std::find(missing.begin(), missing.end(), "--token-file"), std::find(missing.begin(), missing.end(), "--token-file") + 2);
  Process tokenless("tokenless", missing, s.dir);
  CHECK_MESSAGE(tokenless.wait(30) == 2, tokenless.all());
  CHECK_MESSAGE(tokenless.err().find("ARCHIPELAGO_TOKEN_FILE") != std::string::npos, tokenless.all());

  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
  CAPTURE(coordinator.all());
  // The plane refuses before it decodes anything the node sent: the line names the peer's address.
  CHECK(coordinator.err().find("refused a join from 127.0.0.1: wrong proof") != std::string::npos);
  CHECK(coordinator.err().find("correct-horse") == std::string::npos);
  CHECK(coordinator.err().find("incorrect-horse") == std::string::npos);
  auto summary = coordinator.summary();
  CHECK(summary["joins_refused"]["wrong_token"].get<int>() == 1);
  CHECK(summary["joins_accepted"].get<int>() == 0);
}

TEST_CASE("a TLS cluster: coordinator and nodes over mutual TLS with the run CA's certificates") {
  Scratch s("tls");
  make_ca_and_certificate(s.dir, "");  // archipelago ca init + issue, for 127.0.0.1
  const std::vector<std::string> tls{"--config", tls_config(s.dir, "", "").string()};
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=10"}, tls), s.dir);
  await_listening(coordinator);
  // Each node holds a certificate of its own name: under TLS a node joins under its certificate's name.
  issue_certificate(s.dir, "", "node-a");
  issue_certificate(s.dir, "", "node-b");
  Process a("node-a", node_args(s, port, "node-a", {"--config", tls_config(s.dir, "", "", "node-a").string()}), s.dir);
  Process b("node-b", node_args(s, port, "node-b", {"--config", tls_config(s.dir, "", "", "node-b").string()}), s.dir);
  const int code = coordinator.wait(90);
  CAPTURE(coordinator.all());
  REQUIRE(code == 0);
  CHECK_MESSAGE(a.wait(30) == 0, a.all());
  CHECK_MESSAGE(b.wait(30) == 0, b.all());
  auto summary = coordinator.summary();
  CHECK(summary["tls"] == true);
  CHECK(summary["joins_accepted"].get<int>() == 2);
  CHECK(summary["versions_committed"].get<int64_t>() > 0);
  CHECK(summary["learners_seen"].get<int>() == 4);
}

TEST_CASE("a node never takes its coordinator's local paths: a corpus path is refused unless the node names its own copy") {
  Scratch s("paths");
  // The coordinator trains on a file of its own machine (here: a copy of the cached KJV text).
  const auto corpus = s.dir / "coordinator-corpus.txt";
  fs::copy_file(fs::path(kData) / "kjv.txt", corpus);
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=0", "data.corpus=" + corpus.string()}),
                      s.dir);
  await_listening(coordinator);
  // A node without a corpus of its own is admitted, then refuses to read the path it was sent.
  Process blind("node-blind", node_args(s, port, "node-blind"), s.dir);
  CHECK_MESSAGE(blind.wait(60) == 3, blind.all());
  CHECK(blind.err().find("give this node its own copy with --set data.corpus=PATH") != std::string::npos);
  // One that names its own copy trains.
  auto own = node_args(s, port, "node-own", {"--set", "data.corpus=" + corpus.string()});
  Process node("node-own", own, s.dir);
  // -1 before the first progress line; version 1 is θ0, committed with no learner: at least 3 is trained.
  const int64_t version = std::max<int64_t>(coordinator.last_value("version"), 1);
  CHECK_MESSAGE(wait_until([&] { return coordinator.last_value("version") >= version + 2; }, 60), coordinator.all() << node.all());
  coordinator.kill(SIGTERM);
  CHECK(coordinator.wait(60) == 0);
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
}

TEST_CASE("a SentencePiece run: the coordinator sends its tokenizer to a node, which keeps it by content hash") {
  Scratch s("tokenizer");
  const auto model = s.dir / "coordinator-tokenizer.model";
  Process trainer("tokenizer", {"tokenizer", "train", "--json", "--corpus", "kjv", "--vocab", "384", "--out", model.string(),
                                "--cache-dir", kData},
                  s.dir);
  REQUIRE_MESSAGE(trainer.wait(240) == 0, trainer.all());
  const std::string hash = trainer.summary()["hash"].get<std::string>();
  const auto kept = fs::path(kData) / ("tokenizer-" + hash + ".model");
  fs::remove(kept);  // an earlier run's copy would prove nothing
  const int port = free_port();
  Process coordinator("coordinator",
                      coordinator_args(s, port, {"train.max_seconds=0", "data.tokenizer='spm:" + model.string() + "'"}), s.dir);
  await_listening(coordinator);
  // The coordinator's file is gone before the node starts: what the node uses came over the wire.
  fs::remove(model);
  Process node("node-a", node_args(s, port, "node-a"), s.dir);
  // -1 before the first progress line; version 1 is θ0, committed with no learner: at least 3 is trained.
  const int64_t version = std::max<int64_t>(coordinator.last_value("version"), 1);
  CHECK_MESSAGE(wait_until([&] { return coordinator.last_value("version") >= version + 2; }, 90), coordinator.all() << node.all());
  coordinator.kill(SIGTERM);
  CHECK(coordinator.wait(60) == 0);
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
  // The node keeps it in its data cache under its content hash, byte for byte the coordinator's copy.
  auto bytes = [](const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  REQUIRE(fs::exists(kept));
  CHECK(bytes(kept) == bytes(s.dir / "run" / "tokenizer.model"));
  CHECK(fs::exists(s.dir / "run" / "tokenizer.model"));  // the run's own copy
}

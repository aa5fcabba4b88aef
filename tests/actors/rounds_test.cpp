// Decoupled rounds and the compressed downlink in the actor runtime (tiny model): one version per
// fragment per round with a straggler, every learner holding the syncer's B_p bit for bit for each
// downlink codec (int4 both ways, RDA and quorum 2 included), Delayed Nesterov surviving a syncer
// kill, a learner recovering from a non-finite step, and bytes measured on the links.
// Tests wait on conditions (status polling with deadlines), never on sleeps.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "../training/test_corpus.hpp"
#include "run/cluster.hpp"
#include "diloco/schedule.hpp"
#include "actors/wire.hpp"
#include "cluster_queries.hpp"
#include "test_support.hpp"

using namespace archipelago;
using namespace archipelago::actors;
using namespace archipelago::run;
using namespace archipelago::actors::testing;
using archipelago::diloco::fragment_offset;
using nlohmann::json;

namespace {

std::unique_ptr<LocalCluster> start_cluster(const RuntimeOptions& options) {
  auto started = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().to_string()));
  return std::move(*started);
}

json digests(LocalCluster& cluster, caf::atom_value name) {
  auto reply = cluster.query(name, "digests", {}, 5);
  return reply ? (*reply)["fragments"] : json::array();
}

// True once, for every fragment, every learner's copy of B_p is at the syncer's version and has the
// syncer's digest (a learner behind by a broadcast in flight is waited for, a mismatch is not).
bool copies_match(LocalCluster& cluster, int learners, int fragments, std::string& mismatch) {
  auto syncer = digests(cluster, syncer_name());
  if (static_cast<int>(syncer.size()) != fragments) return false;
  for (int m = 0; m < learners; ++m) {
    auto copy = digests(cluster, learner_name(m));
    if (static_cast<int>(copy.size()) != fragments) return false;
    for (int p = 0; p < fragments; ++p) {
      if (copy[p]["version"] != syncer[p]["version"]) return false;
      if (copy[p]["digest"] != syncer[p]["digest"]) {
        mismatch = "learner " + std::to_string(m) + " fragment " + std::to_string(p) + " at version " +
                   syncer[p]["version"].dump() + ": " + copy[p]["digest"].dump() + " vs " + syncer[p]["digest"].dump();
        return false;
      }
    }
  }
  return true;
}

// A store fault hook that runs `fault` once: at the first prepare of fragment 0's blobs after `armed` is set.
std::function<Status(std::string_view)> at_next_prepare_of_fragment0(std::atomic<bool>& armed,
                                                                     std::function<Status()> fault) {
  return [&armed, fault](std::string_view name) -> Status {
    if (name == "prepare.fragment.0" && armed.exchange(false)) return fault();
    return Status::success();
  };
}

void check_copies(LocalCluster& cluster, int learners, int fragments) {
  std::string mismatch;
  const bool matched = cluster.wait_for([&] { return copies_match(cluster, learners, fragments, mismatch) ||
                                                     !mismatch.empty(); }, 20, 0.02);
  CAPTURE(mismatch);
  CHECK(matched);
  CHECK(mismatch.empty());
}

}  // namespace

TEST_CASE("decoupled rounds with a 3x straggler: at most one version per fragment per round, nobody waits") {
  for (int quorum : {1, 2}) {
    CAPTURE(quorum);
    auto options = testing::tiny_options("rounds-k" + std::to_string(quorum), "decoupled", 3, 14);
    options.setup.outer.quorum = quorum;
    options.faults.slowdowns = {{2, 3.0}};
    const int H = options.setup.run.inner_steps, P = options.setup.outer.fragments;
    auto cluster = start_cluster(options);
    REQUIRE(cluster->wait_for([&] { return merged(*cluster, learner_id(2)) >= 3; }, 30));
    const int64_t straggler_merged = merged(*cluster, learner_id(2));
    // A few more periods of the fast learners.
    const int64_t fast_step = monitor_step(*cluster, learner_id(0));
    REQUIRE(cluster->wait_for([&] { return monitor_step(*cluster, learner_id(0)) >= fast_step + 3 * H; }, 30));
    auto step_of = [&](int m) {
      auto learner = cluster->query(learner_name(m), "status", {}, 5);
      return learner ? (*learner)["step"].get<int64_t>() : int64_t{0};
    };
    // The leading learner's step asked before the syncer (a lower bound on the rounds it had reached
    // then) and after it (an upper bound): under load the learners run on between the queries.
    const int64_t lead_before = std::max(step_of(0), step_of(1));
    auto syncer = status(*cluster, syncer_name());
    const int64_t lead_after = std::max(step_of(0), step_of(1));
    const int64_t straggler_after = step_of(2);
    for (int p = 0; p < P; ++p) {
      CAPTURE(p);
      // Rounds of p the leading learner has reached: its due steps offset_p + kH so far.
      auto rounds_at = [&](int64_t lead) { return (lead - fragment_offset(p, P, H, true)) / H + 1; };
      CAPTURE(lead_before);
      CAPTURE(lead_after);
      CHECK(syncer["fragment_commits"][p].get<int64_t>() <= rounds_at(lead_after));
      CAPTURE(straggler_after);
      if (quorum == 1) {
        // One on-time learner closes a round: the leader's pace, within a factor of two.
        CHECK(syncer["fragment_commits"][p].get<int64_t>() >= rounds_at(lead_before) / 2);
      } else {
        // K = 2 needs both fast learners on time; when they drift apart a round can close only once
        // the straggler has something pending too. The rounds never fall behind the straggler's own.
        CHECK(syncer["fragment_commits"][p].get<int64_t>() >= rounds_at(straggler_after) - 1);
      }
    }
    // The straggler's work keeps being merged (in rounds it arrived late for), and the others ran
    // at their own pace: about three times its steps.
    CHECK(cluster->wait_for([&] { return merged(*cluster, learner_id(2)) > straggler_merged; }, 20));
    const double slow = static_cast<double>(monitor_step(*cluster, learner_id(2)));
    CHECK(static_cast<double>(monitor_step(*cluster, learner_id(0))) > 2.0 * slow);
    auto result = cluster->run();
    REQUIRE(result.ok());
    CHECK(result->versions_per_fragment_round <= 1.3);
    CHECK(result->heldout_loss < result->initial_heldout_loss);
  }
}

TEST_CASE("fragments commit independently: a commit of fragment 0 held 5 s does not delay fragment 1's rounds") {
  auto options = testing::tiny_options("slow-commit", "decoupled", 2, 30);
  std::atomic<bool> armed{false}, holding{false};
  // The store's prepare of fragment 0's next commit (its blobs' write) takes 5 s.
  options.store_fault_hook = at_next_prepare_of_fragment0(armed, [&] {
    holding = true;
    std::this_thread::sleep_for(std::chrono::seconds(5));
    holding = false;
    return Status::success();
  });
  auto cluster = start_cluster(options);
  REQUIRE(cluster->wait_for([&] { return status(*cluster, syncer_name()).value("version", 0) >= 3; }, 20));
  armed = true;
  REQUIRE(cluster->wait_for([&] { return holding.load(); }, 20));
  auto before = status(*cluster, syncer_name());
  const uint64_t fragment0 = before["fragment_versions"][0].get<uint64_t>();
  const int64_t commits1 = before["fragment_commits"][1].get<int64_t>();
  // While fragment 0's commit is held, fragment 1's rounds close and commit as before.
  json during;
  CHECK(cluster->wait_for(
      [&] {
        during = status(*cluster, syncer_name());
        return during["fragment_commits"][1].get<int64_t>() >= commits1 + 3;
      },
      5));
  CHECK(holding.load());  // all of it inside fragment 0's 5 s
  CHECK(during["fragment_versions"][0].get<uint64_t>() == fragment0);
  CHECK(during["fragments_in_flight"] == json::array({0}));
  CHECK(during["fragment_versions"][1].get<uint64_t>() > fragment0);
  // Once its blobs are written, fragment 0's commit lands as the next version and its rounds go on.
  CHECK(cluster->wait_for(
      [&] { return status(*cluster, syncer_name())["fragment_versions"][0].get<uint64_t>() > fragment0; }, 10));
  check_copies(*cluster, 2, options.setup.outer.fragments);
  auto result = cluster->run();
  REQUIRE(result.ok());
  CHECK(result->heldout_loss < result->initial_heldout_loss);
}

TEST_CASE("a commit whose blobs cannot be written is sent again as staged and lands, every copy matches") {
  auto options = testing::tiny_options("failed-commit", "decoupled", 2, 30);
  std::atomic<bool> armed{false}, failed{false};
  // The store's prepare of fragment 0's next commit fails once, as a full disk would.
  options.store_fault_hook = at_next_prepare_of_fragment0(armed, [&]() -> Status {
    failed = true;
    return make_error(ErrorCode::io, "injected: no space left on device");
  });
  auto cluster = start_cluster(options);
  REQUIRE(cluster->wait_for([&] { return status(*cluster, syncer_name()).value("version", 0) >= 3; }, 20));
  armed = true;
  REQUIRE(cluster->wait_for([&] { return failed.load(); }, 20));
  const uint64_t fragment0 = status(*cluster, syncer_name())["fragment_versions"][0].get<uint64_t>();
  // Sent again after its 1 s pause, the same staged value lands as fragment 0's next version.
  CHECK(cluster->wait_for(
      [&] {
        auto s = status(*cluster, syncer_name());
        return s["fragment_versions"][0].get<uint64_t>() > fragment0 && s.value("failed_commits", 0) == 1;
      },
      15));
  check_copies(*cluster, 2, options.setup.outer.fragments);
  auto result = cluster->run();
  REQUIRE(result.ok());
  CHECK(result->heldout_loss < result->initial_heldout_loss);
}

TEST_CASE("every learner holds the syncer's broadcast state bit for bit, for each downlink codec") {
  for (std::string codec : {"fp32", "bf16", "int8"}) {
    CAPTURE(codec);
    auto options = testing::tiny_options("downlink-" + codec, "decoupled", 2, 6);
    options.setup.outer.downlink_codec = codec;
    auto cluster = start_cluster(options);
    REQUIRE(cluster->wait_for([&] { return status(*cluster, syncer_name()).value("version", 0) >= 5; }, 20));
    check_copies(*cluster, 2, options.setup.outer.fragments);
    auto result = cluster->run();
    REQUIRE(result.ok());
    CHECK(result->heldout_loss < result->initial_heldout_loss);
  }
}

TEST_CASE("int4 up and down, RDA and quorum 2: copies match, a restarted learner gets the same B_p, bytes shrink") {
  auto options = testing::tiny_options("int4-rda-k2", "decoupled", 3, 16);
  options.setup.outer.codec = "int4";
  options.setup.outer.downlink_codec = "int4";
  options.setup.outer.merge = "rda";
  options.setup.outer.quorum = 2;
  const int P = options.setup.outer.fragments;
  auto cluster = start_cluster(options);
  REQUIRE(cluster->wait_for([&] { return status(*cluster, syncer_name()).value("version", 0) >= 5; }, 20));
  check_copies(*cluster, 3, P);
  REQUIRE(cluster->kill(learner_name(1)));
  REQUIRE(cluster->wait_for([&] { return learner_record(*cluster, learner_id(1)).value("joins", 0) >= 2; }, 15));
  // The new incarnation fetched B_p (fp32) from the store and then follows the int4 deltas.
  const uint64_t rejoined_at = status(*cluster, syncer_name()).value("version", uint64_t{0});
  REQUIRE(cluster->wait_for([&] { return status(*cluster, syncer_name()).value("version", uint64_t{0}) >= rejoined_at + 3; }, 20));
  check_copies(*cluster, 3, P);
  auto result = cluster->run();
  REQUIRE(result.ok());
  CHECK(result->heldout_loss < result->initial_heldout_loss);
  CHECK(result->restarts == 1);
  // The restarted learner does not resend work its previous incarnation sent after its checkpoint.
  INFO("rejected by reason: ", result->details["syncer"]["rejected"].dump());
  CHECK(result->rejected_updates == 0);
  // int4 is 4 bits a value plus a 4-byte scale per 64: at most 0.6 of a byte per parameter per message,
  // against 4 for fp32. Every learner message carries at most one fragment.
  const auto store = result->details["store"];
  CHECK(store.value("bytes_served_learners", int64_t{0}) > 0);  // the restarted learner's fetch, measured
  const double up_per_message_parameter =
      static_cast<double>(result->bytes_up) / result->details["syncer"]["merged_contributions"].get<double>() /
      (static_cast<double>(result->parameters) / P);
  CHECK(up_per_message_parameter < 0.65);
  // Against data-parallel's ring all-reduce of fp32 gradients (computed; 2(M-1)/M = 4/3 of the model per
  // worker-step at M = 3): about 50x fewer bytes here.
  CHECK(result->bytes_ddp_equivalent > 30 * result->bytes_sent);
}

TEST_CASE("async mode: a killed syncer comes back with Delayed Nesterov's momentum, accumulator and count") {
  auto options = testing::tiny_options("async-dn-kill", "async", 2, 14);
  options.setup.outer.optimizer = "delayed_nesterov";
  options.setup.outer.delayed_every = 3;
  options.keep_versions = 0;  // every version stays: the one the syncer had at the kill is still there
  const int P = options.setup.outer.fragments;
  auto cluster = start_cluster(options);
  REQUIRE(cluster->wait_for([&] { return status(*cluster, syncer_name()).value("version", 0) >= 8; }, 20));
  auto before = cluster->query(syncer_name(), "digests", {}, 5);
  REQUIRE(before.ok());
  REQUIRE(status(*cluster, syncer_name())["outer_optimizer"] == "delayed_nesterov");
  REQUIRE(cluster->kill(syncer_name()));
  // kill() only sends the exit: until it lands the old syncer still answers "ready". Only a restarted
  // one has restored a version (a fresh run's first syncer committed θ0 instead: restored_version 0).
  REQUIRE(cluster->wait_for([&] {
    auto s = status(*cluster, syncer_name());
    auto d = cluster->query(syncer_name(), "digests", {}, 5);
    return s.value("phase", "") == "ready" && d.ok() && (*d).value("restored_version", uint64_t{0}) > 0;
  }, 15));
  auto after = cluster->query(syncer_name(), "digests", {}, 5);
  REQUIRE(after.ok());
  const uint64_t version_before = (*before)["version"].get<uint64_t>();
  const uint64_t restored = (*after)["restored_version"].get<uint64_t>();
  CHECK(restored >= version_before);  // a commit may have landed between the query and the kill
  auto stored = cluster->query(store_name(), "versions", {}, 10);
  REQUIRE(stored.ok());
  auto stored_outer = [&](uint64_t version) {
    for (const auto& v : (*stored)["versions"]) {
      if (v["version"].get<uint64_t>() == version) return v["outer_digests"];
    }
    return json::array();
  };
  // What the syncer held before the kill is what the store persisted for that version, and what the
  // restarted one holds is what the store has for the version it restored.
  std::vector<uint64_t> persisted_before;
  for (int p = 0; p < P; ++p) {
    CAPTURE(p);
    const auto& b = (*before)["fragments"][p];
    const auto& r = (*after)["restored_fragments"][p];
    CHECK(stored_outer(b["version"].get<uint64_t>())[p] == b["outer_digest"]);
    CHECK(stored_outer(r["version"].get<uint64_t>())[p] == r["outer_digest"]);
    if (restored == version_before) {
      CHECK(r["outer_digest"] == b["outer_digest"]);
      CHECK(r["arrivals"] == b["arrivals"]);
      CHECK(r["digest"] == b["digest"]);
    }
  }
  auto result = cluster->run();
  REQUIRE(result.ok());
  CHECK(result->infrastructure_restarts == 1);
  CHECK(result->heldout_loss < result->initial_heldout_loss);
}

TEST_CASE("a learner whose step goes non-finite recovers by itself and contributes again") {
  auto options = testing::tiny_options("nonfinite", "decoupled", 2, 14);
  options.faults.nonfinite_learner = 1;
  options.faults.nonfinite_at_step = 25;
  auto cluster = start_cluster(options);
  REQUIRE(cluster->wait_for([&] {
    return status(*cluster, monitor_name()).value("learner_nonfinite_recoveries", int64_t{0}) >= 1;
  }, 20));
  const int64_t merged_at_recovery = merged(*cluster, learner_id(1));
  CHECK(cluster->wait_for([&] { return merged(*cluster, learner_id(1)) >= merged_at_recovery + 2; }, 20));
  auto result = cluster->run();
  REQUIRE(result.ok());
  CHECK(result->learner_nonfinite_recoveries == 1);
  CHECK(result->restarts == 0);              // it recovered without being restarted
  CHECK(result->rejected_updates == 0);      // and never sent a NaN
  CHECK(std::isfinite(result->heldout_loss));
  CHECK(result->heldout_loss < result->initial_heldout_loss);
}

TEST_CASE("sync mode with fp32 both ways: the bytes measured on the links are the model's bytes per round") {
  auto options = testing::tiny_options("bytes-sync", "sync", 2, 0);
  options.setup.run.inner_steps = 5;
  options.setup.run.max_tokens = int64_t{2} * 8 * 64 * 5 * 3;  // M · B · T · H · 3 rounds
  options.setup.run.max_seconds = 60;
  auto cluster = start_cluster(options);
  auto result = cluster->run();
  REQUIRE(result.ok());
  const int64_t model_bytes = result->parameters * 4;
  const int64_t rounds = 3;
  REQUIRE(result->fragment_commits == rounds * options.setup.outer.fragments);
  // Up: each learner sends every fragment once a round. Down: each round's broadcast reaches both
  // learners; a fresh run's learners fetch nothing (their own θ0 has the stored digests). Framing
  // (envelope, chunk header) is a few hundred bytes a message.
  const int64_t payload = rounds * 2 * model_bytes;
  CHECK(result->bytes_up >= payload);
  CHECK(result->bytes_up <= payload + payload / 100);
  CHECK(result->bytes_down >= payload);
  CHECK(result->bytes_down <= payload + payload / 100);
  CHECK(result->details["store"]["fragments_held"].get<int64_t>() == 2 * options.setup.outer.fragments);
  CHECK(result->versions_per_fragment_round == doctest::Approx(1.0));
}

// The actors' status values (actors/status.hpp): what an actor sends is what its reader decodes,
// a missing key keeps its default, a key of the wrong type is refused with its path, and values
// that may be unknown travel as null.
#include <cmath>

#include <doctest/doctest.h>

#include "actors/status.hpp"

using namespace archipelago::actors;

TEST_CASE("status: a syncer's status round-trips through its JSON, nested records and unknowns included") {
  SyncerStatus s;
  s.mode = "decoupled";
  s.shard = {1, 2, {1, 3}, 0.5};
  s.version = 42;
  s.fragment_commits = {3, 4};
  s.rejected = {{"stale", 2}, {"outlier", 1}};
  s.screening.largest_passed_ratio = {0.25, 0.5};
  s.phase = "ready";
  SyncerLearnerStatus learner;
  learner.joins = 2;
  learner.compute_merged_s = 12.5;
  learner.received_until = {7, 9};
  learner.active = true;
  learner.staleness = 1;
  s.learners["learner-1"] = learner;
  s.accounting.learners["learner-1"] = learner;

  const auto back = decode_status<SyncerStatus>(nlohmann::json::parse(nlohmann::json(s).dump()), "syncer");
  REQUIRE_MESSAGE(back, back.error().reason);
  CHECK(back->mode == "decoupled");
  CHECK(back->shard.fragments == std::vector<int>{1, 3});
  CHECK(back->shard.share == 0.5);
  CHECK(back->version == 42);
  CHECK(back->fragment_commits == std::vector<int64_t>{3, 4});
  CHECK(back->rejected.at("stale") == 2);
  CHECK(back->screening.largest_passed_ratio == std::vector<double>{0.25, 0.5});
  REQUIRE(back->learners.count("learner-1") == 1);
  const auto& l = back->learners.at("learner-1");
  CHECK(l.joins == 2);
  CHECK(l.compute_merged_s == 12.5);
  CHECK(l.received_until == std::vector<uint64_t>{7, 9});
  CHECK(l.active);
  CHECK(l.staleness == 1);
  CHECK(l.first_merge_after_join_s == -1);  // its default: nothing merged since it joined
  CHECK(back->accounting.learners.at("learner-1").joins == 2);
  CHECK(back->settled());
  CHECK(back->tokens_merged() == 0);

  // The JSON names the fields as the console, the metrics and --json show them.
  const nlohmann::json j = s;
  CHECK(j["learners"]["learner-1"]["compute_merged_s"] == 12.5);
  CHECK(j["shard"]["count"] == 2);
  CHECK(j["phase"] == "ready");
}

TEST_CASE("status: an evaluator's unknown loss is null, and nothing is scored until a version is") {
  EvaluatorStatus e;
  e.heldout_loss = if_finite(std::nan(""));
  CHECK_FALSE(e.heldout_loss.has_value());
  const nlohmann::json j = e;
  CHECK(j["heldout_loss"].is_null());
  auto back = decode_status<EvaluatorStatus>(j, "evaluator");
  REQUIRE(back);
  CHECK_FALSE(back->scored());

  e.scored_version = 3;
  e.heldout_loss = if_finite(2.5);
  e.curve.push_back({3, 2.5, std::nullopt, 1.0, 0.1});
  back = decode_status<EvaluatorStatus>(nlohmann::json(e), "evaluator");
  REQUIRE(back);
  CHECK(back->scored());
  CHECK(*back->heldout_loss == 2.5);
  REQUIRE(back->curve.size() == 1);
  CHECK_FALSE(back->curve[0].heldout_bits_per_byte.has_value());
}

TEST_CASE("status: a key of the wrong type is refused with its path, a missing one keeps its default") {
  auto refused = [](const nlohmann::json& j, const std::string& path) {
    auto r = decode_status<SyncerStatus>(j, "syncer");
    REQUIRE_FALSE(r);
    CHECK_MESSAGE(r.error().reason.find(path) != std::string::npos, r.error().reason);
    CHECK_MESSAGE(r.error().reason.find("syncer status") != std::string::npos, r.error().reason);
  };
  refused({{"version", "seven"}}, "version holds the wrong type (string)");
  refused({{"learners", {{"learner-0", {{"joins", "three"}}}}}}, "learners.joins holds the wrong type");
  refused({{"shard", {{"fragments", {1, "x"}}}}}, "shard.fragments");
  refused(nlohmann::json::array(), "not an object");

  auto sparse = decode_status<SupervisorStatus>({{"running", 2}}, "supervisor");
  REQUIRE(sparse);
  CHECK(sparse->running == 2);
  CHECK(sparse->restarting == 0);
  CHECK_FALSE(sparse->all_ended());
  CHECK(sparse->children.empty());

  // A supervisor of learner slots sends each child's times; another sends none (absent, not null).
  SupervisorStatus s;
  s.children["learner-0"].times = SlotTimesStatus{10, 9, 1, 7, 0.5, 0, 0};
  s.children["syncer"];
  const nlohmann::json j = s;
  CHECK(j["children"]["learner-0"]["times"]["compute_s"] == 7);
  CHECK_FALSE(j["children"]["syncer"].contains("times"));
  auto back = decode_status<SupervisorStatus>(j, "supervisor");
  REQUIRE(back);
  REQUIRE(back->children.at("learner-0").times.has_value());
  CHECK(back->children.at("learner-0").times->compute_s == 7);
  CHECK_FALSE(back->children.at("syncer").times.has_value());
}

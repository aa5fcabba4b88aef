// The outer optimizer's rules without actors (actors/syncer_core.hpp).
#include <cmath>
#include <limits>

#include <doctest/doctest.h>

#include "actors/syncer_core.hpp"
#include "test_support.hpp"

using namespace archipelago::actors;
using namespace archipelago;

namespace {

SyncerCore make_core(const std::string& mode, int quorum = 1) {
  auto o = testing::tiny_options("core", mode, 2, 10);
  o.setup.outer.quorum = quorum;
  o.setup.outer.merge = "mean";
  o.setup.outer.lr = 1.0;
  o.setup.outer.momentum = 0.0;
  SyncerCore core(o, {{1, 1, 1}, {2, 2}});
  auto initial = core.stage_initial(0);
  core.commit_succeeded(initial, 0);
  return core;
}

messages::Join join_of(const std::string& id) { return {id, "n", "s", "cpu", 0, "archipelago-local"}; }

messages::FragmentUpdate update_of(const std::string& id, uint32_t fragment, uint64_t count) {
  messages::FragmentUpdate u;
  u.learner_id = id;
  u.fragment_id = fragment;
  u.chunk.element_count = count;
  return u;
}

}  // namespace

TEST_CASE("syncer core: joins, screening and rejection classes") {
  auto core = make_core("decoupled");
  CHECK(core.latest_version() == 1);
  auto refused = core.join({"learner-0", "n", "s", "cpu", 0, "wrong"}, 0);
  CHECK_FALSE(refused.accepted);
  CHECK(core.rejects().by_reason.at("unauthenticated") == 1);
  CHECK(core.join(join_of("learner-0"), 0).accepted);
  CHECK(core.screen("ghost", 1, update_of("ghost", 0, 3)) == RejectReason::unknown_learner);
  CHECK(core.screen("learner-1", 1, update_of("learner-0", 0, 3)) == RejectReason::unknown_learner);  // spoofed
  CHECK_FALSE(core.screen("learner-0", 5, update_of("learner-0", 0, 3)).has_value());
  CHECK(core.screen("learner-0", 5, update_of("learner-0", 0, 3)) == RejectReason::duplicate);  // replayed
  CHECK(core.screen("learner-0", 6, update_of("learner-0", 0, 4)) == RejectReason::wrong_shape);
  CHECK(core.screen("learner-0", 7, update_of("learner-0", 9, 3)) == RejectReason::wrong_shape);
  UpdateHeader h{"learner-0", 0, 1, 10, 100, 2.0f};
  CHECK_FALSE(core.accept(h, {0.5f, 0.5f, 0.5f}, 1).has_value());
  CHECK(core.accept(h, {0.5f, 0.5f, 0.5f}, 1) == RejectReason::duplicate);  // same learner and base pending
}

TEST_CASE("syncer core: merge, outer step, commit and staleness") {
  auto core = make_core("decoupled", 1);
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  REQUIRE(core.join(join_of("learner-1"), 0).accepted);
  UpdateHeader a{"learner-0", 0, 1, 10, 100, 2.0f};
  UpdateHeader b{"learner-1", 0, 1, 10, 100, 2.0f};
  REQUIRE_FALSE(core.accept(a, {0.5f, 0.5f, 0.5f}, 1).has_value());
  REQUIRE_FALSE(core.accept(b, {0.1f, 0.1f, 0.1f}, 1).has_value());
  double deadline = 0;
  auto ready = core.ready_fragments(1, &deadline);
  REQUIRE(ready == std::vector<int>{0});  // every active learner contributed: no grace needed
  auto staged = core.stage(ready, 1);
  REQUIRE(staged.ok());
  CHECK(staged->version == 2);
  CHECK(core.commit_in_flight());
  CHECK(core.fragment(0).parameters[0] == doctest::Approx(1 - 0.3));  // lr 1, momentum 0: θ − mean Δ
  core.commit_succeeded(*staged, 2);
  CHECK(core.latest_version() == 2);
  CHECK(core.learners().at("learner-0").contributions_merged == 1);
  // Base 1 is one commit of fragment 0 behind: accepted with bound 4; a failed commit rolls back.
  REQUIRE_FALSE(core.accept(a, {1, 1, 1}, 3).has_value());
  auto second = core.stage({0}, 3);
  REQUIRE(second.ok());
  core.commit_failed(*second, "injected");
  CHECK(core.fragment(0).parameters[0] == doctest::Approx(0.7));
  CHECK(core.latest_version() == 2);
  // The next commit never reuses the failed version number.
  REQUIRE_FALSE(core.accept(b, {1, 1, 1}, 4).has_value());
  auto third = core.stage({0}, 4);
  REQUIRE(third.ok());
  CHECK(third->version == 4);
  core.commit_succeeded(*third, 4);
  // Beyond the staleness bound.
  auto o = testing::tiny_options("core2", "decoupled", 1, 10);
  o.syncer.max_staleness = 0;
  SyncerCore strict(o, {{0, 0}});
  strict.commit_succeeded(strict.stage_initial(0), 0);
  REQUIRE(strict.join(join_of("learner-0"), 0).accepted);
  REQUIRE_FALSE(strict.accept({"learner-0", 0, 1, 1, 1, 0}, {1, 1}, 0).has_value());
  strict.commit_succeeded(*strict.stage({0}, 0), 0);
  CHECK(strict.accept({"learner-0", 0, 1, 1, 1, 0}, {1, 1}, 0) == RejectReason::stale);
  CHECK(strict.rejects().by_reason.at("stale") == 1);
}

TEST_CASE("syncer core: restore brings back parameters, versions and counters") {
  auto core = make_core("sync");
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  REQUIRE_FALSE(core.accept({"learner-0", 1, 1, 4, 40, 1.0f}, {1, 1}, 0).has_value());
  double deadline = 0;
  auto staged = core.stage(core.ready_fragments(0, &deadline), 0);
  REQUIRE(staged.ok());
  core.commit_succeeded(*staged, 0);
  auto manifest = staged->manifest;
  auto restored = make_core("sync");
  REQUIRE(restored.restore(2, {core.fragment(0).parameters, core.fragment(1).parameters},
                           {core.fragment(0).momentum, core.fragment(1).momentum}, manifest).ok());
  CHECK(restored.latest_version() == 2);
  CHECK(restored.fragment(1).parameters == core.fragment(1).parameters);
  CHECK(restored.fragment(1).version == 2);
  CHECK(restored.fragment(0).version == 1);
  CHECK(restored.learners().at("learner-0").contributions_merged == 1);
  CHECK_FALSE(restored.restore(3, {{1}}, {{1}}, manifest).ok());  // wrong fragment count
}

// The outer optimizer's rules without actors (actors/syncer_core.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include <doctest/doctest.h>

#include "actors/initial_fragments.hpp"
#include "actors/syncer_core.hpp"
#include "actors/wire.hpp"
#include "test_support.hpp"

using namespace archipelago::actors;
using namespace archipelago;

namespace {

// For the tests of other rules (rounds, merges, claims) on small made-up values, where a step of
// lr 1 moves θ by as much as θ itself: without the absolute bounds and probation, which their own
// tests below hold.
void without_bounds(RuntimeOptions& o) {
  o.setup.outer.screen_max_ratio = 1e300;
  o.setup.outer.max_norm_growth = 1e300;
  o.setup.outer.screen_probation = o.setup.outer.screen_clip;
}

// A staged commit whose blobs are durable is sealed (its version and manifest) and lands.
void landed(SyncerCore& core, StagedCommit& commit, double now) {
  core.seal(commit, now);
  core.commit_succeeded(commit, now);
}

// `learners`: the learners a round expects; a commit of one learner's update counts for 1/learners of a round.
SyncerCore make_core(const std::string& mode, int quorum = 1, int learners = 2,
                     const std::function<void(RuntimeOptions&)>& adjust = {}) {
  auto o = testing::tiny_options("core", mode, learners, 10);
  without_bounds(o);
  if (adjust) adjust(o);
  o.setup.outer.quorum = quorum;
  o.setup.outer.merge = "mean";
  o.setup.outer.lr = 1.0;
  o.setup.outer.momentum = 0.0;
  SyncerCore core(o, {{1, 1, 1}, {2, 2}});
  auto initial = core.stage_initial(0);
  landed(core, initial, 0);
  return core;
}

// Stages and commits `fragments` now; fails the test when nothing could be staged.
void merge_and_commit(SyncerCore& core, const std::vector<int>& fragments, double now) {
  auto staged = core.stage(fragments, now);
  REQUIRE_MESSAGE(staged.ok(), (staged.ok() ? "" : staged.error().to_string()));
  landed(core, *staged, now);
}

// What the store would hand a restarting syncer: per fragment B_p and the outer-state blob.
void stored_blobs(const SyncerCore& core, std::vector<std::vector<float>>& broadcast,
                  std::vector<std::vector<float>>& outer) {
  for (int p = 0; p < core.fragment_count(); ++p) {
    auto stored = to_stored(core.fragment(p));
    broadcast.push_back(stored.broadcast);
    outer.push_back(stored.outer);
  }
}

// A restarted syncer: stages and commits `fragments` of `core`, then restores `fresh` from what that
// commit stored (its manifest, B_p and outer-state blobs).
void commit_and_restore(SyncerCore& core, const std::vector<int>& fragments, double now, SyncerCore& fresh) {
  auto staged = core.stage(fragments, now);
  REQUIRE_MESSAGE(staged.ok(), (staged.ok() ? "" : staged.error().to_string()));
  core.seal(*staged, now);
  auto manifest = staged->manifest;
  core.commit_succeeded(*staged, now);
  std::vector<std::vector<float>> broadcast, outer;
  stored_blobs(core, broadcast, outer);
  REQUIRE(fresh.restore(core.latest_version(), broadcast, outer, manifest).ok());
}

messages::Join join_of(const std::string& id) { return {id, "n", "s", "cpu", 0, "archipelago-local"}; }

// A core whose version 1 (the `initial` fragments) has landed, with learner-0 .. learner-(joined-1) in.
SyncerCore started_core(RuntimeOptions o, std::vector<std::vector<float>> initial, int joined) {
  SyncerCore core(std::move(o), std::move(initial));
  auto first = core.stage_initial(0);
  landed(core, first, 0);
  for (int k = 0; k < joined; ++k) REQUIRE(core.join(join_of("learner-" + std::to_string(k)), 0).accepted);
  return core;
}

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
  UpdateHeader h{"learner-0", 0, 1, 10, 100, 2.0f, 0, 0, 10};
  CHECK_FALSE(core.accept(h, {0.5f, 0.5f, 0.5f}, 1).has_value());
  CHECK(core.accept(h, {0.5f, 0.5f, 0.5f}, 1) == RejectReason::duplicate);  // the same steps again
  auto sync = make_core("sync");
  REQUIRE(sync.join(join_of("learner-0"), 0).accepted);
  CHECK_FALSE(sync.accept(h, {0.5f, 0.5f, 0.5f}, 1).has_value());
  UpdateHeader redone{"learner-0", 0, 1, 10, 100, 2.0f, 0, 0, 10};
  CHECK(sync.accept(redone, {0.5f, 0.5f, 0.5f}, 1) == RejectReason::duplicate);  // the round redone on that base
}

TEST_CASE("syncer core: work that starts before the end of work already accepted from a learner is a duplicate") {
  auto core = make_core("decoupled", 1);
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  UpdateHeader first{"learner-0", 0, 1, 10, 100, 2.0f, 0, 0, 10};
  REQUIRE_FALSE(core.accept(first, {0.5f, 0.5f, 0.5f}, 1).has_value());
  merge_and_commit(core, {0}, 1);
  REQUIRE(core.latest_version() == 2);
  // A restarted incarnation: its Welcome says how far the syncer has its work of each fragment.
  auto welcome = core.join(join_of("learner-0"), 2);
  REQUIRE(welcome.accepted);
  CHECK(welcome.received_until == std::vector<uint64_t>{10, 0});
  // Its checkpoint held steps 4..10 of fragment 0 unsent, but `first` carried them.
  UpdateHeader resent{"learner-0", 0, 2, 12, 120, 2.0f, 0, 4, 16};
  CHECK(core.accept(resent, {0.5f, 0.5f, 0.5f}, 3) == RejectReason::duplicate);
  CHECK(core.rejects().by_reason.at("duplicate") == 1);
  // Work from step 10 on is new, and so is fragment 1's from step 4.
  UpdateHeader next{"learner-0", 0, 2, 6, 60, 2.0f, 1, 10, 16};
  CHECK_FALSE(core.accept(next, {0.5f, 0.5f, 0.5f}, 3).has_value());
  UpdateHeader other{"learner-0", 1, 1, 12, 120, 2.0f, 0, 4, 16};
  CHECK_FALSE(core.accept(other, {0.5f, 0.5f}, 3).has_value());
  CHECK(core.join(join_of("learner-0"), 4).received_until == std::vector<uint64_t>{16, 16});
  // The bound is part of what a commit persists: a restarted syncer keeps refusing the resend.
  auto staged = core.stage({0, 1}, 4);
  REQUIRE(staged.ok());
  core.seal(*staged, 4);
  auto manifest = staged->manifest;
  core.commit_succeeded(*staged, 4);
  std::vector<std::vector<float>> broadcast, outer;
  stored_blobs(core, broadcast, outer);
  auto restarted = make_core("decoupled", 1);
  REQUIRE(restarted.restore(core.latest_version(), broadcast, outer, manifest).ok());
  CHECK(restarted.join(join_of("learner-0"), 5).received_until == std::vector<uint64_t>{16, 16});
  CHECK(restarted.accept(resent, {0.5f, 0.5f, 0.5f}, 5) == RejectReason::duplicate);
}

TEST_CASE("syncer core: set changes a runtime-tunable key for the next merge and refuses bad values") {
  auto core = make_core("decoupled", 1);  // lr 1, momentum 0
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  auto changed = core.set("outer.lr", "0.5");
  REQUIRE(changed.ok());
  CHECK(changed->first == "1");
  CHECK(changed->second == "0.5");
  CHECK_FALSE(core.set("outer.lr", "-1").ok());
  CHECK_FALSE(core.set("outer.lr", "nan").ok());
  CHECK_FALSE(core.set("outer.lr", "0.5x").ok());
  CHECK_FALSE(core.set("outer.momentum", "1").ok());
  CHECK_FALSE(core.set("outer.quorum", "3").ok());  // 2 learners in this run
  CHECK_FALSE(core.set("outer.quorum", "1.5").ok());
  CHECK(core.set("outer.quorum", "2").ok());
  CHECK(core.set("outer.quorum", "1").ok());
  auto unknown = core.set("model.preset", "big");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().reason.find("not runtime-tunable") != std::string::npos);
  // The next merge uses lr 0.5: θ − 0.5 · Δ / 2 (one update of the 2 learners a round expects).
  UpdateHeader h{"learner-0", 0, 1, 10, 100, 2.0f, 0, 0, 10};
  REQUIRE_FALSE(core.accept(h, {0.4f, 0.4f, 0.4f}, 1).has_value());
  auto staged = core.stage({0}, 1);
  REQUIRE(staged.ok());
  CHECK(staged->find(0)->next.parameters[0] == doctest::Approx(1 - 0.5 * 0.4 / 2));
  CHECK(core.status(1).outer_lr == doctest::Approx(0.5));
}

TEST_CASE("syncer core: set outer.codec and train.inner_steps, the schedule is broadcast and survives a restore") {
  auto core = make_core("decoupled");
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  CHECK(core.schedule_to_broadcast().empty());  // unchanged: learners have it from their configuration
  auto codec = core.set("outer.codec", "int8");
  REQUIRE(codec.ok());
  CHECK(codec->second == "int8");
  CHECK(core.uplink_codec() == messages::Codec::int8);
  CHECK_FALSE(core.set("outer.codec", "int3").ok());
  // The leading learner sent work up to step 37: the change starts one period (H = 10) later.
  REQUIRE_FALSE(core.accept({"learner-0", 0, 1, 10, 100, 2.0f, 3, 27, 37}, {0.1f, 0.1f, 0.1f}, 1).has_value());
  auto period = core.set("train.inner_steps", "20");
  REQUIRE(period.ok());
  CHECK(period->first == "10");
  CHECK(period->second == "20 from step 47");
  const std::vector<messages::InnerStepsFrom> expected{{0, 10}, {47, 20}};
  CHECK(core.schedule_to_broadcast() == expected);
  CHECK(core.status(1).inner_steps == 20);
  CHECK_FALSE(core.set("train.inner_steps", "0").ok());
  CHECK_FALSE(core.set("train.inner_steps", "2.5").ok());
  // Every committed version's accounting carries it: a restored syncer broadcasts the same schedule.
  auto staged = core.stage({0}, 1);
  REQUIRE(staged.ok());
  core.seal(*staged, 1);
  auto manifest = staged->manifest;
  core.commit_succeeded(*staged, 1);
  std::vector<std::vector<float>> broadcast, outer;
  stored_blobs(core, broadcast, outer);
  auto restored = make_core("decoupled");
  REQUIRE(restored.restore(2, broadcast, outer, manifest).ok());
  CHECK(restored.schedule_to_broadcast() == expected);
  // Sync mode's rounds are aligned across learners: H stays as it is.
  auto sync = make_core("sync");
  auto refused = sync.set("train.inner_steps", "20");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().reason.find("is fixed for a sync run") != std::string::npos);
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
  CHECK(staged->version == 0);  // chosen when its blobs are durable
  CHECK(core.commit_in_flight());
  CHECK(staged->find(0)->next.parameters[0] == doctest::Approx(1 - 0.3));  // lr 1, momentum 0: θ − mean Δ
  // Lent to its commit: the committed value's memory is let go, its digests and entry are kept.
  CHECK(core.fragment(0).parameters.empty());
  CHECK(core.broadcast_digests()[0]["digest"] == messages::broadcast_digest(std::vector<float>{1, 1, 1}));
  core.seal(*staged, 2);
  CHECK(staged->version == 2);
  core.commit_succeeded(*staged, 2);
  CHECK(core.fragment(0).parameters[0] == doctest::Approx(1 - 0.3));
  CHECK(core.latest_version() == 2);
  CHECK(core.learners().at("learner-0").contributions_merged == 1);
  // Base 1 is one commit of fragment 0 behind: accepted with bound 4. A failed commit stays staged
  // under a new ticket and lands later with what it merged; nothing else changes meanwhile.
  REQUIRE_FALSE(core.accept(a, {1, 1, 1}, 3).has_value());
  auto second = core.stage({0}, 3);
  REQUIRE(second.ok());
  // One of the two active learners: the merged Δ counts for half a round.
  CHECK(second->find(0)->next.parameters[0] == doctest::Approx(0.7 - 0.5));
  core.seal(*second, 3);  // its record is refused
  CHECK(second->version == 3);
  const uint64_t first_ticket = second->ticket;
  core.commit_failed(*second, "injected");
  CHECK(second->ticket > first_ticket);
  CHECK(second->version == 0);
  CHECK(second->attempts == 1);
  CHECK(core.fragment_in_flight(0));
  CHECK(core.stage({0}, 3.5).error().code == ErrorCode::conflict);
  CHECK(core.latest_version() == 2);
  // What arrives meanwhile waits for the next round; the sent-again commit never reuses the failed
  // version number.
  REQUIRE_FALSE(core.accept(b, {1, 1, 1}, 4).has_value());
  core.seal(*second, 4);
  CHECK(second->version == 4);
  CHECK(second->find(0)->merged.size() == 1);
  core.commit_succeeded(*second, 4);
  CHECK(core.fragment(0).parameters[0] == doctest::Approx(0.7 - 0.5));
  REQUIRE(core.fragment(0).pending.size() == 1);
  CHECK(core.fragment(0).pending[0].learner_id == "learner-1");
  auto third = core.stage({0}, 5);
  REQUIRE(third.ok());
  core.seal(*third, 5);
  CHECK(third->version == 5);
  CHECK(third->find(0)->merged.size() == 1);
  core.commit_succeeded(*third, 5);
  CHECK(core.fragment(0).pending.empty());
  // Beyond the staleness bound.
  auto o = testing::tiny_options("core2", "decoupled", 1, 10);
  o.syncer.max_staleness = 0;
  SyncerCore strict(o, {{0, 0}});
  auto strict_initial = strict.stage_initial(0);
  landed(strict, strict_initial, 0);
  REQUIRE(strict.join(join_of("learner-0"), 0).accepted);
  REQUIRE_FALSE(strict.accept({"learner-0", 0, 1, 1, 1, 0}, {1, 1}, 0).has_value());
  merge_and_commit(strict, {0}, 0);
  CHECK(strict.accept({"learner-0", 0, 1, 1, 1, 0}, {1, 1}, 0) == RejectReason::stale);
  CHECK(strict.rejects().by_reason.at("stale") == 1);
}

TEST_CASE("syncer core: fragments commit independently, versions number records as they land") {
  auto core = make_core("decoupled", 1, 1);  // fragments {1, 1, 1} and {2, 2}; mean, lr 1, momentum 0, 1 learner
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  REQUIRE_FALSE(core.accept({"learner-0", 0, 1, 10, 100, 1.0f, 0, 0, 10}, {0.5f, 0.5f, 0.5f}, 1).has_value());
  double deadline = 0;
  REQUIRE(core.ready_fragments(1, &deadline) == std::vector<int>{0});
  auto slow = core.stage({0}, 1);  // fragment 0's commit: its blobs are slow to write
  REQUIRE(slow.ok());
  CHECK(core.fragment_in_flight(0));
  CHECK_FALSE(core.fragment_in_flight(1));
  // Fragment 1's round closes and commits twice meanwhile; fragment 0 is neither ready nor stageable.
  for (int round = 0; round < 2; ++round) {
    const double now = 2 + round;
    auto refused = core.accept({"learner-0", 1, core.fragment(1).version, 10, 100, 1.0f,
                                static_cast<uint64_t>(round), static_cast<uint64_t>(10 * round),
                                static_cast<uint64_t>(10 + 10 * round)},
                               {0.25f, 0.25f}, now);
    REQUIRE_MESSAGE(!refused.has_value(), to_string(refused.value_or(RejectReason::stale)));
    REQUIRE(core.ready_fragments(now, &deadline) == std::vector<int>{1});
    CHECK(core.stage({0}, now).error().code == ErrorCode::conflict);
    auto fast = core.stage({1}, now);
    REQUIRE(fast.ok());
    core.seal(*fast, now);
    CHECK(fast->version == static_cast<uint64_t>(2 + round));
    // The model version is the vector of its fragments' versions: fragment 0 still at 1.
    CHECK(fast->manifest.fragment_versions == std::vector<uint64_t>{1, static_cast<uint64_t>(2 + round)});
    CHECK(fast->manifest.carried == std::vector<int>{0});
    core.commit_succeeded(*fast, now);
    CHECK(core.fragment(1).version == static_cast<uint64_t>(2 + round));
  }
  CHECK(core.fragment(0).parameters.empty());  // lent to its commit, not in place before it lands
  // Fragment 0's blobs are durable at last: its record is the next version, carrying fragment 1.
  core.seal(*slow, 5);
  CHECK(slow->version == 4);
  CHECK(slow->manifest.fragment_versions == std::vector<uint64_t>{4, 3});
  CHECK(slow->manifest.carried == std::vector<int>{1});
  CHECK(slow->manifest.accounting["learners"]["learner-0"]["contributions_merged"] == 3);
  core.commit_succeeded(*slow, 5);
  CHECK_FALSE(core.commit_in_flight());
  CHECK(core.fragment(0).parameters[0] == doctest::Approx(0.5));
  CHECK(core.latest_version() == 4);
  CHECK(core.status(5).fragment_versions == std::vector<uint64_t>{4, 3});
}

namespace {

// A sync core after one round of learner-0 merged and committed (version 2), and what its store
// would hand a restarting syncer: the manifest, B_p and the outer-state blobs.
struct CommittedRound {
  SyncerCore core;
  diloco::VersionManifest manifest;
  std::vector<std::vector<float>> broadcast, outer;
};
CommittedRound one_committed_round() {
  CommittedRound r{make_core("sync"), {}, {}, {}};
  REQUIRE(r.core.join(join_of("learner-0"), 0).accepted);
  REQUIRE_FALSE(r.core.accept({"learner-0", 1, 1, 4, 40, 1.0f}, {1, 1}, 0).has_value());
  double deadline = 0;
  auto staged = r.core.stage(r.core.ready_fragments(0, &deadline), 0);
  REQUIRE(staged.ok());
  r.core.seal(*staged, 0);
  r.manifest = staged->manifest;
  r.core.commit_succeeded(*staged, 0);
  stored_blobs(r.core, r.broadcast, r.outer);
  return r;
}

}  // namespace

TEST_CASE("syncer core: restore brings back parameters, versions and counters") {
  auto [core, manifest, broadcast, outer] = one_committed_round();
  auto restored = make_core("sync");
  REQUIRE(restored.restore(2, broadcast, outer, manifest).ok());
  CHECK(restored.latest_version() == 2);
  CHECK(restored.fragment(1).parameters == core.fragment(1).parameters);
  CHECK(restored.fragment(1).outer.momentum == core.fragment(1).outer.momentum);
  CHECK(restored.fragment(1).version == 2);
  CHECK(restored.fragment(0).version == 1);
  CHECK(restored.learners().at("learner-0").contributions_merged == 1);
  CHECK_FALSE(restored.restore(3, {{1}}, {{1}}, manifest).ok());  // wrong fragment count
  outer[1].pop_back();
  CHECK_FALSE(restored.restore(3, broadcast, outer, manifest).ok());  // a blob of the wrong size
}

TEST_CASE("syncer core: a core started without values restores a version, or commits θ0 from a holder released after") {
  auto [core, manifest, broadcast, outer] = one_committed_round();

  // A restarted syncer of a store holding a version: sizes only, then the store's values.
  auto o = testing::tiny_options("core", "sync", 2, 10);
  o.setup.outer.merge = "mean";
  auto hollow = SyncerCore::without_values(o, {3, 2});
  CHECK_FALSE(hollow.has_values());
  CHECK(hollow.fragment(0).parameters.empty());
  CHECK(hollow.fragment(0).outer.momentum.empty());
  CHECK(hollow.fragment_numel(1) == 2);
  REQUIRE(hollow.restore(2, broadcast, outer, manifest).ok());
  CHECK(hollow.has_values());
  CHECK(hollow.fragment(1).parameters == core.fragment(1).parameters);
  CHECK(hollow.fragment(1).outer.momentum == core.fragment(1).outer.momentum);
  CHECK(hollow.latest_version() == 2);

  // An empty store: θ0 comes from the holder, whose sizes the core was started with.
  InitialFragments theta0({{1, 1, 1}, {2, 2}});
  CHECK(theta0.numels() == std::vector<int64_t>{3, 2});
  auto fresh = SyncerCore::without_values(o, theta0.numels());
  CHECK_FALSE(fresh.hold_initial({{1, 1, 1}, {2, 2, 2}}).ok());  // a fragment of the wrong size
  CHECK_FALSE(fresh.hold_initial({{1, 1, 1}}).ok());             // too few fragments
  CHECK_FALSE(fresh.has_values());
  auto copy = theta0.copy();
  REQUIRE(copy.ok());
  REQUIRE(fresh.hold_initial(std::move(*copy)).ok());
  auto initial = fresh.stage_initial(0);
  landed(fresh, initial, 0);
  CHECK(fresh.fragment(0).parameters == std::vector<float>{1, 1, 1});
  CHECK(fresh.fragment(1).broadcast == std::vector<float>{2, 2});
  // Once a version is durable the holder lets θ0 go; its sizes stay for a start that restores.
  theta0.release();
  CHECK(theta0.released());
  CHECK_FALSE(theta0.copy().ok());
  CHECK(theta0.numels() == std::vector<int64_t>{3, 2});
}

namespace {

// Async mode with Delayed Nesterov every `every` arrivals, lr 0.5, momentum 0.9, one fragment of 3.
SyncerCore make_async_core(int every, int momentum_warmup = 0) {
  auto o = testing::tiny_options("core-async", "async", 2, 10);
  o.setup.outer.optimizer = "delayed_nesterov";
  o.setup.outer.delayed_every = every;
  o.setup.outer.momentum_warmup = momentum_warmup;
  o.setup.outer.lr = 0.5;
  o.setup.outer.momentum = 0.9;
  SyncerCore core(o, {{1, 2, 3}});
  auto initial = core.stage_initial(0);
  landed(core, initial, 0);
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  REQUIRE(core.join(join_of("learner-1"), 0).accepted);
  return core;
}

void arrive(SyncerCore& core, const std::string& id, std::vector<float> delta, double now) {
  UpdateHeader h{id, 0, core.latest_version(), 5, 50, 1.0f};
  REQUIRE_FALSE(core.accept(h, std::move(delta), now).has_value());
}

// Every part of two fragment values that a restore or a failed commit must leave equal.
void check_same_outer_state(const FragmentState& after, const FragmentState& before) {
  CHECK(after.parameters == before.parameters);
  CHECK(after.broadcast == before.broadcast);
  CHECK(after.outer.momentum == before.outer.momentum);
  CHECK(after.outer.accumulated == before.outer.accumulated);
  CHECK(after.outer.arrivals == before.outer.arrivals);
  CHECK(after.outer.steps == before.outer.steps);
}

}  // namespace

TEST_CASE("syncer core: outer.optimizer = delayed_nesterov counts arrivals") {
  auto core = make_async_core(3);
  CHECK(core.rules().outer == archipelago::diloco::OuterRule::delayed_nesterov);
  // Two arrivals pending together are two arrivals of Delayed Nesterov, not one commit.
  arrive(core, "learner-0", {0.1f, 0.2f, 0.3f}, 1);
  arrive(core, "learner-1", {0.3f, 0.2f, 0.1f}, 1);
  merge_and_commit(core, {0}, 1);
  CHECK(core.fragment(0).outer.arrivals == 2);
  CHECK(core.fragment(0).outer.momentum == std::vector<float>(3, 0.0f));  // not folded in yet
  // The same two arrivals through the optimizer object, the oracle of tests/training/outer_test.cpp.
  training::DelayedNesterovOuter oracle(3, 0.5, 0.9, 3);
  std::vector<float> theta = {1, 2, 3};
  const std::vector<float> a = {0.1f, 0.2f, 0.3f}, b = {0.3f, 0.2f, 0.1f};
  oracle.step(theta.data(), a.data());
  oracle.step(theta.data(), b.data());
  CHECK(core.fragment(0).parameters == theta);
  arrive(core, "learner-0", {0.2f, 0.2f, 0.2f}, 2);
  merge_and_commit(core, {0}, 2);
  CHECK(core.fragment(0).outer.arrivals == 0);  // the third arrival updated the momentum
  CHECK(core.fragment(0).outer.momentum[0] != 0.0f);

  // auto is the work clock in async and decoupled mode, Nesterov per round in sync.
  using archipelago::diloco::OuterRule;
  auto o = testing::tiny_options("core-async-plain", "async", 1, 10);
  o.setup.outer.optimizer = "auto";
  CHECK(SyncerCore(o, {{0.0f}}).rules().outer == OuterRule::work_clock);
  o.setup.outer.optimizer = "per_commit_nesterov";
  CHECK(SyncerCore(o, {{0.0f}}).rules().outer == OuterRule::per_commit_nesterov);
  o.setup.run.mode = archipelago::diloco::Mode::decoupled;
  o.setup.outer.optimizer = "nesterov";
  CHECK(SyncerCore(o, {{0.0f}}).rules().outer == OuterRule::work_clock);
  o.setup.run.mode = archipelago::diloco::Mode::sync;
  o.setup.outer.optimizer = "auto";
  CHECK(SyncerCore(o, {{0.0f}}).rules().outer == OuterRule::nesterov);
}

TEST_CASE("syncer core: a restarted syncer gets Delayed Nesterov's momentum, accumulator and count back") {
  auto core = make_async_core(3);
  for (int k = 0; k < 4; ++k) {  // one full period (momentum updated) and one arrival into the next
    arrive(core, "learner-" + std::to_string(k % 2), {0.1f * (k + 1), -0.05f, 0.02f * k}, k + 1.0);
    merge_and_commit(core, {0}, k + 1.0);
  }
  const FragmentState before = core.fragment(0);
  REQUIRE(before.outer.arrivals == 1);
  REQUIRE(before.outer.accumulated[0] != 0.0f);
  REQUIRE(before.outer.momentum[0] != 0.0f);
  // What the last commit persisted: its manifest and blobs.
  auto probe = make_async_core(3);
  std::vector<std::vector<float>> broadcast, outer;
  stored_blobs(core, broadcast, outer);
  diloco::VersionManifest manifest;
  manifest.fragment_versions = {before.version};
  manifest.outer_state = nlohmann::json::array({to_stored(before).entry});
  REQUIRE(probe.restore(core.latest_version(), broadcast, outer, manifest).ok());
  check_same_outer_state(probe.fragment(0), before);
  // And both continue identically: the next two arrivals complete the period on both.
  for (auto* c : {&core, &probe}) {
    arrive(*c, "learner-0", {0.3f, 0.1f, -0.2f}, 9);
    merge_and_commit(*c, {0}, 9);
    arrive(*c, "learner-1", {0.1f, 0.1f, 0.1f}, 10);
    merge_and_commit(*c, {0}, 10);
  }
  CHECK(probe.fragment(0).outer.momentum == core.fragment(0).outer.momentum);
  CHECK(probe.fragment(0).parameters == core.fragment(0).parameters);
}

TEST_CASE("syncer core: an outer-momentum warm-up follows its ramp through commits and a restore in the middle of it") {
  const std::vector<std::vector<float>> deltas = {
      {0.1f, 0.2f, 0.3f}, {0.3f, -0.2f, 0.1f}, {0.2f, 0.2f, -0.1f}, {-0.1f, 0.3f, 0.2f}, {0.05f, 0.1f, 0.3f}};
  // Delayed Nesterov with N = 1 is Nesterov per arrival (tests/training/outer_test.cpp): the oracle.
  auto core = make_async_core(1, 4);
  auto plain = make_async_core(1, 0);
  training::NesterovOuter oracle(3, 0.5, 0.9, 4);
  std::vector<float> theta = {1, 2, 3};
  for (int k = 0; k < 2; ++k) {
    for (auto* c : {&core, &plain}) {
      arrive(*c, "learner-0", deltas[k], k + 1.0);
      merge_and_commit(*c, {0}, k + 1.0);
    }
    oracle.step(theta.data(), deltas[k].data());
  }
  CHECK(core.fragment(0).outer.steps == 2);
  for (int i = 0; i < 3; ++i) CHECK(core.fragment(0).parameters[i] == doctest::Approx(theta[i]).epsilon(1e-6));
  CHECK(core.fragment(0).parameters != plain.fragment(0).parameters);  // the ramp took effect
  // Restored from what the second commit persisted, the ramp goes on from its third step.
  auto probe = make_async_core(1, 4);
  std::vector<std::vector<float>> broadcast, outer;
  stored_blobs(core, broadcast, outer);
  const FragmentState before = core.fragment(0);
  diloco::VersionManifest manifest;
  manifest.fragment_versions = {before.version};
  manifest.outer_state = nlohmann::json::array({to_stored(before).entry});
  REQUIRE(probe.restore(core.latest_version(), broadcast, outer, manifest).ok());
  check_same_outer_state(probe.fragment(0), before);
  for (int k = 2; k < 5; ++k) {
    for (auto* c : {&core, &probe}) {
      arrive(*c, "learner-1", deltas[k], k + 1.0);
      merge_and_commit(*c, {0}, k + 1.0);
    }
    oracle.step(theta.data(), deltas[k].data());
  }
  CHECK(probe.fragment(0).parameters == core.fragment(0).parameters);
  CHECK(probe.fragment(0).outer.momentum == core.fragment(0).outer.momentum);
  for (int i = 0; i < 3; ++i) CHECK(core.fragment(0).parameters[i] == doctest::Approx(theta[i]).epsilon(1e-6));
}

TEST_CASE("syncer core: a failed commit stays staged and lands later as if it had landed at once") {
  // `core`'s commit fails once before it lands; `twin` makes the same commit at once.
  auto core = make_async_core(3);
  auto twin = make_async_core(3);
  for (auto* c : {&core, &twin}) {
    arrive(*c, "learner-0", {0.1f, 0.2f, 0.3f}, 1);
    merge_and_commit(*c, {0}, 1);
    arrive(*c, "learner-1", {0.4f, 0.4f, 0.4f}, 2);
  }
  const FragmentState before = core.fragment(0);
  auto staged = core.stage({0}, 2);
  REQUIRE(staged.ok());
  REQUIRE(staged->find(0)->next.outer.arrivals == 2);  // the staged value moved on
  // Lent: the committed value's memory is let go; its digests and stored entry stay as they were.
  CHECK(core.fragment(0).parameters.empty());
  CHECK(core.fragment(0).outer.momentum.empty());
  CHECK(core.broadcast_digests()[0]["digest"] == messages::broadcast_digest(before.broadcast));
  CHECK(core.broadcast_digests()[0]["outer_digest"] == messages::broadcast_digest(to_stored(before).outer));
  core.commit_failed(*staged, "injected");
  CHECK(core.fragment_in_flight(0));
  landed(core, *staged, 3);
  merge_and_commit(twin, {0}, 2);
  check_same_outer_state(core.fragment(0), twin.fragment(0));
  CHECK(core.fragment(0).version == twin.fragment(0).version);
  CHECK(core.fragment(0).pending.empty());
  CHECK_FALSE(core.commit_in_flight());

  // A failed initial commit hands its values back (a restore, or the next initial commit, follows).
  auto o = testing::tiny_options("core-initial", "sync", 1, 10);
  SyncerCore fresh(o, {{1, 2, 3}});
  auto initial = fresh.stage_initial(0);
  CHECK(fresh.fragment(0).parameters.empty());
  fresh.commit_failed(initial, "injected");
  CHECK(fresh.fragment(0).parameters == std::vector<float>{1, 2, 3});
  CHECK(fresh.fragment(0).broadcast == std::vector<float>{1, 2, 3});
  CHECK_FALSE(fresh.commit_in_flight());
  auto again = fresh.stage_initial(1);
  landed(fresh, again, 1);
  CHECK(fresh.fragment(0).parameters == std::vector<float>{1, 2, 3});
}

namespace {

SyncerCore make_decoupled_core(int learners, int quorum) {
  auto o = testing::tiny_options("core-rounds", "decoupled", learners, 10);
  without_bounds(o);
  o.setup.outer.quorum = quorum;
  o.setup.outer.merge = "mean";
  o.setup.outer.lr = 1.0;
  o.setup.outer.momentum = 0.0;
  o.syncer.grace_max_s = 0;  // a round closes as soon as its quorum is in
  SyncerCore core(o, {{0, 0}, {0, 0}});
  auto initial = core.stage_initial(0);
  landed(core, initial, 0);
  for (int m = 0; m < learners; ++m) REQUIRE(core.join(join_of("learner-" + std::to_string(m)), 0).accepted);
  return core;
}

void send_round(SyncerCore& core, int learner, uint64_t round, double now) {
  const auto& f = core.fragment(0);
  UpdateHeader h{"learner-" + std::to_string(learner), 0, f.version, 10, 100, 1.0f, round};
  REQUIRE_FALSE(core.accept(h, {1.0f, 1.0f}, now).has_value());
}

std::vector<int> ready_now(SyncerCore& core, double now) {
  double deadline = 0;
  return core.ready_fragments(now, &deadline);
}

}  // namespace

TEST_CASE("syncer core: decoupled rounds, an update behind its round merges with the next without counting for it") {
  auto core = make_decoupled_core(3, 1);
  send_round(core, 0, 0, 1);
  REQUIRE(ready_now(core, 1) == std::vector<int>{0});  // quorum 1 on time; grace 0 (nothing measured yet)
  merge_and_commit(core, {0}, 1);
  CHECK(core.fragment(0).next_round == 1);
  // learner-1 is late for round 0: it neither closes round 1 by itself nor is waited for.
  send_round(core, 1, 0, 2);
  CHECK(ready_now(core, 2).empty());
  CHECK_FALSE(core.fragment(0).pending[0].on_time);
  send_round(core, 0, 1, 3);
  REQUIRE(ready_now(core, 3) == std::vector<int>{0});
  auto staged = core.stage({0}, 3);
  REQUIRE(staged.ok());
  REQUIRE(staged->find(0)->merged.size() == 2);  // the late one merges with round 1
  core.seal(*staged, 3);
  int late = 0;
  for (const auto& c : staged->manifest.contributors) late += c.on_time ? 0 : 1;
  CHECK(late == 1);
  landed(core, *staged, 3);
  CHECK(core.fragment(0).next_round == 2);
  CHECK(core.status(3).fragment_commits[0] == 2);
  CHECK(core.learners().at("learner-1").contributions_merged == 1);
  // Every active learner contributed: the round closes at once, late ones included.
  send_round(core, 2, 0, 4);
  send_round(core, 1, 1, 4);
  CHECK(ready_now(core, 4).empty());
  send_round(core, 0, 2, 4);
  CHECK(ready_now(core, 4) == std::vector<int>{0});
}

TEST_CASE("syncer core: decoupled quorum 2 waits for two on-time learners, a dead leader is not waited for") {
  auto core = make_decoupled_core(3, 2);
  send_round(core, 0, 4, 1);
  CHECK(ready_now(core, 1).empty());  // one of two
  send_round(core, 2, 4, 1);
  REQUIRE(ready_now(core, 1) == std::vector<int>{0});
  merge_and_commit(core, {0}, 1);
  CHECK(core.fragment(0).next_round == 5);
  send_round(core, 1, 1, 2);  // behind: does not make the quorum
  send_round(core, 0, 5, 2);
  CHECK(ready_now(core, 2).empty());
  send_round(core, 2, 5, 3);
  CHECK(ready_now(core, 3) == std::vector<int>{0});
  merge_and_commit(core, {0}, 3);
  CHECK(core.fragment(0).next_round == 6);
  // The two learners that kept the schedule leave; learner-1, far behind, must still make progress.
  core.leave("learner-0", false, "test", 4);
  core.leave("learner-2", false, "test", 4);
  send_round(core, 1, 2, 5);
  CHECK(core.fragment(0).pending[0].on_time);
  CHECK(ready_now(core, 5) == std::vector<int>{0});
}

TEST_CASE("syncer core: the downlink moves B exactly as a receiver applies it, and carries the codec's error") {
  auto o = testing::tiny_options("core-downlink", "decoupled", 1, 10);
  o.setup.outer.downlink_codec = "int4";
  o.setup.outer.merge = "mean";
  o.setup.outer.lr = 1.0;
  o.setup.outer.momentum = 0.0;
  std::vector<float> initial(300);
  for (size_t i = 0; i < initial.size(); ++i) initial[i] = std::sin(0.1 * i);
  SyncerCore core(o, {initial});
  auto first = core.stage_initial(0);
  landed(core, first, 0);
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  messages::BroadcastCopy receiver{1, core.fragment(0).broadcast};  // what a learner fetched from the store
  for (int round = 0; round < 3; ++round) {
    std::vector<float> delta(initial.size());
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = 0.01f * std::cos(0.37 * i + round);
    UpdateHeader h{"learner-0", 0, core.fragment(0).version, 10, 100, 1.0f, static_cast<uint64_t>(round)};
    REQUIRE_FALSE(core.accept(h, delta, round + 1.0).has_value());
    auto staged = core.stage({0}, round + 1.0);
    REQUIRE(staged.ok());
    const auto& message = staged->find(0)->downlink;
    CHECK(message.codec == messages::kInt4);
    CHECK(message.delta_base == core.fragment(0).version);
    CHECK(message.payload.size() < initial.size());  // 4 bits a value and block scales, not 32 bits
    landed(core, *staged, round + 1.0);
    auto decoded = messages::decode_tensor(message.codec, message.payload.data(), message.payload.size(), initial.size());
    REQUIRE(decoded.ok());
    REQUIRE(messages::apply_broadcast(receiver, core.fragment(0).version, message.delta_base, std::move(*decoded)) ==
            messages::ApplyResult::applied);
    CHECK(messages::broadcast_digest(receiver.values) == messages::broadcast_digest(core.fragment(0).broadcast));  // bit for bit
    CHECK(core.fragment(0).parameters != core.fragment(0).broadcast);  // the codec's error is still owed
  }
  // A receiver that missed a broadcast cannot apply the next delta.
  messages::BroadcastCopy behind{1, initial};
  CHECK(messages::apply_broadcast(behind, 9, 3, std::vector<float>(initial.size())) == messages::ApplyResult::gap);
  CHECK(behind.values == initial);
}

namespace {

// Two learners on one fragment of 3 values, token-weighted merge, lr 1, momentum 0: θ ← θ − merged Δ.
SyncerCore make_weighted_core(const std::string& name) {
  auto o = testing::tiny_options(name, "decoupled", 2, 10);
  without_bounds(o);
  o.setup.outer.merge = "token_weighted";
  o.setup.outer.lr = 1.0;
  o.setup.outer.momentum = 0.0;
  SyncerCore core(o, {{0, 0, 0}});
  auto initial = core.stage_initial(0);
  landed(core, initial, 0);
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  REQUIRE(core.join(join_of("learner-1"), 0).accepted);
  return core;
}

}  // namespace

TEST_CASE("syncer core: a claim of 2^40 tokens does not outweigh an honest learner") {
  auto core = make_weighted_core("core-claims");
  const int64_t T = configured_tokens_per_step(testing::tiny_options("core-claims-t", "decoupled", 2, 10).setup);
  REQUIRE(T > 0);
  const std::vector<float> liar = {1.0f, -2.0f, 4.0f}, honest = {0.1f, 0.2f, 0.3f};
  UpdateHeader lie{"learner-0", 0, 1, 10, uint64_t{1} << 40, 1.0f};
  UpdateHeader fair{"learner-1", 0, 1, 10, static_cast<uint64_t>(10 * T), 1.0f};
  REQUIRE_FALSE(core.accept(lie, liar, 1).has_value());
  REQUIRE_FALSE(core.accept(fair, honest, 1).has_value());
  auto staged = core.stage({0}, 1);
  REQUIRE(staged.ok());
  // The same steps, so the same weight: the merged Δ is the plain mean of what they sent.
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(staged->find(0)->next.parameters[i] == doctest::Approx(-(liar[i] + honest[i]) / 2).epsilon(1e-6));
  }
  CHECK(core.claims_corrected() == 1);
  landed(core, *staged, 1);
  // The token ledger (and so train.max_tokens) counts the credited tokens, not the claim.
  CHECK(core.learners().at("learner-0").tokens_merged == 10 * T);
  CHECK(core.status(1).claims_corrected == 1);
  CHECK(core.status(1).accounting.claims_corrected == 1);

  // A claim of 2^40 steps counts as kMaxPeriodsPerUpdate periods (H = 10): weight 4 : 1.
  UpdateHeader many{"learner-0", 0, 2, static_cast<uint32_t>(1u << 31), uint64_t{1} << 40, 1.0f, 1, 10, 20};
  UpdateHeader next{"learner-1", 0, 2, 10, static_cast<uint64_t>(10 * T), 1.0f, 1, 10, 20};
  REQUIRE_FALSE(core.accept(many, liar, 2).has_value());
  REQUIRE_FALSE(core.accept(next, honest, 2).has_value());
  const std::vector<float> before = core.fragment(0).parameters;
  auto second = core.stage({0}, 2);
  REQUIRE(second.ok());
  const double k = diloco::kMaxPeriodsPerUpdate;
  for (size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(second->find(0)->next.parameters[i] ==
          doctest::Approx(before[i] - (k * liar[i] + honest[i]) / (k + 1)).epsilon(1e-6));
  }
  landed(core, *second, 2);

  // No learner sends 0 steps; an update of weight 0 alone would make its merge fail.
  UpdateHeader none{"learner-1", 0, 3, 0, 0, 1.0f, 2, 20, 30};
  CHECK(core.accept(none, honest, 3) == RejectReason::implausible_claim);
  CHECK(core.rejects().by_reason.at("implausible_claim") == 1);
  CHECK(core.fragment(0).pending.empty());
}

TEST_CASE("syncer core: honest claims merge bit for bit as the claims themselves would") {
  auto core = make_weighted_core("core-honest");
  const int64_t T = configured_tokens_per_step(testing::tiny_options("core-honest-t", "decoupled", 2, 10).setup);
  const std::vector<float> a = {0.3f, -0.7f, 0.11f}, b = {0.05f, 0.2f, -0.9f};
  // Different steps (a straggler's shorter period): weights tokens²/steps = 10T² and 4T².
  REQUIRE_FALSE(core.accept({"learner-0", 0, 1, 10, static_cast<uint64_t>(10 * T), 1.0f}, a, 1).has_value());
  REQUIRE_FALSE(core.accept({"learner-1", 0, 1, 4, static_cast<uint64_t>(4 * T), 1.0f}, b, 1).has_value());
  auto staged = core.stage({0}, 1);
  REQUIRE(staged.ok());
  CHECK(core.claims_corrected() == 0);
  // The syncer's streaming merge in arrival order, with the weights of the claims.
  using archipelago::training::MergeRule;
  archipelago::training::MergeAccumulator claimed(3, MergeRule::token_weighted);
  claimed.add(a.data(), archipelago::training::merge_weight(10 * T, 10, MergeRule::token_weighted), 0);
  claimed.add(b.data(), archipelago::training::merge_weight(4 * T, 4, MergeRule::token_weighted), 0);
  auto merged = claimed.result();
  REQUIRE(merged.ok());
  auto state = archipelago::training::zero_outer_state(3, false);
  std::vector<float> expected = {0, 0, 0};
  archipelago::training::nesterov_step(state, expected.data(), merged->data(), 1.0, 0.0);
  CHECK(staged->find(0)->next.parameters == expected);
}

TEST_CASE("syncer core: a merge that comes out non-finite is dropped, counted, and the committed value stays") {
  // Fragments {1, 1, 1} and {2, 2}; mean, lr 1, momentum 0, 1 learner; without the absolute bound
  // and the growth bound, which would stop this push long before it overflows (tested below).
  auto core = make_core("decoupled", 1, 1, [](RuntimeOptions& o) {
    o.setup.outer.screen_max_ratio = 1e300;
    o.setup.outer.max_norm_growth = 1e300;
  });
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  const float huge = 3e38f;  // finite, as every check on the way in sees it
  const std::vector<float> push = {-huge, -huge, -huge};
  REQUIRE_FALSE(core.accept({"learner-0", 0, 1, 10, 100, 1.0f, 0, 0, 10}, push, 1).has_value());
  merge_and_commit(core, {0}, 1);  // θ = 1 + 3e38: still finite
  REQUIRE(core.fragment(0).version == 2);
  const FragmentState before = without_pending(core.fragment(0));
  // The same push again overflows θ_p; fragment 1's honest update is merged all the same.
  REQUIRE_FALSE(core.accept({"learner-0", 0, 2, 10, 100, 1.0f, 1, 10, 20}, push, 2).has_value());
  REQUIRE_FALSE(core.accept({"learner-0", 1, 1, 10, 100, 1.0f, 0, 0, 20}, {0.5f, 0.5f}, 2).has_value());
  auto staged = core.stage({0, 1}, 2);
  REQUIRE_MESSAGE(staged.ok(), (staged.ok() ? "" : staged.error().to_string()));
  CHECK(staged->fragment_ids() == std::vector<int>{1});
  core.seal(*staged, 2);
  CHECK(staged->manifest.fragment_versions[0] == 2);
  landed(core, *staged, 2);
  CHECK(core.fragment(1).parameters[0] == doctest::Approx(1.5));
  check_same_outer_state(core.fragment(0), before);
  CHECK(core.fragment(0).version == 2);
  CHECK(core.fragment(0).pending.empty());  // not merged again and again
  CHECK(core.rejects().by_reason.at("non_finite_merge") == 1);
  CHECK(core.status(3).rejected.at("non_finite_merge") == 1);
  CHECK(core.learners().at("learner-0").contributions_rejected == 1);
  // Alone in a commit, the dropped merge leaves nothing to commit, and no commit in flight.
  REQUIRE_FALSE(core.accept({"learner-0", 0, 2, 10, 100, 1.0f, 2, 20, 30}, push, 3).has_value());
  auto alone = core.stage({0}, 3);
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.error().code == archipelago::ErrorCode::non_finite);
  CHECK_FALSE(core.commit_in_flight());
  check_same_outer_state(core.fragment(0), before);
  CHECK(core.rejects().by_reason.at("non_finite_merge") == 2);
}

TEST_CASE("fragment state: a stage whose θ_p − B_p or B_p is not finite is refused, whatever made it so") {
  FragmentRules rules;
  rules.mode = archipelago::diloco::Mode::decoupled;
  rules.merge = archipelago::training::MergeRule::mean;
  rules.lr = 1.0;
  rules.momentum = 0.0;
  rules.downlink = messages::Codec::int8;
  const float huge = 3e38f;
  // θ_p and B_p finite but far apart (any path that gets there): the downlink cannot carry θ − B.
  FragmentState apart = initial_fragment({huge, 0, 0}, rules);
  apart.broadcast = {-huge, 0, 0};
  apart.version = 2;
  PendingContribution c;
  c.learner_id = "learner-0";
  c.steps = 10;
  c.tokens = 100;
  c.delta = {0, 0, 0};
  apart.pending.push_back(c);
  // A contribution not folded into the running sum cannot be merged: refused, not silently left out.
  auto unfolded = stage_fragment(0, apart, rules);
  REQUIRE_FALSE(unfolded.ok());
  CHECK(unfolded.error().code == archipelago::ErrorCode::invalid_argument);
  apart.sum.add(c.delta.data(), 1.0, 0.0);  // folded, as the syncer folds every contribution before a merge
  auto staged = stage_fragment(0, apart, rules);
  REQUIRE_FALSE(staged.ok());
  CHECK(staged.error().code == archipelago::ErrorCode::non_finite);
  CHECK(staged.error().reason.find("θ_p − B_p") != std::string::npos);
  // Delayed Nesterov's accumulator overflowing between momentum updates, while θ_p stays finite.
  rules.mode = archipelago::diloco::Mode::async;
  rules.outer = archipelago::diloco::OuterRule::delayed_nesterov;
  rules.delayed_every = 4;
  rules.lr = 1e-3;
  rules.downlink = messages::Codec::fp32;
  FragmentState accumulating = initial_fragment({0, 0, 0}, rules);
  accumulating.outer.accumulated = {-huge, 0, 0};
  accumulating.version = 2;
  c.delta = {-huge, 0, 0};
  accumulating.pending.push_back(c);
  auto accumulated = stage_fragment(0, accumulating, rules);
  REQUIRE_FALSE(accumulated.ok());
  CHECK(accumulated.error().reason.find("accumulator") != std::string::npos);
}

TEST_CASE("a stream cut mid-tensor never splices into the next tensor of the same key") {
  using namespace archipelago::messages;
  auto chunks_of = [](float value, std::shared_ptr<std::vector<uint8_t>>& keep) {
    const std::vector<float> values(4096, value);
    keep = std::make_shared<std::vector<uint8_t>>();
    REQUIRE(encode_tensor(Codec::fp32, values.data(), values.size(), *keep).ok());
    auto chunks = split_tensor(Codec::fp32, values.size(), ByteView{keep->data(), keep->size(), keep}, 4096);
    REQUIRE(chunks.ok());
    REQUIRE(chunks->size() == 4);
    return *chunks;
  };
  std::shared_ptr<std::vector<uint8_t>> first_bytes, second_bytes;
  const auto first = chunks_of(1.0f, first_bytes);
  const auto second = chunks_of(2.0f, second_bytes);
  archipelago::actors::TensorInbox inbox;
  // The first tensor's sender is cut after two chunks; the next tensor of the key starts at chunk 0.
  REQUIRE(inbox.add("learner-1/0", first[0]).ok());
  REQUIRE(inbox.add("learner-1/0", first[1]).ok());
  archipelago::actors::TensorInbox::Result last;
  for (const auto& chunk : second) {
    auto r = inbox.add("learner-1/0", chunk);
    REQUIRE(r.ok());
    last = *r;
  }
  REQUIRE(last.complete);
  CHECK(inbox.streams_cut() == 1);
  for (float v : last.values) REQUIRE(v == 2.0f);  // nothing of the cut tensor
}

namespace {

// A core of `learners` learners over one fragment of `n` values (θ = 0), lr 1, momentum 0: a
// commit moves θ by −share·(merged Δ), so θ after a commit is the merge itself.
SyncerCore make_wide_core(const std::string& mode, int learners, int64_t n, const std::string& screen = "refuse",
                          const std::string& merge = "mean") {
  auto o = testing::tiny_options("core-wide", mode, learners, 10);
  without_bounds(o);
  o.setup.outer.merge = merge;
  o.setup.outer.lr = 1.0;
  o.setup.outer.momentum = 0.0;
  o.setup.outer.quorum = learners;
  o.setup.outer.screen = screen;
  SyncerCore core(o, {std::vector<float>(static_cast<size_t>(n), 0.0f)});
  auto initial = core.stage_initial(0);
  landed(core, initial, 0);
  for (int m = 0; m < learners; ++m) REQUIRE(core.join(join_of(learner_id(m)), 0).accepted);
  return core;
}

std::vector<float> gaussian(int64_t n, float sigma, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = g(rng);
  return v;
}

double distance(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s);
}

double norm_of(const std::vector<float>& a) { return distance(a, std::vector<float>(a.size(), 0.0f)); }

}  // namespace

TEST_CASE("syncer core: a round of 16 learners holds one running sum, not 16 updates") {
  const int64_t n = int64_t{1} << 20;  // 4 MiB a copy
  const int64_t copy = n * static_cast<int64_t>(sizeof(float));
  auto core = make_wide_core("sync", 16, n);
  for (uint64_t round = 0; round < 2; ++round) {
    int64_t peak = 0;
    for (int m = 0; m < 16; ++m) {
      UpdateHeader h{learner_id(m), 0, core.latest_version(), 10, 100, 2.0f, round, 0, 10};
      REQUIRE_FALSE(core.accept(h, gaussian(n, 0.01f, 100 * static_cast<unsigned>(round) + m), 1.0 + round).has_value());
      peak = std::max(peak, core.pending_bytes());
      // At most 3 deltas are held, once, until 3 norms are known; then only the running sum.
      if (m >= 2 || round > 0) CHECK(core.pending_bytes() <= copy);
    }
    CHECK(peak <= (round == 0 ? 3 : 1) * copy);
    CHECK(core.fragment(0).pending.size() == 16);
    merge_and_commit(core, {0}, 1.5 + round);
  }
  CHECK(nlohmann::json(core.screening_status())["clipped"] == 0);
  CHECK(core.rejects().total() == 0);
}

TEST_CASE("syncer core: the streaming merge equals the batch merge with updates in every order, late ones included") {
  const int64_t n = 4096;
  std::vector<std::vector<float>> deltas;
  for (unsigned m = 0; m < 4; ++m) deltas.push_back(gaussian(n, 0.01f * (1 + m % 2), m));
  std::vector<int> order{0, 1, 2, 3};
  int orders = 0;
  do {
    // Decoupled, 4 learners arriving in this order; the commit fails once and is sent again as it
    // was, merging all four: θ = −mean Δ (share 1, lr 1, momentum 0).
    auto core = make_wide_core("decoupled", 4, n);
    for (int k = 0; k < 4; ++k) {
      UpdateHeader h{learner_id(order[k]), 0, 1, 10, 100, 2.0f, 0, 0, 10};
      REQUIRE_FALSE(core.accept(h, deltas[order[k]], 1 + 0.1 * k).has_value());
    }
    auto staged = core.stage({0}, 1.5);
    REQUIRE(staged.ok());
    core.commit_failed(*staged, "injected");
    landed(core, *staged, 1.6);
    std::vector<archipelago::training::Contribution> batch;
    for (const auto& d : deltas) batch.push_back({d.data(), 100, 10});
    auto expected = archipelago::training::merge(batch, n, archipelago::training::MergeRule::mean);
    REQUIRE(expected.ok());
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double(core.fragment(0).parameters[i]) + (*expected)[i]));
    CHECK(worst <= 1e-6);
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(orders == 24);

  // A successful commit keeps what arrived after staging for the next one, and only that.
  auto core = make_wide_core("decoupled", 4, n);
  for (int m = 0; m < 3; ++m) {
    REQUIRE_FALSE(core.accept({learner_id(m), 0, 1, 10, 100, 2.0f, 0, 0, 10}, deltas[m], 1).has_value());
  }
  auto staged = core.stage({0}, 1);
  REQUIRE(staged.ok());
  REQUIRE_FALSE(core.accept({learner_id(3), 0, 1, 10, 100, 2.0f, 0, 0, 10}, deltas[3], 1.1).has_value());
  landed(core, *staged, 1.2);
  const std::vector<float> after_first = core.fragment(0).parameters;
  REQUIRE(core.fragment(0).pending.size() == 1);
  CHECK(core.fragment(0).sum.count() == 1);
  merge_and_commit(core, {0}, 1.3);
  // The late one merged alone, as one of the 4 learners expected: θ moves by ¼ of its Δ.
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(double(core.fragment(0).parameters[i]) - (after_first[i] - 0.25 * deltas[3][i])));
  }
  CHECK(worst <= 1e-6);
}

TEST_CASE("syncer core: one learner is one witness: its quick updates never make a median of their own") {
  const int64_t n = 2048;
  auto core = make_wide_core("decoupled", 4, n);
  auto unjudged = [&] {
    int64_t waiting = 0;
    for (const auto& c : core.fragment(0).pending) waiting += c.screened ? 0 : 1;
    return waiting;
  };
  // learner-3 sends three updates 1000 times the honest norm, one period after another, before any
  // other learner has sent: three figures, but one witness.
  for (uint64_t k = 0; k < 3; ++k) {
    UpdateHeader h{learner_id(3), 0, core.latest_version(), 10, 100, 2.0f, k, 10 * k, 10 * k + 10};
    REQUIRE_FALSE(core.accept(h, gaussian(n, 10.0f, 300 + static_cast<unsigned>(k)), 1.0 + 0.1 * k).has_value());
    CHECK(unjudged() == 1);  // one of its deltas waits at most
  }
  auto screening = nlohmann::json(core.screening_status());
  CHECK(screening["held"] == 3);
  CHECK(screening["unscreened"] == 2);  // merged as a round's close merges them, never judged against themselves
  CHECK(screening["clipped"] == 0);
  CHECK(screening["probation_clipped"] == 0);
  // Two honest learners make three witnesses with learner-3: its waiting update is refused.
  for (int m = 0; m < 3; ++m) {
    UpdateHeader h{learner_id(m), 0, core.latest_version(), 10, 100, 2.0f, 0, 0, 10};
    CHECK_FALSE(core.accept(h, gaussian(n, 0.01f, 10 + static_cast<unsigned>(m)), 2.0 + 0.1 * m).has_value());
  }
  CHECK(unjudged() == 0);
  CHECK(core.rejects().by_reason.at("outlier") == 1);
  CHECK(core.learners().at(learner_id(3)).contributions_rejected == 1);
  for (int m = 0; m < 3; ++m) CHECK(core.learners().at(learner_id(m)).contributions_rejected == 0);
}

TEST_CASE("syncer core: screening refuses an update 10^6 times the honest norm, and never screens the honest") {
  const int64_t n = 2048;
  for (int bad_position : {0, 2, 3}) {  // where learner-3 arrives in the first round: held, or screened on arrival
    CAPTURE(bad_position);
    auto core = make_wide_core("sync", 4, n);
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> spread(0.5f, 2.0f);  // honest norms vary 4x between updates
    for (uint64_t round = 0; round < 12; ++round) {
      std::vector<int> arrivals{0, 1, 2};
      arrivals.insert(arrivals.begin() + (bad_position + static_cast<int>(round)) % 4, 3);
      std::vector<float> honest_mean(static_cast<size_t>(n), 0.0f);
      const std::vector<float> before = core.fragment(0).parameters;
      for (int m : arrivals) {
        std::vector<float> delta = gaussian(n, 0.01f * spread(rng), 1000 * static_cast<unsigned>(round) + m);
        if (m == 3) {
          for (auto& v : delta) v *= 1e6f;
        } else {
          for (int64_t i = 0; i < n; ++i) honest_mean[i] += delta[i] / 3.0f;
        }
        UpdateHeader h{learner_id(m), 0, core.latest_version(), 10, 100, 2.0f, round, 0, 10};
        auto verdict = core.accept(h, delta, 1.0 + round);
        if (verdict) CHECK(*verdict == RejectReason::outlier);  // refused on arrival, or held and refused later
        if (verdict) CHECK(m == 3);
      }
      merge_and_commit(core, {0}, 1.5 + round);
      std::vector<float> merged(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) merged[i] = before[i] - core.fragment(0).parameters[i];
      CHECK(distance(merged, honest_mean) <= 0.1 * norm_of(honest_mean));
    }
    const auto screening = nlohmann::json(core.screening_status());
    CHECK(core.rejects().by_reason.at("outlier") == 12);
    CHECK(screening["refused"] == 12);
    CHECK(screening["clipped"] == 0);  // the honest learners were never screened
    CHECK(screening["unscreened"] == 0);
    for (int m = 0; m < 3; ++m) CHECK(core.learners().at(learner_id(m)).contributions_rejected == 0);
    CHECK(core.learners().at(learner_id(3)).contributions_rejected == 12);
  }
  // Without screening the bad update is merged as it is.
  auto open = make_wide_core("sync", 4, n, "none");
  for (int m = 0; m < 4; ++m) {
    std::vector<float> delta = gaussian(n, 0.01f, static_cast<unsigned>(m));
    if (m == 3) {
      for (auto& v : delta) v *= 1e6f;
    }
    REQUIRE_FALSE(open.accept({learner_id(m), 0, 1, 10, 100, 2.0f, 0, 0, 10}, delta, 1).has_value());
  }
  merge_and_commit(open, {0}, 2);
  CHECK(norm_of(open.fragment(0).parameters) > 1e3);
}

TEST_CASE("syncer core: clip scales a large update down to the bound, and the known norms survive a restore") {
  const int64_t n = 1024;
  auto core = make_wide_core("sync", 4, n, "clip");
  for (int m = 0; m < 3; ++m) {
    REQUIRE_FALSE(core.accept({learner_id(m), 0, 1, 10, 100, 2.0f, 0, 0, 10}, gaussian(n, 0.01f, m), 1).has_value());
  }
  // Every update spans steps 0..10, the same learning rates: the screen compares plain norms.
  std::vector<double> honest{norm_of(gaussian(n, 0.01f, 0)), norm_of(gaussian(n, 0.01f, 1)), norm_of(gaussian(n, 0.01f, 2))};
  std::sort(honest.begin(), honest.end());
  const double median = honest[1];
  std::vector<float> big = gaussian(n, 0.01f, 9);
  for (auto& v : big) v *= 1e6f;
  REQUIRE_FALSE(core.accept({learner_id(3), 0, 1, 10, 100, 2.0f, 0, 0, 10}, big, 1).has_value());  // clip never refuses
  CHECK(nlohmann::json(core.screening_status())["clipped"] == 1);
  const double clip = nlohmann::json(core.screening_status())["clip"].get<double>();
  CHECK(core.fragment(0).pending.back().scale == doctest::Approx(clip * median / norm_of(big)).epsilon(1e-4));
  // A restarted syncer knows the norms: the next outsized update is refused on arrival, not held.
  auto restarted = make_wide_core("sync", 4, n, "refuse");
  commit_and_restore(core, {0}, 2, restarted);
  CHECK(nlohmann::json(restarted.screening_status())["median_norm_per_lr"][0].get<double>() > 0);
  CHECK(restarted.accept({learner_id(3), 0, 2, 10, 100, 2.0f, 1, 10, 20}, big, 3) == RejectReason::outlier);
  CHECK(nlohmann::json(restarted.screening_status())["held"] == 0);
}

TEST_CASE("syncer core: an int4 update folded from its codes merges as its decoded values do") {
  const int64_t n = (int64_t{1} << 18) + 3;  // several threads, an odd tail
  for (const std::string rule : {"token_weighted", "rda"}) {
    CAPTURE(rule);
    auto fused = make_wide_core("sync", 4, n, "clip", rule), decoded = make_wide_core("sync", 4, n, "clip", rule);
    std::vector<std::vector<uint8_t>> encoded;
    for (int m = 0; m < 4; ++m) {
      auto delta = gaussian(n, 0.01f * (1 + m), static_cast<unsigned>(m));
      if (m == 3) {
        for (auto& v : delta) v *= 1e3f;  // clipped: the scale must apply to the codes too
      }
      std::vector<uint8_t> bytes;
      REQUIRE(messages::encode_tensor(messages::Codec::int4_uniform, delta.data(), delta.size(), bytes).ok());
      encoded.push_back(std::move(bytes));
    }
    // Round 1 holds the first updates until 3 norms are known (as their codes, or decoded when they
    // came decoded); round 2 folds all from the codes.
    for (uint64_t round = 0; round < 2; ++round) {
      for (int m = 0; m < 4; ++m) {
        UpdateHeader h{learner_id(m), 0, fused.latest_version(), 10, 100, 2.0f, round, 10 * round, 10 * round + 10};
        SyncerCore::Payload codes{messages::Codec::int4_uniform, encoded[m], {}};
        REQUIRE_FALSE(fused.accept(h, std::move(codes), 1.0 + round).has_value());
        auto values = messages::decode_tensor(messages::Codec::int4_uniform, encoded[m].data(), encoded[m].size(),
                                              static_cast<size_t>(n));
        REQUIRE(values.ok());
        REQUIRE_FALSE(decoded.accept(h, std::move(*values), 1.0 + round).has_value());
        if (round == 0 && m == 1) {  // two held: their codes, 1/8 of their fp32 values
          CHECK(nlohmann::json(fused.screening_status())["held"] == 2);
          CHECK(fused.pending_bytes() == static_cast<int64_t>(encoded[0].size() + encoded[1].size()));
          CHECK(decoded.pending_bytes() == 2 * n * static_cast<int64_t>(sizeof(float)));
        }
      }
      CHECK(nlohmann::json(fused.screening_status())["clipped"] == round + 1);
      CHECK(nlohmann::json(decoded.screening_status())["clipped"] == round + 1);
      if (round == 1) CHECK(fused.pending_bytes() == n * static_cast<int64_t>(sizeof(float)));  // the sum alone
      merge_and_commit(fused, {0}, 1.5 + round);
      merge_and_commit(decoded, {0}, 1.5 + round);
      double worst = 0, largest = 0;
      for (int64_t i = 0; i < n; ++i) {
        worst = std::max(worst, std::abs(double(fused.fragment(0).parameters[i]) - decoded.fragment(0).parameters[i]));
        largest = std::max(largest, std::abs(double(decoded.fragment(0).parameters[i])));
      }
      CHECK(largest > 0);
      CHECK(worst <= 1e-6 * largest);
    }
  }
  // Codes whose scale would decode to Inf are refused as non_finite and change nothing.
  auto core = make_wide_core("sync", 4, 64, "refuse");
  std::vector<float> delta(64, 0.01f);
  std::vector<uint8_t> bytes;
  REQUIRE(messages::encode_tensor(messages::Codec::int4_uniform, delta.data(), 64, bytes).ok());
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(bytes.data(), &inf, 4);
  SyncerCore::Payload poisoned{messages::Codec::int4_uniform, bytes, {}};
  CHECK(core.accept({learner_id(0), 0, 1, 10, 100, 2.0f, 0, 0, 10}, std::move(poisoned), 1) == RejectReason::non_finite);
  CHECK(core.fragment(0).pending.empty());
  CHECK(core.rejects().by_reason.at("non_finite") == 1);
}

TEST_CASE("syncer core: a shard merges and accepts only the fragments it owns, another's are refused as not_owner") {
  auto o = testing::tiny_options("core-shard", "decoupled", 1, 10);
  o.setup.outer.quorum = 1;
  o.syncer.grace_max_s = 0;
  o.shard = {1, 2};  // owns fragment 1 of {0, 1}
  SyncerCore core(o, {{0, 0}, {0, 0}});
  auto initial = core.stage_initial(0);
  core.seal(initial, 0);
  const auto entry_at_1 = initial.manifest.outer_state[0];
  core.commit_succeeded(initial, 0);
  // Version 1 stored fragment 0 whole; the shard keeps none of its values after that.
  CHECK(core.fragment(0).parameters.empty());
  CHECK(core.fragment(0).broadcast.empty());
  CHECK(core.fragment(0).outer.momentum.empty());
  CHECK(core.fragment(0).numel == 2);
  CHECK(core.fragment(1).parameters.size() == 2);
  REQUIRE(core.join(join_of("learner-0"), 0).accepted);
  // Fragment 0 belongs to shard 0: its update is refused before a byte of it is kept...
  auto header = update_of("learner-0", 0, 2);
  CHECK(core.screen("learner-0", 10, header) == RejectReason::not_owner);
  // ... and refused at accept too, counted, with nothing pending.
  UpdateHeader h0{"learner-0", 0, core.fragment(0).version, 10, 100, 1.0f, 0};
  CHECK(core.accept(h0, {1.0f, 1.0f}, 1) == RejectReason::not_owner);
  CHECK(core.fragment(0).pending.empty());
  CHECK(core.rejects().by_reason.at("not_owner") == 1);  // screen() is counted by the actor
  // Its own fragment merges as in an unsharded run.
  CHECK(core.screen("learner-0", 11, update_of("learner-0", 1, 2)) == std::nullopt);
  UpdateHeader h1{"learner-0", 1, core.fragment(1).version, 10, 100, 1.0f, 0};
  CHECK_FALSE(core.accept(h1, {1.0f, 1.0f}, 1).has_value());
  CHECK(ready_now(core, 1) == std::vector<int>{1});
  // Later records say of fragment 0 what version 1 stored, so a restarted shard restores from them.
  SyncerCore fresh(o, {{0, 0}, {0, 0}});
  auto staged = core.stage({1}, 1);
  REQUIRE(staged.ok());
  core.seal(*staged, 1);
  CHECK(staged->manifest.outer_state[0] == entry_at_1);
  auto manifest = staged->manifest;
  core.commit_succeeded(*staged, 1);
  CHECK(core.status(1).fragment_commits == std::vector<int64_t>{0, 1});
  CHECK(core.status(1).shard.fragments == std::vector<int>{1});
  // What the store holds: fragment 0 as version 1 stored it (θ0, zero momentum), fragment 1 as committed.
  const auto stored1 = to_stored(core.fragment(1));
  // (fragment 0's outer state: zero momentum and the work clock's zero accumulator)
  REQUIRE(fresh.restore(core.latest_version(), {{0, 0}, stored1.broadcast}, {{0, 0, 0, 0}, stored1.outer}, manifest).ok());
  CHECK(fresh.fragment(1).broadcast == core.fragment(1).broadcast);
  CHECK(fresh.fragment(0).parameters.empty());  // released again after the restore
}

TEST_CASE("syncer core: the drain's last piece moves θ by its share of a round, with no momentum released") {
  // Decoupled, 4 learners, H = 10, Nesterov 0.7 / 0.9 on the clock of work, a plain mean.
  auto o = testing::tiny_options("core-drain", "decoupled", 4, 10);
  without_bounds(o);  // from θ = 0, any first step is an unbounded growth
  o.setup.outer.merge = "mean";
  o.setup.outer.lr = 0.7;
  o.setup.outer.momentum = 0.9;
  auto core = started_core(o, {{0, 0, 0}, {0, 0}}, 4);
  REQUIRE(core.rules().outer == archipelago::diloco::OuterRule::work_clock);
  // One whole round of fragment 0 in two pieces (2 + 2 learners): the momentum moves once.
  for (int k = 0; k < 4; ++k) {
    UpdateHeader h{"learner-" + std::to_string(k), 0, core.latest_version(), 10, 100, 2.0f, 0, 0, 10};
    REQUIRE_FALSE(core.accept(h, {0.4f, -0.2f, 0.1f}, 1 + k).has_value());
    if (k % 2 == 1) merge_and_commit(core, {0}, 1 + k);
  }
  const auto after_round = core.fragment(0);
  CHECK(after_round.outer.steps == 1);
  CHECK(after_round.outer.work_steps == 0);
  // Nesterov on the round's mean from θ = 0, m = 0: θ = −0.7 (g + 0.9 g).
  CHECK(after_round.parameters[0] == doctest::Approx(-0.7 * 1.9 * 0.4).epsilon(1e-6));
  REQUIRE(after_round.outer.momentum[0] != 0.0f);
  // Three learners finish; the last sends 13 steps alone, the drain's last piece.
  for (int k = 0; k < 3; ++k) core.leave("learner-" + std::to_string(k), true, "finished", 6);
  UpdateHeader last{"learner-3", 0, core.latest_version(), 13, 130, 2.0f, 1, 10, 23};
  const std::vector<float> delta = {0.2f, 0.1f, -0.3f};
  REQUIRE_FALSE(core.accept(last, delta, 7).has_value());
  merge_and_commit(core, {0}, 7);
  const auto& drained = core.fragment(0);
  for (int i = 0; i < 3; ++i) {
    // Its share of a round is 1/4 of the learners expected: θ moves by lr · Δ / 4, a plain step.
    CHECK(drained.parameters[i] - after_round.parameters[i] == doctest::Approx(-0.7 * delta[i] / 4).epsilon(1e-6));
    CHECK(drained.outer.momentum[i] == after_round.outer.momentum[i]);  // no look-ahead, no release
  }
  CHECK(drained.outer.steps == 1);
  CHECK(drained.outer.work_steps == 13);
}

TEST_CASE("syncer core: the grace window holds from a run's first round, seeded by the learner's own step time") {
  auto o = testing::tiny_options("core-first-grace", "decoupled", 2, 10);
  o.setup.outer.quorum = 1;
  o.syncer.grace_gamma = 0.5;
  o.syncer.overlap_steps = 2;
  o.syncer.grace_max_s = 2.0;
  auto core = started_core(o, {{0, 0, 0}, {0, 0}}, 2);
  CHECK(core.grace_s() == 0);
  // The first update of the run: 10 steps in 1 s of compute, so 0.1 s a step and a grace of
  // 0.5 · (2 · 0.1) = 0.1 s, without a second update of the same fragment to time it by.
  UpdateHeader first{"learner-0", 0, core.latest_version(), 10, 100, 2.0f, 0, 0, 10, 1.0};
  REQUIRE_FALSE(core.accept(first, {0.1f, 0.1f, 0.1f}, 5.0).has_value());
  CHECK(core.grace_s() == doctest::Approx(0.1));
  double deadline = -1;
  CHECK(core.ready_fragments(5.0, &deadline).empty());  // the quorum of 1 is reached, the window is open
  CHECK(deadline == doctest::Approx(5.1));
  UpdateHeader second{"learner-1", 0, core.latest_version(), 10, 100, 2.0f, 0, 0, 10, 1.2};
  REQUIRE_FALSE(core.accept(second, {0.3f, 0.3f, 0.3f}, 5.05).has_value());
  REQUIRE(core.ready_fragments(5.05, &deadline) == std::vector<int>{0});  // everyone is in: merged at once
  auto staged = core.stage({0}, 5.05);
  REQUIRE(staged.ok());
  core.seal(*staged, 5.05);
  CHECK(staged->manifest.contributors.size() == 2);  // one merge of both, not the first alone
  core.commit_succeeded(*staged, 5.05);
}

namespace {

double l2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

// A decoupled core of 2 learners (too few for medians) with non-zero fragments, default bounds.
SyncerCore poisoned_run_core() {
  auto o = testing::tiny_options("core-poison", "decoupled", 2, 10);
  o.setup.outer.lr = 0.7;
  o.setup.outer.momentum = 0.9;
  return started_core(o, {{0.5f, -0.3f, 0.2f}, {0.1f, 0.4f}}, 2);
}

// An int8 update of fragment 0 whose values are all `value` (finite: every decode check passes).
SyncerCore::Payload int8_update(float value) {
  std::vector<float> delta(3, value);
  std::vector<uint8_t> bytes;
  REQUIRE(messages::encode_tensor(messages::Codec::int8, delta.data(), delta.size(), bytes).ok());
  return SyncerCore::Payload{messages::Codec::int8, bytes, {}};
}

// θ_p finite, and grown at most outer.max_norm_growth times over the merge from `before_norm`.
void check_sane(const SyncerCore& core, double before_norm) {
  const auto& theta = core.fragment(0).parameters;
  for (float x : theta) REQUIRE(std::isfinite(x));
  CHECK(l2(theta) <= archipelago::training::OuterOptions{}.max_norm_growth * before_norm + 1e-9);
}

}  // namespace

TEST_CASE("syncer core: an update of 1e18 from one token holder never reaches θ whole, first or later") {
  const double theta0 = l2({0.5f, -0.3f, 0.2f});
  SUBCASE("the run's first update") {
    auto core = poisoned_run_core();
    REQUIRE_FALSE(core.accept({"learner-1", 0, 1, 10, 100, 2.0f, 0, 0, 10}, int8_update(1e18f), 1).has_value());
    auto staged = core.stage({0}, 1);
    if (staged.ok()) landed(core, *staged, 1);
    check_sane(core, theta0);
    CHECK(core.screening_status().bounded == 1);
    CHECK(core.screening_status().largest_delta_ratio[0] > 1e17);
    // The honest learner goes on: the run keeps committing.
    REQUIRE_FALSE(core.accept({"learner-0", 0, core.latest_version(), 10, 100, 2.0f, 1, 10, 20},
                              {0.01f, 0.01f, 0.01f}, 2).has_value());
    const auto before = core.latest_version();
    const double norm_before = l2(core.fragment(0).parameters);
    merge_and_commit(core, {0}, 2);
    CHECK(core.latest_version() == before + 1);
    check_sane(core, norm_before);
  }
  SUBCASE("after an honest round, again and again") {
    auto core = poisoned_run_core();
    REQUIRE_FALSE(core.accept({"learner-0", 0, 1, 10, 100, 2.0f, 0, 0, 10}, {0.01f, -0.01f, 0.01f}, 1).has_value());
    merge_and_commit(core, {0}, 1);
    for (int k = 0; k < 5; ++k) {
      const double before = l2(core.fragment(0).parameters);
      REQUIRE_FALSE(core.accept({"learner-1", 0, core.latest_version(), 10, 100, 2.0f, static_cast<uint64_t>(k),
                                 static_cast<uint64_t>(10 * k), static_cast<uint64_t>(10 * k + 10)},
                                int8_update(1e18f), 2 + k).has_value());
      auto staged = core.stage({0}, 2 + k);
      if (staged.ok()) landed(core, *staged, 2 + k);
      const auto& theta = core.fragment(0).parameters;
      for (float x : theta) REQUIRE(std::isfinite(x));
      // Each merge grows ‖θ_p‖ at most outer.max_norm_growth times, or is dropped and counted.
      CHECK(l2(theta) <= archipelago::training::OuterOptions{}.max_norm_growth * before + 1e-9);
    }
    CHECK(core.screening_status().bounded == 5);
  }
  SUBCASE("a merge that would blow θ up is dropped and θ kept") {
    auto o = testing::tiny_options("core-growth", "decoupled", 1, 10);
    o.setup.outer.lr = 1.0;
    o.setup.outer.momentum = 0.0;
    o.setup.outer.screen_max_ratio = 100;  // let the update through the bound: the growth bound stops it
    auto core = started_core(o, {{0.5f, -0.3f, 0.2f}, {0.1f, 0.4f}}, 1);
    REQUIRE_FALSE(core.accept({"learner-0", 0, 1, 10, 100, 2.0f, 0, 0, 10}, {-30.0f, 30.0f, -30.0f}, 1).has_value());
    auto staged = core.stage({0}, 1);
    CHECK_FALSE(staged.ok());
    CHECK(core.rejects().by_reason.at("unsafe_merge") == 1);
    CHECK(core.fragment(0).parameters == std::vector<float>{0.5f, -0.3f, 0.2f});
    CHECK(core.fragment(0).pending.empty());
  }
}

TEST_CASE("syncer core: a learner's first update of a fragment is on probation: clipped to the median") {
  auto o = testing::tiny_options("core-probation", "decoupled", 5, 10);
  o.setup.outer.merge = "mean";
  o.setup.outer.screen_max_ratio = 1e6;  // the medians alone
  auto core = started_core(o, {{0.5f, -0.3f, 0.2f}, {0.1f, 0.4f}}, 5);
  // Three learners of equal figures make the median known.
  for (int k = 0; k < 3; ++k) {
    REQUIRE_FALSE(core.accept({"learner-" + std::to_string(k), 0, 1, 10, 100, 2.0f, 0, 0, 10},
                              {0.01f, 0.01f, 0.01f}, 1).has_value());
  }
  REQUIRE(core.screening_status().median_norm_per_lr[0] > 0);
  // A fourth, new, sends 8 medians: within outer.screen_clip (16) for a known learner, but on
  // probation it is clipped to the median.
  REQUIRE_FALSE(core.accept({"learner-3", 0, 1, 10, 100, 2.0f, 0, 0, 10}, {0.08f, 0.08f, 0.08f}, 2).has_value());
  CHECK(core.screening_status().probation_clipped == 1);
  CHECK(core.screening_status().clipped == 0);  // a newcomer is not counted as an outlier
  const auto& held = core.fragment(0).pending.back();
  CHECK(held.scale == doctest::Approx(1.0 / 8).epsilon(1e-6));
  // Its next update is judged as any known learner's: 8 medians pass.
  REQUIRE_FALSE(core.accept({"learner-3", 0, 1, 10, 100, 2.0f, 1, 10, 20}, {0.08f, 0.08f, 0.08f}, 3).has_value());
  CHECK(core.fragment(0).pending.back().scale == 1.0f);
  CHECK(core.screening_status().probation_clipped == 1);
}

TEST_CASE("syncer core: a sync round waits for a learner that never sends until its deadline, then merges without it and counts it") {
  auto o = testing::tiny_options("core-lurk", "sync", 2, 10);
  o.syncer.sync_round_min_wait_s = 5;
  o.syncer.sync_round_wait_factor = 4;
  auto core = started_core(o, {{0, 0, 0}, {0, 0}}, 2);  // learner-1 joins (and would beat), never sends
  REQUIRE_FALSE(core.accept({"learner-0", 0, 1, 10, 100, 2.0f, 0, 0, 10}, {0.1f, 0.1f, 0.1f}, 10).has_value());
  double deadline = -1;
  CHECK(core.ready_fragments(12, &deadline).empty());
  CHECK(deadline == doctest::Approx(15));  // no round measured yet: sync_round_min_wait_s after the first update
  REQUIRE(core.ready_fragments(15, &deadline) == std::vector<int>{0});
  merge_and_commit(core, {0}, 15);
  CHECK(core.learners().at("learner-1").rounds_missed == 1);
  CHECK(core.learners().at("learner-0").rounds_missed == 0);
  // Both in: merged at once, as before, and the round's spread (2 s) sets the next deadline: 4 x 2 = 8 s.
  REQUIRE_FALSE(core.accept({"learner-0", 1, 1, 10, 100, 2.0f, 0, 0, 10}, {0.1f, 0.1f}, 20).has_value());
  REQUIRE_FALSE(core.accept({"learner-1", 1, 1, 10, 100, 2.0f, 0, 0, 10}, {0.1f, 0.1f}, 22).has_value());
  REQUIRE(core.ready_fragments(22, &deadline) == std::vector<int>{1});
  merge_and_commit(core, {1}, 22);
  REQUIRE_FALSE(core.accept({"learner-0", 1, core.latest_version(), 10, 100, 2.0f, 1, 10, 20}, {0.1f, 0.1f}, 30).has_value());
  CHECK(core.ready_fragments(30, &deadline).empty());
  CHECK(deadline == doctest::Approx(30 + std::max(5.0, 4 * 1.0)));  // median of {0 (alone), 2} = 1: max(5, 4) = 5
}

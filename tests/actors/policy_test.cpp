// Pure decision rules of the actor runtime (actors/policy.hpp, actors/accounting.hpp), table-driven.
#include <vector>

#include <doctest/doctest.h>

#include "actors/accounting.hpp"
#include "actors/policy.hpp"

using namespace archipelago::actors;

TEST_CASE("policy: the fragment schedule staggers fragments by H/P") {
  // P = 4, H = 8: offsets 0, 2, 4, 6.
  CHECK(fragment_offset(0, 4, 8, true) == 0);
  CHECK(fragment_offset(3, 4, 8, true) == 6);
  CHECK(fragment_offset(3, 4, 8, false) == 0);
  struct Row { int64_t step; int fragment; bool due; };
  for (Row r : {Row{8, 0, true}, Row{16, 0, true}, Row{2, 1, true}, Row{10, 1, true}, Row{6, 3, true},
                Row{14, 3, true}, Row{4, 0, false}, Row{8, 1, false}, Row{1, 3, false}, Row{0, 0, false}}) {
    CAPTURE(r.step);
    CAPTURE(r.fragment);
    CHECK(fragment_due(r.step, r.fragment, 4, 8, true) == r.due);
  }
  // Unstaggered (sync): every fragment at multiples of H only.
  for (int p = 0; p < 4; ++p) {
    CHECK(fragment_due(8, p, 4, 8, false));
    CHECK_FALSE(fragment_due(6, p, 4, 8, false));
  }
  // Over a long run every fragment is due exactly once per H steps.
  for (int p = 0; p < 4; ++p) {
    int count = 0;
    for (int64_t s = 1; s <= 80; ++s) count += fragment_due(s, p, 4, 8, true);
    CHECK(count == 10);
  }
}

TEST_CASE("policy: a changed schedule: one epoch is the fixed schedule and a change keeps slots increasing") {
  // One epoch: exactly fragment_due and (step − offset_p) / H, staggered or not.
  for (bool staggered : {true, false}) {
    FragmentSchedule fixed(10, 4, staggered);
    for (int64_t step = 0; step < 200; ++step) {
      for (int p = 0; p < 4; ++p) {
        const int64_t offset = fragment_offset(p, 4, 10, staggered);
        CHECK(fixed.due(step, p) == fragment_due(step, p, 4, 10, staggered));
        CHECK(fixed.slot(step, p) == (step > offset ? static_cast<uint64_t>((step - offset) / 10) : 0));
        CHECK(fixed.next_due(step, p) == next_due_step(step, p, 4, 10, staggered));
        CHECK(fixed.period_at(step) == 10);
      }
    }
  }
  // H = 10, then H = 25 after step 57: every fragment is due every 25 steps after it, once per
  // period; slots at due steps strictly increase across the change, and next_due finds the next.
  FragmentSchedule s(10, 4, true);
  REQUIRE(s.change(57, 25).ok());
  CHECK_FALSE(s.change(57, 5).ok());  // not after the last change
  CHECK_FALSE(s.change(80, 0).ok());  // H >= 1
  CHECK(s.period_at(56) == 10);
  CHECK(s.period_at(57) == 25);       // the step after 57 is the new epoch's
  for (int p = 0; p < 4; ++p) {
    CAPTURE(p);
    std::vector<int64_t> due;
    int64_t previous_slot = -1;
    for (int64_t step = 1; step < 300; ++step) {
      if (!s.due(step, p)) continue;
      due.push_back(step);
      const auto slot = static_cast<int64_t>(s.slot(step, p));
      CHECK(slot > previous_slot);
      previous_slot = slot;
    }
    for (size_t i = 1; i < due.size(); ++i) {
      CAPTURE(due[i]);
      CHECK(s.next_due(due[i - 1], p) == due[i]);
      if (due[i] <= 57) CHECK(due[i] - due[i - 1] == 10);
      if (due[i - 1] > 57) CHECK(due[i] - due[i - 1] == 25);
    }
    CHECK(due.front() == fragment_offset(p, 4, 10, true) + (p == 0 ? 10 : 0));
    CHECK(due.back() > 57);
    // The first due step of the new epoch: 57 + its own stagger p·25/4 (fragment 0 after a period).
    int64_t first_new = 0;
    for (int64_t d : due) {
      if (d > 57) {
        first_new = d;
        break;
      }
    }
    CHECK(first_new == 57 + (p == 0 ? 25 : fragment_offset(p, 4, 25, true)));
  }
  // The broadcast form round trips; a schedule that does not start at step 0 is refused.
  auto copy = FragmentSchedule::from_epochs(s.epochs(), 4, true);
  REQUIRE(copy.ok());
  CHECK(copy->epochs() == s.epochs());
  CHECK(copy->slot(123, 2) == s.slot(123, 2));
  CHECK_FALSE(FragmentSchedule::from_epochs({{5, 10}}, 4, true).ok());
  // At most 1024 values of H, what a broadcast may carry.
  FragmentSchedule many(10, 4, true);
  for (int e = 1; e < 1024; ++e) REQUIRE(many.change(e * 100, 10 + e % 7).ok());
  CHECK(many.epochs().size() == 1024);
  CHECK_FALSE(many.change(1024 * 100, 10).ok());
}

TEST_CASE("policy: staleness counts commits of the fragment after the base") {
  std::vector<uint64_t> commits{3, 7, 9, 12};
  auto fresh = check_staleness(12, commits, 12, 2);
  CHECK(fresh.accept);
  CHECK(fresh.staleness == 0);
  auto two = check_staleness(7, commits, 13, 2);
  CHECK(two.accept);
  CHECK(two.staleness == 2);
  auto three = check_staleness(3, commits, 13, 2);
  CHECK_FALSE(three.accept);
  CHECK(three.staleness == 3);
  CHECK(three.reason.find("staleness 3") != std::string::npos);
  auto future = check_staleness(20, commits, 13, 2);
  CHECK_FALSE(future.accept);
  CHECK(future.reason.find("newer") != std::string::npos);
}

TEST_CASE("policy: quorum and grace window") {
  SyncerOptions options;
  options.overlap_steps = 2;
  options.grace_gamma = 0.5;
  options.grace_max_s = 1.0;
  CHECK(grace_window({0.5, 0.1, 0.1}, options) == doctest::Approx(0.4));  // 0.5·(1.0 − 0.2)
  CHECK(grace_window({0.01, 0.5, 0.5}, options) == 0);                    // no room: merge at once
  CHECK(grace_window({10, 0, 0}, options) == doctest::Approx(1.0));       // capped

  PendingFragment none{0, 3, 0, -1};
  CHECK(decide_merge("decoupled", 1, none, 2, 0.5).action == MergeAction::wait);
  PendingFragment one{1, 3, 1, -1};
  CHECK(decide_merge("decoupled", 1, one, 2, 0.5).action == MergeAction::wait);  // below quorum 2
  PendingFragment two{2, 3, 2, 1.0};
  auto waiting = decide_merge("decoupled", 1.2, two, 2, 0.5);
  CHECK(waiting.action == MergeAction::wait_until);
  CHECK(waiting.deadline_s == doctest::Approx(1.5));
  CHECK(decide_merge("decoupled", 1.6, two, 2, 0.5).action == MergeAction::merge_now);
  PendingFragment all{3, 3, 3, 1.0};
  CHECK(decide_merge("decoupled", 1.0, all, 2, 0.5).action == MergeAction::merge_now);
  // The quorum shrinks with the active learners: K = 2 but only one learner is left.
  PendingFragment alone{1, 1, 1, 1.0};
  CHECK(decide_merge("decoupled", 1.0, alone, 2, 0.5).action == MergeAction::merge_now);
  // Sync waits for every active learner, whatever K says.
  PendingFragment sync_two{2, 3, 2, 1.0};
  CHECK(decide_merge("sync", 100, sync_two, 1, 0).action == MergeAction::wait);
  CHECK(decide_merge("sync", 100, all, 1, 0).action == MergeAction::merge_now);
  // Late updates (behind the open round) never make the quorum, but merge when everyone is in.
  PendingFragment late_only{0, 3, 2, -1, 2};
  CHECK(decide_merge("decoupled", 5, late_only, 1, 0).action == MergeAction::wait);
  PendingFragment everyone_late{0, 3, 3, -1, 3};  // one of them may be draining, waiting for this merge
  CHECK(decide_merge("decoupled", 5, everyone_late, 1, 0).action == MergeAction::merge_now);
  PendingFragment one_on_time{1, 3, 3, 4.0, 2};
  CHECK(decide_merge("decoupled", 4.0, one_on_time, 2, 1.0).action == MergeAction::merge_now);  // all in
  PendingFragment left_late{0, 0, 0, -1, 1};
  CHECK(decide_merge("decoupled", 0, left_late, 1, 0).action == MergeAction::merge_now);  // learners that left
  // Contributions from learners that died: nobody left to wait for.
  PendingFragment orphan{2, 0, 0, -1};
  CHECK(decide_merge("sync", 0, orphan, 1, 0).action == MergeAction::merge_now);
  CHECK(decide_merge("async", 0, one, 4, 1).action == MergeAction::merge_now);
}

TEST_CASE("policy: restarts back off exponentially and stop at the intensity limit") {
  RestartOptions o;
  o.max_restarts = 3;
  o.window_s = 10;
  o.backoff_initial_s = 0.1;
  o.backoff_max_s = 0.3;
  auto first = decide_restart(100, {}, o);
  CHECK(first.restart);
  CHECK(first.delay_s == doctest::Approx(0.1));
  auto second = decide_restart(100, {99}, o);
  CHECK(second.delay_s == doctest::Approx(0.2));
  auto third = decide_restart(100, {98, 99}, o);
  CHECK(third.delay_s == doctest::Approx(0.3));  // capped
  auto give_up = decide_restart(100, {97, 98, 99}, o);
  CHECK_FALSE(give_up.restart);
  CHECK(give_up.reason.find("giving up") != std::string::npos);
  // Old restarts fall out of the window.
  CHECK(decide_restart(100, {80, 85, 99}, o).restart);
}

TEST_CASE("policy: the failure detector adapts to each learner's heartbeat history") {
  DetectorOptions o;
  o.heartbeat_s = 0.2;
  o.suspect_factor = 3;
  o.min_timeout_s = 0.5;
  o.max_timeout_s = 30;
  HeartbeatHistory fast, slow, starting;
  CHECK(suspect_timeout(fast, o) == doctest::Approx(30));  // no step yet: start-up gets the maximum
  for (int i = 0; i <= 20; ++i) observe_heartbeat(fast, i * 0.1, i);
  for (int i = 0; i <= 20; ++i) observe_heartbeat(slow, i * 2.0, i);
  CHECK(suspect_timeout(fast, o) < 1.0);
  CHECK(suspect_timeout(slow, o) > 5.0);  // a learner with 2 s steps is not declared dead after 2.4 s
  CHECK_FALSE(check_liveness(slow, 40 + 4.0, o).suspected);
  CHECK(check_liveness(fast, 2.0 + 1.0, o).suspected);
  CHECK_FALSE(check_liveness(HeartbeatHistory{}, 100, o).suspected);
  // Fast beats while joining, then slow steps: one step always fits in the timeout.
  for (int i = 0; i <= 10; ++i) observe_heartbeat(starting, i * 0.1, 0);
  CHECK_FALSE(check_liveness(starting, 1.0 + 20, o).suspected);  // still starting: the maximum applies
  observe_heartbeat(starting, 3.0, 1);
  observe_heartbeat(starting, 5.5, 2);
  CHECK(starting.step_s >= 2.5);  // includes the start-up before step 1
  CHECK(suspect_timeout(starting, o) >= 3 * 2.5);
  CHECK_FALSE(check_liveness(starting, 5.5 + 5.0, o).suspected);
  CHECK(check_liveness(starting, 5.5 + 31, o).suspected);
}

TEST_CASE("goodput ledger: every part from its own measurement, and they add up to the allocated time") {
  // Slot 0: 100 s of one incarnation, 90 s of it in heartbeats: 2 s recovering, 80 s computing,
  // 3 s waiting; the syncer merged 70 s of compute and refused 4 s.
  SlotTimes a;
  a.lifetime_s = 100;
  a.alive_s = 90;
  a.recovery_s = 2;
  a.compute_s = 80;
  a.wait_s = 3;
  a.merged_compute_s = 70;
  a.rejected_compute_s = 4;
  // Slot 1: killed and held down for 30 s, two incarnations living 60 s in all, 5 s paused.
  SlotTimes b;
  b.lifetime_s = 60;
  b.alive_s = 59;
  b.recovery_s = 4;
  b.compute_s = 45;
  b.paused_s = 5;
  b.restarting_s = 30;
  b.merged_compute_s = 40;
  const auto ledger = build_ledger(100, {a, b});
  CHECK(ledger.allocated_s == 200);
  const auto& s0 = ledger.slots[0];
  CHECK(s0.merged == 70);
  CHECK(s0.rejected == 4);
  CHECK(s0.unmerged == doctest::Approx(80 + 10 - 70 - 4));  // the 10 s after the last heartbeat computed too
  CHECK(s0.overhead == doctest::Approx(90 - 2 - 80 - 3));
  CHECK(s0.idle == doctest::Approx(0));
  const auto& s1 = ledger.slots[1];
  CHECK(s1.restarting == 30);
  CHECK(s1.paused == 5);
  CHECK(s1.idle == doctest::Approx(100 - 60 - 30));
  CHECK(ledger.goodput() == doctest::Approx(110.0 / 200));
  // A slot held down X s can have goodput at most 1 - X / (wall · slots), whatever else happened.
  CHECK(ledger.goodput() <= 1 - 30.0 / 200);
  for (const auto& p : ledger.slots) CHECK(p.sum() == doctest::Approx(100).epsilon(1e-12));
  CHECK(std::abs(ledger.seconds.sum() - ledger.allocated_s) < 1e-9);
  // Shares of the allocated time in JSON: goodput plus the badput parts is one.
  const auto j = to_json(ledger);
  double shares = j["goodput"].get<double>();
  for (const auto& [part, share] : j["badput"].items()) shares += share.get<double>();
  CHECK(std::abs(shares - 1) < 1e-9);
  // A slot nobody reported on is idle all the run.
  const auto empty = build_ledger(50, {SlotTimes{}});
  CHECK(empty.slots[0].idle == 50);
  CHECK(empty.goodput() == 0);
  CHECK(ddp_equivalent_bytes(1000, 100, 10) == 10 * 2 * 10 * 4);
}

TEST_CASE("goodput ledger from actor status: a resumed run's earlier merges are not this run's") {
  const nlohmann::json monitor = {
      {"slots", {{"learner-0", {{"times", {{"lifetime_s", 10.0}, {"alive_s", 10.0}, {"compute_s", 8.0}}}}}}}};
  const nlohmann::json syncer = {{"learners", {{"learner-0", {{"compute_merged_s", 107.0}}}}}};
  const nlohmann::json at_start = {{"learners", {{"learner-0", {{"compute_merged_s", 100.0}}}}}};
  const auto ledger = ledger_from_status(10, {"learner-0", "learner-1"}, monitor, syncer, at_start);
  CHECK(ledger.slots[0].merged == doctest::Approx(7));
  CHECK(ledger.slots[0].unmerged == doctest::Approx(1));
  CHECK(ledger.slots[1].idle == 10);
  CHECK(ledger.goodput() == doctest::Approx(7.0 / 20));
}

TEST_CASE("goodput ledger carry: a committed version's value round-trips, and a bad one is refused with its reason") {
  LedgerCarry carry;
  carry.run_started_unix_s = unix_seconds() - 100;
  SlotCarry slot;
  slot.total.lifetime_seconds = 90;
  slot.total.compute_seconds = 70;
  slot.raw.reporter = 0xfedcba9876543210ull;  // above 2^53: kept exactly
  slot.raw.lifetime_seconds = 40;
  slot.raw.incarnation = 3;
  carry.slots["learner-0"] = slot;
  auto back = ledger_carry_from_json(nlohmann::json::parse(to_json(carry).dump()));
  REQUIRE_MESSAGE(back, back.error().reason);
  CHECK(back->run_started_unix_s == carry.run_started_unix_s);
  REQUIRE(back->slots.count("learner-0") == 1);
  const auto& b = back->slots.at("learner-0");
  CHECK(b.raw.reporter == 0xfedcba9876543210ull);
  CHECK(b.raw.incarnation == 3);
  CHECK(b.raw.lifetime_seconds == 40);
  CHECK(b.total.lifetime_seconds == 90);
  CHECK(b.total.compute_seconds == 70);

  auto refused = [](nlohmann::json j, const std::string& why) {
    auto r = ledger_carry_from_json(j);
    REQUIRE_FALSE(r);
    CHECK_MESSAGE(r.error().reason.find(why) != std::string::npos, r.error().reason);
  };
  auto j = to_json(carry);
  refused(nlohmann::json::array(), "not an object");
  auto future = j;
  future["run_started_unix_s"] = unix_seconds() + 3600;
  refused(future, "run_started_unix_s");
  auto negative = j;
  negative["slots"]["learner-0"]["total"]["compute_s"] = -1.0;
  refused(negative, "compute_s");
  auto no_reporter = j;
  no_reporter["slots"]["learner-0"]["raw"].erase("reporter");
  refused(no_reporter, "reporter");
}

TEST_CASE("policy: installing a global fragment replaces, mixes or carries the unsent steps") {
  const std::vector<float> global = {10, 20, 30};
  // The learner sent at θ_ref = {1, 2, 3} and has taken steps since: θ = {1.5, 2, 2}.
  auto install = [&](InstallMode mode, double alpha) {
    std::vector<float> local = {1.5f, 2, 2}, ref = {1, 2, 3};
    install_global(mode, alpha, local.data(), ref.data(), global.data(), 3);
    CHECK(ref == global);  // the next update is measured from the new global in every mode
    return local;
  };
  CHECK(install(InstallMode::replace, 0) == global);
  CHECK(install(InstallMode::mix, 0.5) == std::vector<float>{5.75f, 11, 16});
  // carry: θ_G plus exactly the work since the send ({0.5, 0, −1}), which the next update will carry.
  CHECK(install(InstallMode::carry, 0) == std::vector<float>{10.5f, 20, 29});
  CHECK(install_mode(true, 0) == InstallMode::carry);
  CHECK(install_mode(false, 0) == InstallMode::replace);
  CHECK(install_mode(false, 0.3) == InstallMode::mix);
}

TEST_CASE("policy: next due step agrees with the schedule, dynamic local steps scale with speed") {
  for (int p = 0; p < 4; ++p) {
    for (int64_t step = 0; step < 40; ++step) {
      int64_t expected = step + 1;
      while (!fragment_due(expected, p, 4, 8, true)) ++expected;
      CAPTURE(p);
      CAPTURE(step);
      CHECK(next_due_step(step, p, 4, 8, true) == expected);
    }
  }
  CHECK(next_due_step(0, 2, 4, 8, false) == 8);
  // DyLU: round(H · own / fastest), at least 1; H when unknown or fastest.
  CHECK(dynamic_inner_steps(24, 1000, 1000) == 24);
  CHECK(dynamic_inner_steps(24, 990, 1000) == 24);
  CHECK(dynamic_inner_steps(24, 500, 1000) == 12);
  CHECK(dynamic_inner_steps(24, 333, 1000) == 8);
  CHECK(dynamic_inner_steps(24, 1, 1000) == 1);
  CHECK(dynamic_inner_steps(24, 0, 1000) == 24);
  CHECK(dynamic_inner_steps(24, 800, 0) == 24);
  CHECK(dynamic_inner_steps(24, 1200, 1000) == 24);
}

TEST_CASE("policy: an update is credited with at most kMaxPeriodsPerUpdate periods of configured tokens") {
  constexpr int64_t T = 1024;  // tokens per step
  struct Row { uint64_t steps, tokens; int largest_period; bool accept; int64_t credited_steps; bool corrected; };
  const Row rows[] = {
      {10, 10 * T, 10, true, 10, false},                // honest: as claimed
      {30, 30 * T, 10, true, 30, false},                // three periods waiting for an answer: as claimed
      {10, uint64_t{1} << 40, 10, true, 10, true},      // a token claim is never believed
      {10, 7, 10, true, 10, true},                      // nor one below the steps' worth
      {uint64_t{1} << 40, uint64_t{1} << 50, 10, true, kMaxPeriodsPerUpdate * 10, true},
      {45, 45 * T, 50, true, 45, false},                // the largest H of the schedule bounds it
      {0, 0, 10, false, 0, false},                      // nobody sends 0 steps
  };
  for (const Row& row : rows) {
    CAPTURE(row.steps);
    CAPTURE(row.tokens);
    const CreditedWork w = credit_work(row.steps, row.tokens, row.largest_period, T);
    CHECK(w.accept == row.accept);
    CHECK(w.steps == row.credited_steps);
    CHECK(w.tokens == row.credited_steps * T);
    CHECK(w.corrected == row.corrected);
    CHECK(w.reason.empty() == (row.accept && !row.corrected));
  }
  FragmentSchedule schedule(10, 2, true);
  CHECK(schedule.largest_period() == 10);
  REQUIRE(schedule.change(100, 50).ok());
  REQUIRE(schedule.change(200, 5).ok());
  CHECK(schedule.largest_period() == 50);
  archipelago::training::ReferenceSetup setup;
  setup.inner.batch_size = 8;
  setup.model.seq_len = 32;
  setup.run.learners = 4;
  setup.run.mode = "decoupled";
  CHECK(configured_tokens_per_step(setup) == 256);
  setup.run.mode = "ddp";  // one learner averaging the batches of every shard
  CHECK(configured_tokens_per_step(setup) == 1024);
}

// diloco/merge_rules: credited work, the staleness bound, the grace window and the merge decision per mode. Table-driven where it fits.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "diloco/mode.hpp"
#include "diloco/schedule.hpp"
#include "diloco/merge_rules.hpp"

using namespace archipelago::diloco;

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
  CHECK(decide_merge(Mode::decoupled, 1, none, 2, 0.5).action == MergeAction::wait);
  PendingFragment one{1, 3, 1, -1};
  CHECK(decide_merge(Mode::decoupled, 1, one, 2, 0.5).action == MergeAction::wait);  // below quorum 2
  PendingFragment two{2, 3, 2, 1.0};
  auto waiting = decide_merge(Mode::decoupled, 1.2, two, 2, 0.5);
  CHECK(waiting.action == MergeAction::wait_until);
  CHECK(waiting.deadline_s == doctest::Approx(1.5));
  CHECK(decide_merge(Mode::decoupled, 1.6, two, 2, 0.5).action == MergeAction::merge_now);
  PendingFragment all{3, 3, 3, 1.0};
  CHECK(decide_merge(Mode::decoupled, 1.0, all, 2, 0.5).action == MergeAction::merge_now);
  // The quorum shrinks with the active learners: K = 2 but only one learner is left.
  PendingFragment alone{1, 1, 1, 1.0};
  CHECK(decide_merge(Mode::decoupled, 1.0, alone, 2, 0.5).action == MergeAction::merge_now);
  // Sync waits for every active learner, whatever K says.
  PendingFragment sync_two{2, 3, 2, 1.0};
  CHECK(decide_merge(Mode::sync, 100, sync_two, 1, 0).action == MergeAction::wait);
  CHECK(decide_merge(Mode::sync, 100, all, 1, 0).action == MergeAction::merge_now);
  // Late updates (behind the open round) never make the quorum, but merge when everyone is in.
  PendingFragment late_only{0, 3, 2, -1, 2};
  CHECK(decide_merge(Mode::decoupled, 5, late_only, 1, 0).action == MergeAction::wait);
  PendingFragment everyone_late{0, 3, 3, -1, 3};  // one of them may be draining, waiting for this merge
  CHECK(decide_merge(Mode::decoupled, 5, everyone_late, 1, 0).action == MergeAction::merge_now);
  PendingFragment one_on_time{1, 3, 3, 4.0, 2};
  CHECK(decide_merge(Mode::decoupled, 4.0, one_on_time, 2, 1.0).action == MergeAction::merge_now);  // all in
  PendingFragment left_late{0, 0, 0, -1, 1};
  CHECK(decide_merge(Mode::decoupled, 0, left_late, 1, 0).action == MergeAction::merge_now);  // learners that left
  // Contributions from learners that died: nobody left to wait for.
  PendingFragment orphan{2, 0, 0, -1};
  CHECK(decide_merge(Mode::sync, 0, orphan, 1, 0).action == MergeAction::merge_now);
  CHECK(decide_merge(Mode::async, 0, one, 4, 1).action == MergeAction::merge_now);
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
}

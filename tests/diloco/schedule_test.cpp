// diloco/schedule: the staggered fragment schedule, its changes of H, and dynamic local steps. Table-driven where it fits.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "diloco/schedule.hpp"

using namespace archipelago::diloco;

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

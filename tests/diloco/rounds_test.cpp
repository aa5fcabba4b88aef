// diloco/rounds: the on-time slot, the quorum of a round, the tally decide_merge reads, the quorum time and a merge's share.
#include <set>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "diloco/rounds.hpp"

using namespace archipelago::diloco;

TEST_CASE("rounds: an update counts on time from the open round, or the leading active learner's next slot") {
  CHECK(on_time_round(6, -1) == 6);  // no active learner sent a slot yet: the open round
  CHECK(on_time_round(6, 9) == 6);   // the leader is ahead: the open round
  CHECK(on_time_round(6, 5) == 6);   // the leader's next slot is the open round
  CHECK(on_time_round(6, 2) == 3);   // every learner that kept the schedule is gone: nobody waits for them
}

TEST_CASE("rounds: the quorum is outer.quorum, at most the active learners, at least one") {
  CHECK(round_quorum(2, 3) == 2);
  CHECK(round_quorum(3, 1) == 1);
  CHECK(round_quorum(2, 0) == 1);
  CHECK(round_quorum(0, 4) == 1);
}

TEST_CASE("rounds: the tally counts distinct learners, late ones apart, and the active ones among them") {
  const std::vector<PendingArrival> pending{
      {"learner-0", true, 1.0}, {"learner-0", false, 1.5}, {"learner-1", false, 2.0},
      {"learner-2", true, 2.5},  // dead since it sent this
  };
  const std::set<std::string> active{"learner-0", "learner-1", "learner-3"};
  const auto tally = tally_pending(pending, active, 4.0);
  CHECK(tally.contributors == 2);         // learner-0 and learner-2 on time
  CHECK(tally.late == 1);                 // learner-1 only late
  CHECK(tally.active_learners == 3);
  CHECK(tally.contributors_active == 2);  // learner-0 and learner-1; learner-3 has nothing pending
  CHECK(tally.quorum_reached_s == 4.0);
  CHECK(tally_pending({}, active, -1).contributors == 0);
}

TEST_CASE("rounds: the quorum time runs from the first on-time arrival and is measured once") {
  const std::vector<PendingArrival> one{{"learner-1", false, 0.5}, {"learner-0", true, 1.0}};
  auto below = quorum_time(one, -1, 2, 3.0);
  CHECK(below.reached_s == -1);
  CHECK(below.wait_s == -1);
  const std::vector<PendingArrival> two{{"learner-1", false, 0.5}, {"learner-0", true, 1.0}, {"learner-2", true, 2.0}};
  auto reached = quorum_time(two, -1, 2, 3.0);
  CHECK(reached.reached_s == 3.0);
  CHECK(reached.wait_s == doctest::Approx(2.0));  // from learner-0's arrival; the late one does not count
  auto again = quorum_time(two, 3.0, 2, 4.0);
  CHECK(again.reached_s == 3.0);  // stays once reached
  CHECK(again.wait_s == -1);
  const std::vector<PendingArrival> same_learner{{"learner-0", true, 1.0}, {"learner-0", true, 2.0}};
  CHECK(quorum_time(same_learner, -1, 2, 3.0).reached_s == -1);  // one learner twice is one of two
  CHECK(quorum_time({}, 3.0, 1, 4.0).reached_s == -1);           // merged or dropped: the round starts over
}


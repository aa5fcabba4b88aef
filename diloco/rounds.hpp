// The rules of one fragment's round that the syncer applies around decide_merge (merge_rules.hpp),
// on plain values: the schedule slot an update must reach to count for the open round, the quorum
// of a round, the tally of pending contributions decide_merge reads and when the quorum was reached
// (the share a merge counts for is actors/fragment_state.hpp's commit_share). Decoupled mode runs numbered rounds
// per fragment; the syncer gathers the inputs (actors/syncer_merge.hpp) and acts on the answers.
// Pure; any thread.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "diloco/merge_rules.hpp"

namespace archipelago::diloco {

// The lowest schedule slot that counts for the quorum of a fragment's open round: normally the
// open round itself. When every learner that kept the schedule has gone, the ones left are all
// behind it: the leading active learner's next slot (`leading_slot` + 1) opens the round instead, so
// the run never waits for the dead. `leading_slot` < 0: no active learner sent one yet.
uint64_t on_time_round(uint64_t open_round, int64_t leading_slot);

// The quorum of a round: `quorum` (outer.quorum), at most the active learners, at least 1.
int round_quorum(int quorum, int active_learners);

// One pending contribution as the round rules see it.
struct PendingArrival {
  std::string learner_id;
  bool on_time = true;  // counts towards the quorum of the open round
  double arrived_s = 0;
};

// What decide_merge reads of a fragment: distinct on-time learners, distinct learners with only
// late contributions, the active learners and how many of them have anything pending.
PendingFragment tally_pending(const std::vector<PendingArrival>& pending, const std::set<std::string>& active,
                              double quorum_reached_s);

// When the round's on-time contributors reached `quorum` (round_quorum): `reached_s` stays once
// set, becomes `now_s` the first time there are enough, and −1 when nothing on time is pending (a
// merge took them, or they were dropped). `wait_s` (−1: none) is, when the quorum was reached just
// now, how long it took from the round's first on-time arrival: the syncer's quorum timing.
struct QuorumTime {
  double reached_s = -1;
  double wait_s = -1;
};
QuorumTime quorum_time(const std::vector<PendingArrival>& pending, double reached_s, int quorum, double now_s);

}  // namespace archipelago::diloco

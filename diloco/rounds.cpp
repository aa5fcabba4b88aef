#include "diloco/rounds.hpp"

#include <algorithm>

namespace archipelago::diloco {

uint64_t on_time_round(uint64_t open_round, int64_t leading_slot) {
  if (leading_slot < 0) return open_round;
  return std::min<uint64_t>(open_round, static_cast<uint64_t>(leading_slot) + 1);
}

int round_quorum(int quorum, int active_learners) {
  return std::max(1, std::min(quorum, active_learners));
}

PendingFragment tally_pending(const std::vector<PendingArrival>& pending, const std::set<std::string>& active,
                              double quorum_reached_s) {
  std::set<std::string> on_time, any;
  PendingFragment tally;
  for (const auto& c : pending) {
    any.insert(c.learner_id);
    if (c.on_time) on_time.insert(c.learner_id);
    if (tally.first_arrival_s < 0 || c.arrived_s < tally.first_arrival_s) tally.first_arrival_s = c.arrived_s;
  }
  tally.contributors = static_cast<int>(on_time.size());
  tally.late = static_cast<int>(any.size() - on_time.size());
  tally.active_learners = static_cast<int>(active.size());
  for (const auto& id : any) tally.contributors_active += active.count(id) ? 1 : 0;
  tally.quorum_reached_s = quorum_reached_s;
  return tally;
}

QuorumTime quorum_time(const std::vector<PendingArrival>& pending, double reached_s, int quorum, double now_s) {
  std::set<std::string> on_time;
  double first_on_time_s = -1;  // the round's quorum time runs from its first on-time arrival
  for (const auto& c : pending) {
    if (!c.on_time) continue;
    on_time.insert(c.learner_id);
    if (first_on_time_s < 0 || c.arrived_s < first_on_time_s) first_on_time_s = c.arrived_s;
  }
  if (on_time.empty()) return {};
  if (reached_s >= 0 || static_cast<int>(on_time.size()) < quorum) return {reached_s, -1};
  return {now_s, now_s - first_on_time_s};
}

}  // namespace archipelago::diloco

#include "storage/retention.hpp"

namespace archipelago::storage {

RetentionDecision plan_retention(const std::set<uint64_t>& versions, const std::set<uint64_t>& pinned,
                                 const RetentionPolicy& policy) {
  RetentionDecision decision;
  if (policy.keep_last == 0 || versions.size() <= policy.keep_last) {
    decision.reason = "nothing to drop: " + std::to_string(versions.size()) + " versions, keep_last " +
                      std::to_string(policy.keep_last);
    return decision;
  }
  // Everything older than the keep_last-th newest is a candidate; pins rescue candidates.
  size_t candidates = versions.size() - policy.keep_last;
  size_t rescued = 0;
  auto it = versions.begin();
  for (size_t i = 0; i < candidates; ++i, ++it) {
    if (pinned.count(*it)) {
      ++rescued;
      continue;
    }
    decision.drop.push_back(*it);
  }
  decision.reason = "keep_last " + std::to_string(policy.keep_last) + ": dropping " +
                    std::to_string(decision.drop.size()) + " of " + std::to_string(versions.size()) +
                    " versions, " + std::to_string(rescued) + " older ones kept by pins";
  return decision;
}

}  // namespace archipelago::storage

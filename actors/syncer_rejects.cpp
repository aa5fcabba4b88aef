#include "actors/syncer_rejects.hpp"

namespace archipelago::actors {

const char* to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::stale: return "stale";
    case RejectReason::duplicate: return "duplicate";
    case RejectReason::unknown_learner: return "unknown_learner";
    case RejectReason::wrong_shape: return "wrong_shape";
    case RejectReason::non_finite: return "non_finite";
    case RejectReason::malformed: return "malformed";
    case RejectReason::unauthenticated: return "unauthenticated";
    case RejectReason::implausible_claim: return "implausible_claim";
    case RejectReason::non_finite_merge: return "non_finite_merge";
    case RejectReason::outlier: return "outlier";
    case RejectReason::not_owner: return "not_owner";
    case RejectReason::unsafe_merge: return "unsafe_merge";
  }
  return "unknown";
}

RejectReason reject_reason_of(const Error& error) {
  return error.code == ErrorCode::non_finite ? RejectReason::non_finite : RejectReason::malformed;
}

RejectCounters::RejectCounters() {
  for (RejectReason r : kRejectReasons) by_reason[to_string(r)] = 0;
}

int64_t RejectCounters::total() const {
  int64_t sum = 0;
  for (const auto& [_, n] : by_reason) sum += n;
  return sum;
}

void RejectCounters::restore(const std::map<std::string, int64_t>& rejected) {
  for (const auto& [reason, n] : rejected) by_reason[reason] = n;
}

}  // namespace archipelago::actors

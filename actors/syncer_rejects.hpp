// Why the syncer refuses a learner's update or join, and the counters of those refusals: the
// classes every reject counter, event and status names (SyncerCore::count_reject counts them, once
// per refusal). Values only; any thread, one owner.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace archipelago::actors {

// Why an update was refused; each class has its own counter. implausible_claim: it claims 0 inner
// steps (diloco/merge_rules.hpp, credit_work). non_finite_merge: the merge it was part of came out
// NaN/Inf and was dropped with every contribution it held (SyncerCore::stage). not_owner: its
// fragment belongs to another syncer shard (RuntimeOptions::shard).
enum class RejectReason {
  stale, duplicate, unknown_learner, wrong_shape, non_finite, malformed, unauthenticated, implausible_claim,
  non_finite_merge, outlier, not_owner, unsafe_merge,
};
inline constexpr RejectReason kRejectReasons[] = {
    RejectReason::stale,      RejectReason::duplicate,       RejectReason::unknown_learner,
    RejectReason::wrong_shape, RejectReason::non_finite,     RejectReason::malformed,
    RejectReason::unauthenticated, RejectReason::implausible_claim, RejectReason::non_finite_merge,
    RejectReason::outlier,    RejectReason::not_owner,       RejectReason::unsafe_merge,
};
const char* to_string(RejectReason reason);
// What a message or tensor that did not decode is refused as: non_finite or malformed.
RejectReason reject_reason_of(const Error& error);

// One refusal as it is counted: its class, and the work of the learner it wasted (the goodput
// ledger's step equivalents and compute seconds; 0 when nothing was credited yet).
struct Rejection {
  RejectReason reason = RejectReason::malformed;
  double step_equivalents = 0;
  double compute_s = 0;
};

struct RejectCounters {
  RejectCounters();  // every reason listed, at 0: a status names them all
  std::map<std::string, int64_t> by_reason;  // reason name -> count
  int64_t total() const;
  void count(RejectReason reason) { by_reason[to_string(reason)] += 1; }
  // The counts a committed version's accounting carries (`rejected`), read back on restore.
  void restore(const std::map<std::string, int64_t>& rejected);
};

}  // namespace archipelago::actors

// Which committed versions to keep: a pure function of the versions present, the pins and the policy.
//
// Invariant: the newest `keep_last` versions and every pinned version survive; `keep_last == 0` keeps
// everything. The newest version is therefore never dropped while keep_last >= 1, so retention can
// never take away the version a restarting coordinator resumes from. Safe from any thread.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace archipelago::storage {

struct RetentionPolicy {
  uint32_t keep_last = 0;  // 0 = keep every version
};

struct RetentionDecision {
  std::vector<uint64_t> drop;  // ascending
  std::string reason;          // one line for the log and the event table
};

RetentionDecision plan_retention(const std::set<uint64_t>& versions, const std::set<uint64_t>& pinned,
                                 const RetentionPolicy& policy);

}  // namespace archipelago::storage

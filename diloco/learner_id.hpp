// Learner ids: a learner slot's name everywhere it appears (wire messages, status, the ledger,
// manifests, the authorization table): "learner-<index>", index 0 .. M−1 of the run's slots.
// The id is the slot's, not the incarnation's: a restarted learner keeps it. Pure; any thread.
#pragma once

#include <string>
#include <vector>

namespace archipelago::diloco {

std::string learner_id(int index);                // "learner-<index>"
std::vector<std::string> learner_ids(int count);  // learner_id(0 .. count − 1)
// The index of "learner-<n>" (n ≤ 10^7, decimal digits only); −1 for anything else.
int learner_index(const std::string& id);

}  // namespace archipelago::diloco

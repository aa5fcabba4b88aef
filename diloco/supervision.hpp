// The restart policy of one-for-one supervision: after how long a dead child is restarted, and
// when it is given up (max R restarts within T seconds, exponential backoff). A pure function of
// (now, the child's recent restarts, options) -> decision + reason; the supervisor actor acts on it.
#pragma once

#include <string>
#include <vector>

#include "diloco/options.hpp"

namespace archipelago::diloco {

// ---- Restart policy (one-for-one supervision) -----------------------------------------------------
struct RestartDecision {
  bool restart = false;
  double delay_s = 0;
  std::string reason;
};
// `recent_restarts`: times of earlier restarts of this child. Gives up when R restarts already
// happened within the window T; otherwise restarts after backoff_initial · 2^(restarts in window),
// capped at backoff_max.
RestartDecision decide_restart(double now_s, const std::vector<double>& recent_restarts, const RestartOptions& options);

}  // namespace archipelago::diloco

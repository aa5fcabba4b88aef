// The failure detector's rule: a learner's heartbeat history (TCP-style mean and deviation of
// intervals, seconds per inner step) and the silence after which it is suspected. Pure functions
// the failure monitor calls per heartbeat and per check; any thread.
#pragma once

#include <cstdint>
#include <string>

#include "diloco/options.hpp"

namespace archipelago::diloco {

// ---- Failure detector -----------------------------------------------------------------------------
struct HeartbeatHistory {
  int samples = 0;            // intervals observed
  double mean_interval_s = 0; // EMA of intervals
  double deviation_s = 0;     // EMA of |interval − mean|
  double last_s = -1;         // time of the last heartbeat (< 0: none yet)
  int64_t last_step = -1;     // inner step reported by the last heartbeat
  double last_step_s = -1;    // when `last_step` was first reported
  double step_s = 0;          // EMA of seconds per inner step (0: no step seen yet)
};
// Records a heartbeat arriving at `now_s` that reports inner step `step`.
void observe_heartbeat(HeartbeatHistory& history, double now_s, int64_t step = -1);
// Silence after which the learner is suspected: factor · (mean + 4·deviation) of the heartbeat
// intervals, within [min, max]; the maximum until three intervals are known. Heartbeats come from
// the learner's pulse (actors/learner_pulse.hpp), which its inner steps do not hold up, so the
// timeout does not stretch to cover a step: a slow learner is not a silent one.
double suspect_timeout(const HeartbeatHistory& history, const DetectorOptions& options);
struct LivenessDecision {
  bool suspected = false;
  std::string reason;
};
LivenessDecision check_liveness(const HeartbeatHistory& history, double now_s, const DetectorOptions& options);

// Progress, apart from liveness: a learner that beats but whose inner step has not moved for
// stall_factor · its own seconds per step (at least stall_min_s) is stalled. Judged only once two
// steps gave a step time; never a reason to declare it dead.
struct ProgressDecision {
  bool stalled = false;
  std::string reason;
};
ProgressDecision check_progress(const HeartbeatHistory& history, double now_s, const DetectorOptions& options);

}  // namespace archipelago::diloco

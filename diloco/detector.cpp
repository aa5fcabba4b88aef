#include "diloco/detector.hpp"

#include <algorithm>
#include <cmath>

#include "diloco/reason.hpp"

namespace archipelago::diloco {

void observe_heartbeat(HeartbeatHistory& h, double now_s, int64_t step) {
  if (step >= 0 && step != h.last_step) {
    if (h.last_step >= 0 && step > h.last_step && h.last_step_s >= 0) {
      const double per_step = (now_s - h.last_step_s) / static_cast<double>(step - h.last_step);
      h.step_s = h.step_s == 0 ? per_step : h.step_s + 0.125 * (per_step - h.step_s);
    }
    h.last_step = step;
    h.last_step_s = now_s;
  }
  if (h.last_s >= 0) {
    const double interval = std::max(0.0, now_s - h.last_s);
    if (h.samples == 0) {
      h.mean_interval_s = interval;
      h.deviation_s = interval / 2;
    } else {
      constexpr double kGain = 0.125;  // as TCP's RTT estimator
      h.deviation_s += kGain * (std::abs(interval - h.mean_interval_s) - h.deviation_s);
      h.mean_interval_s += kGain * (interval - h.mean_interval_s);
    }
    ++h.samples;
  }
  h.last_s = now_s;
}

double suspect_timeout(const HeartbeatHistory& h, const DetectorOptions& o) {
  if (h.samples < 3) return o.max_timeout_s;
  return std::clamp(o.suspect_factor * (h.mean_interval_s + 4 * h.deviation_s), o.min_timeout_s, o.max_timeout_s);
}

LivenessDecision check_liveness(const HeartbeatHistory& h, double now_s, const DetectorOptions& o) {
  LivenessDecision d;
  if (h.last_s < 0) {
    d.reason = "no heartbeat yet";
    return d;
  }
  const double silent = now_s - h.last_s;
  const double timeout = suspect_timeout(h, o);
  d.suspected = silent > timeout;
  d.reason = reason("silent %.2f s, timeout %.2f s (mean interval %.3f s)", silent, timeout, h.mean_interval_s);
  return d;
}

ProgressDecision check_progress(const HeartbeatHistory& h, double now_s, const DetectorOptions& o) {
  ProgressDecision d;
  if (h.step_s <= 0 || h.last_step_s < 0) return d;
  const double still = now_s - h.last_step_s;
  const double bound = std::max(o.stall_min_s, o.stall_factor * h.step_s);
  d.stalled = still > bound;
  d.reason = reason("no inner step for %.1f s, %.3g s per step (bound %.1f s)", still, h.step_s, bound);
  return d;
}

}  // namespace archipelago::diloco

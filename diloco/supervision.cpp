#include "diloco/supervision.hpp"

#include <algorithm>
#include <cmath>

#include "diloco/reason.hpp"

namespace archipelago::diloco {

RestartDecision decide_restart(double now_s, const std::vector<double>& recent, const RestartOptions& o) {
  RestartDecision d;
  const auto in_window = std::count_if(recent.begin(), recent.end(),
                                       [&](double t) { return now_s - t <= o.window_s; });
  if (in_window >= o.max_restarts) {
    d.reason = reason("%.0f restarts within %.1f s (limit %.0f): giving up", static_cast<double>(in_window),
                      o.window_s, o.max_restarts);
    return d;
  }
  d.restart = true;
  d.delay_s = std::min(o.backoff_max_s, o.backoff_initial_s * std::pow(2.0, static_cast<double>(in_window)));
  d.reason = reason("restart %.0f within window, backoff %.3f s", static_cast<double>(in_window + 1), d.delay_s);
  return d;
}

}  // namespace archipelago::diloco

#include "actors/accounting.hpp"

#include <algorithm>

namespace archipelago::actors {

Goodput compute_goodput(const GoodputInputs& in) {
  Goodput g;
  g.allocated_s = in.wall_s * in.learner_slots;
  if (g.allocated_s <= 0) return g;
  double useful = 0, discarded = 0;
  for (const auto& l : in.learners) {
    const double merged = std::min(l.step_equivalents_merged, static_cast<double>(l.steps_computed));
    const double lost = std::max(0.0, static_cast<double>(l.steps_computed) - merged);
    useful += merged * l.step_s;
    discarded += lost * l.step_s;  // rejected work is part of what was computed and not merged
  }
  g.useful_s = std::min(useful, g.allocated_s);
  g.goodput = g.useful_s / g.allocated_s;
  auto share = [&](double seconds) { return std::clamp(seconds / g.allocated_s, 0.0, 1.0); };
  g.restart = share(in.restart_s);
  g.recovery = share(in.recovery_s);
  g.discarded = share(discarded);
  // Normalize so the parts never exceed 1 (estimates come from separate counters).
  double used = g.goodput + g.restart + g.recovery + g.discarded;
  if (used > 1) {
    const double scale = (1 - g.goodput) / std::max(1e-12, used - g.goodput);
    g.restart *= scale;
    g.recovery *= scale;
    g.discarded *= scale;
    used = 1;
  }
  g.waiting = std::max(0.0, 1 - used);
  return g;
}

nlohmann::json to_json(const Goodput& g) {
  return {{"goodput", g.goodput},
          {"badput", {{"restart", g.restart}, {"recovery", g.recovery}, {"discarded", g.discarded},
                      {"waiting", g.waiting}}},
          {"allocated_s", g.allocated_s},
          {"useful_s", g.useful_s}};
}

int64_t ddp_equivalent_bytes(int64_t tokens, int64_t tokens_per_worker_step, int64_t parameters) {
  if (tokens_per_worker_step <= 0) return 0;
  return tokens / tokens_per_worker_step * 2 * parameters * static_cast<int64_t>(sizeof(float));
}

}  // namespace archipelago::actors

// Screening of learners' updates by norm (`outer.screen`), as a rule on plain numbers. An update's
// figure is its norm per unit of inner learning rate, ‖Δ‖ / Σ lr(t) over its steps: AdamW moves
// each weight by about lr a step, so a Δ made during the warm-up is that much smaller (the default
// run's first updates of a fragment were up to 11x smaller than the next ones by plain norm). A
// figure is judged against the median of the learners' latest honest figures of its fragment: past
// `clip` medians the update is scaled down to `clip` medians, past `refuse` medians (mode refuse) it
// is refused as an outlier. With fewer than kMinKnown figures known the verdict is `hold`: the
// caller keeps the update as it came and judges it later against the known and held figures
// together (the median of 2 honest figures and 1 bad one is honest). Who keeps the figures, holds
// and folds: actors/syncer_screen.hpp. Pure; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace archipelago::diloco {

struct Screening {
  enum class Mode { none, clip, refuse };
  Mode mode = Mode::refuse;
  double clip = 16.0;
  double refuse = 64.0;
  double probation = 1.0;  // a learner's first update of a fragment: clipped past this many medians
  static constexpr size_t kMinKnown = 3;

  enum class Action { pass, hold, clip, refuse };
  struct Verdict {
    Action action = Action::pass;
    double ratio = 0;  // figure ÷ median (0: no median)
    float scale = 1;   // clip: the factor Δ is multiplied by
  };
  // The verdict on a figure `norm` against the median of `known`: hold when fewer than kMinKnown
  // are known; pass when the median is 0 (zero updates: nothing to compare with); mode none passes all.
  // `probation` (a learner with no figure known yet for this fragment): past `probation` medians it
  // is clipped to that, not to `clip` medians (a refusal still applies past `refuse`).
  Verdict judge(double norm, std::vector<double> known, bool probation = false) const;
  static double median(std::vector<double> values);  // 0 when empty
};

// The bound every update is held to, medians known or not (outer.screen_max_ratio): the factor that
// brings ‖Δ_p‖ down to `max_ratio` × ‖θ_p‖ (1 within it). A fragment whose θ_p is all zero has no
// scale to bound by: 1. An honest Δ_p of the default run stays far below (docs/DECISIONS.md).
float absolute_scale(double delta_norm, double theta_norm, double max_ratio);

// `outer.screen`'s values: none, clip, refuse (invalid_argument otherwise), and back.
Expected<Screening::Mode> parse_screen_mode(const std::string& name);
const char* screen_mode_name(Screening::Mode mode);

// The inner steps whose learning rates an update's norm is divided by: the last `count` steps
// before `to_step`, where count is the span it claims (to_step − from_step) bounded by the steps it
// was credited with (at least 1), so that a claimed span cannot make an update look smaller. An
// update that names no span (to ≤ from) counts its credited steps. `first` is never below 0.
struct ScreenedSteps {
  int64_t first = 0;
  int64_t count = 0;
};
ScreenedSteps screened_steps(uint64_t from_step, uint64_t to_step, int64_t credited_steps);

}  // namespace archipelago::diloco

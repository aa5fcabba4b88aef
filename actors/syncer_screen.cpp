#include "actors/syncer_screen.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "actors/events.hpp"
#include "actors/syncer_merge.hpp"
#include "common/log.hpp"
#include "training/replica.hpp"

namespace archipelago::actors {

using diloco::Screening;

NormScreen::NormScreen(Screening rule, double max_ratio, int fragment_count, std::shared_ptr<EventLog> events)
    : rule_(rule),
      max_ratio_(max_ratio),
      events_(std::move(events)),
      honest_(static_cast<size_t>(fragment_count)),
      largest_passed_ratio_(static_cast<size_t>(fragment_count), 0.0),
      largest_delta_ratio_(static_cast<size_t>(fragment_count), 0.0),
      largest_growth_(static_cast<size_t>(fragment_count), 0.0) {}

double NormScreen::figure(double norm, uint64_t from_step, uint64_t to_step, int64_t credited_steps,
                          const training::InnerOptions& inner) {
  const auto steps = diloco::screened_steps(from_step, to_step, credited_steps);
  double sum = 0;
  for (int64_t t = steps.first; t < steps.first + steps.count; ++t) sum += training::scheduled_learning_rate(inner, t);
  return norm / (sum > 0 ? sum : 1.0);  // an inner lr of 0 trains nothing: plain norms
}

Screening::Verdict NormScreen::judge(int p, double figure, const std::string& learner_id) const {
  return rule_.judge(figure, known(p), on_probation(p, learner_id));
}

void NormScreen::bound(int p, PendingContribution& c, double theta_norm, std::vector<float>& delta) {
  if (theta_norm > 0) largest_delta_ratio_[p] = std::max(largest_delta_ratio_[p], c.norm / theta_norm);
  const float scale = diloco::absolute_scale(c.norm, theta_norm, max_ratio_);
  if (scale >= 1.0f) return;
  c.scale *= scale;
  c.screen_norm *= scale;
  for (auto& v : delta) v *= scale;
  bounded_ += 1;
  if (events_) {
    events_->add("bounded", c.learner_id,
                 "fragment " + std::to_string(p) + ": |delta| " + std::to_string(c.norm / theta_norm) + " x |theta|");
  }
  component_logger("syncer")->warn("bounded the update of fragment {} from {}: its norm ({:.4g}) is {:.3g} times the "
                                   "fragment's (outer.screen_max_ratio = {})", p, c.learner_id, c.norm,
                                   c.norm / theta_norm, max_ratio_);
}

void NormScreen::record_growth(int p, double growth) {
  largest_growth_[p] = std::max(largest_growth_[p], growth);
}

bool NormScreen::apply(int p, PendingContribution& c, const Screening::Verdict& verdict, std::vector<float>& delta) {
  c.screened = true;
  if (verdict.action == Screening::Action::refuse) {
    component_logger("syncer")->warn("refused the update of fragment {} from {} as an outlier: its norm ({:.4g}) per "
                                     "unit of inner lr is {:.3g} times the median of the learners' latest honest ones "
                                     "(outer.screen_refuse = {})", p, c.learner_id, c.norm, verdict.ratio, rule_.refuse);
    return false;
  }
  if (verdict.action == Screening::Action::clip) {
    // Clipped for being new (within outer.screen_clip for a known learner) or as an outlier: two counts,
    // so an honest run's newcomers never read as outliers.
    const bool for_being_new = on_probation(p, c.learner_id) && verdict.ratio <= rule_.clip;
    c.scale *= verdict.scale;
    for (auto& v : delta) v *= verdict.scale;
    (for_being_new ? probation_clipped_ : clipped_) += 1;
    if (events_) {
      events_->add(for_being_new ? "probation" : "clipped", c.learner_id,
                   "fragment " + std::to_string(p) + ": norm " + std::to_string(verdict.ratio) + " medians");
    }
    if (for_being_new) {
      component_logger("syncer")->info("clipped the first update of fragment {} from {}, on probation, to outer.screen_probation "
                                       "= {} medians: its norm ({:.4g}) per unit of inner lr is {:.3g} medians", p, c.learner_id,
                                       rule_.probation, c.norm, verdict.ratio);
    } else {
      component_logger("syncer")->warn("clipped the update of fragment {} from {}: its norm ({:.4g}) per unit of inner lr "
                                       "is {:.3g} times the median of the learners' latest honest ones (outer.screen_clip = {})",
                                       p, c.learner_id, c.norm, verdict.ratio, rule_.clip);
    }
    honest_[p][c.learner_id] = c.screen_norm * verdict.scale;
    return true;
  }
  largest_passed_ratio_[p] = std::max(largest_passed_ratio_[p], verdict.ratio);
  honest_[p][c.learner_id] = c.screen_norm;
  return true;
}

bool NormScreen::can_settle(int p, const FragmentState& f) const {
  return with_held(p, f).size() >= Screening::kMinKnown;
}

void NormScreen::settle(int p, FragmentState& f, const FragmentRules& rules,
                        const std::function<void(const PendingContribution&)>& refused) {
  const std::vector<double> figures = with_held(p, f);
  std::vector<PendingContribution> kept;
  for (auto& c : f.pending) {
    if (c.screened) {
      kept.push_back(std::move(c));
      continue;
    }
    auto verdict = rule_.judge(c.screen_norm, figures, on_probation(p, c.learner_id));
    if (verdict.action == Screening::Action::hold) {  // too few figures even with the round's: merged unscreened
      verdict = {};
      unscreened_ += 1;
    }
    std::vector<float> delta = std::move(c.delta);
    std::vector<uint8_t> encoded = std::move(c.encoded);
    c.delta = {};
    c.encoded = {};
    if (!apply(p, c, verdict, delta)) {
      refused(c);
      continue;
    }
    if (!encoded.empty()) fold_encoded(f, c, c.codec, encoded, rules);
    else fold(f, c, std::move(delta), rules);
    kept.push_back(std::move(c));
  }
  f.pending = std::move(kept);
}

ScreeningStatus NormScreen::status(int64_t refused) const {
  ScreeningStatus s;
  s.mode = diloco::screen_mode_name(rule_.mode);
  s.clip = rule_.clip;
  s.refuse = rule_.refuse;
  s.clipped = clipped_;
  s.refused = refused;
  s.held = held_;
  s.unscreened = unscreened_;
  for (size_t p = 0; p < honest_.size(); ++p) s.median_norm_per_lr.push_back(Screening::median(known(static_cast<int>(p))));
  s.largest_passed_ratio = largest_passed_ratio_;
  s.max_ratio = max_ratio_;
  s.bounded = bounded_;
  s.probation_clipped = probation_clipped_;
  s.largest_delta_ratio = largest_delta_ratio_;
  s.largest_norm_growth = largest_growth_;
  return s;
}

void NormScreen::restore_known(const std::vector<std::map<std::string, double>>& norms) {
  for (size_t p = 0; p < honest_.size() && p < norms.size(); ++p) {
    if (norms[p].empty()) continue;
    honest_[p].clear();
    for (const auto& [learner, v] : norms[p]) {
      if (std::isfinite(v) && v >= 0) honest_[p][learner] = v;
    }
  }
}

std::vector<double> NormScreen::known(int p) const {
  std::vector<double> figures;
  for (const auto& [_, figure] : honest_[p]) figures.push_back(figure);
  return figures;
}

std::vector<double> NormScreen::with_held(int p, const FragmentState& f) const {
  std::vector<double> figures = known(p);
  // One figure per learner: a learner's held updates count once (the median of them), and not at
  // all when a figure of its is known, so that one sender's quick updates never make a median alone.
  std::map<std::string, std::vector<double>> held;
  for (const auto& c : f.pending) {
    if (!c.screened && honest_[p].count(c.learner_id) == 0) held[c.learner_id].push_back(c.screen_norm);
  }
  for (auto& [_, values] : held) figures.push_back(Screening::median(std::move(values)));
  return figures;
}

}  // namespace archipelago::actors

// Screening of learners' updates by norm, as the syncer keeps it (the rule itself, on plain
// numbers: diloco/screening.hpp). Per fragment it knows each learner's latest honest figure (‖Δ‖
// per unit of inner learning rate); an arriving update is judged against them and passes, is
// clipped (scaled down, remembered at its clipped size) or refused as `outlier`. Until a fragment
// knows kMinKnown learners' figures an update is held as it came, and judged once the known and
// held figures are kMinKnown learners' (or when its round closes, or its learner sends again)
// against all of them: so at most kMinKnown deltas of a fragment are ever held, one per learner, at
// the start of a run, and runs of 2 learners are not screened. The known
// figures are part of every committed manifest (known_norms → restore_known), so a restarted syncer
// screens from its first update.
//
// Invariant: a figure becomes known only from an update that passed or was clipped, and a learner
// is one witness: its known figure or, until one is known, the median of its held ones; never both,
// never one per update (a learner id is one slot, held by one session at a time). Refusals are
// logged here and counted by the caller (SyncerCore::count_reject). Owned by SyncerCore; one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/fragment_state.hpp"
#include "actors/status.hpp"
#include "diloco/screening.hpp"
#include "training/options.hpp"

namespace archipelago::actors {

class EventLog;  // actors/events.hpp

class NormScreen {
 public:
  // `events` (may be null) hears of every clipped update.
  NormScreen(diloco::Screening rule, double max_ratio, int fragment_count, std::shared_ptr<EventLog> events);

  // An update's figure: its norm ÷ Σ of the inner learning rate over its screened steps
  // (diloco::screened_steps); plain norms when that sum is 0 (an inner lr of 0 trains nothing).
  static double figure(double norm, uint64_t from_step, uint64_t to_step, int64_t credited_steps,
                       const training::InnerOptions& inner);

  // The verdict on an arriving update's figure against fragment p's known figures (hold: too few).
  // A learner none of whose figures of p is known yet is on probation (clipped to the median).
  diloco::Screening::Verdict judge(int p, double figure, const std::string& learner_id) const;
  // The absolute bound (diloco::absolute_scale) before any median: scales `delta` (empty when the
  // update is held as its codes) and c.scale so that ‖Δ_p‖ ≤ max_ratio × ‖θ_p‖; records ‖Δ_p‖ / ‖θ_p‖
  // as it came (the status's largest_delta_ratio: how close honest updates come to the bound).
  void bound(int p, PendingContribution& c, double theta_norm, std::vector<float>& delta);
  // A merge of fragment p made ‖θ_p‖ grow by `growth` (the status's largest, against max_norm_growth).
  void record_growth(int p, double growth);
  // An arriving update was held for want of known figures.
  void count_held() { held_ += 1; }
  // Applies a verdict to `c` (`c.screened` from now): clip scales `delta` (and sets c.scale); a
  // figure that passed or was clipped becomes its learner's known one. False when it is refused
  // (logged; the caller counts it as outlier).
  bool apply(int p, PendingContribution& c, const diloco::Screening::Verdict& verdict, std::vector<float>& delta);
  // Fragment p knows enough figures, with the ones `f` holds, to judge what it holds.
  bool can_settle(int p, const FragmentState& f) const;
  // Judges every held contribution of `f` (fragment p) against the known and held figures (merged
  // unscreened when they are still too few): each is folded into f's sum, or refused, handed to
  // `refused` and removed.
  void settle(int p, FragmentState& f, const FragmentRules& rules,
              const std::function<void(const PendingContribution&)>& refused);

  // Mode, bounds, counts (`refused`: the outlier counter), and per fragment the median and the
  // largest ratio an update passed with (how close honest updates come to being clipped).
  ScreeningStatus status(int64_t refused) const;
  // Per fragment, learner -> known figure: what a committed manifest carries, and back.
  std::vector<std::map<std::string, double>> known_norms() const { return honest_; }
  // Takes the known figures of a committed manifest; a fragment it names no figure of keeps its own,
  // a negative or non-finite figure is ignored.
  void restore_known(const std::vector<std::map<std::string, double>>& norms);

 private:
  std::vector<double> known(int p) const;
  // No figure of the learner's is known for fragment p yet: its update is on probation.
  bool on_probation(int p, const std::string& learner_id) const { return honest_[p].count(learner_id) == 0; }
  // The known figures and those of f's held contributions, one per learner (a learner with a known
  // figure adds none; one with several held adds their median): what a held one is judged against.
  std::vector<double> with_held(int p, const FragmentState& f) const;

  diloco::Screening rule_;
  double max_ratio_ = 0;  // outer.screen_max_ratio
  std::shared_ptr<EventLog> events_;
  std::vector<std::map<std::string, double>> honest_;  // per fragment: learner -> its latest honest figure
  std::vector<double> largest_passed_ratio_;           // per fragment
  std::vector<double> largest_delta_ratio_;            // per fragment: ‖Δ_p‖ / ‖θ_p‖ as received
  std::vector<double> largest_growth_;                 // per fragment: ‖θ_p‖ after ÷ before, of a merge
  int64_t clipped_ = 0;    // outliers (past rule_.clip medians)
  int64_t bounded_ = 0;     // updates brought down to the absolute bound
  int64_t probation_clipped_ = 0;  // first updates of a learner clipped for being new (not in clipped_)
  int64_t held_ = 0;        // updates held for want of known figures
  int64_t unscreened_ = 0;  // held ones merged with fewer than kMinKnown figures known
};

}  // namespace archipelago::actors

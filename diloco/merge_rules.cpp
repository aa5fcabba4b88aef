#include "diloco/merge_rules.hpp"

#include <algorithm>
#include <string>

#include "diloco/reason.hpp"
#include "diloco/screening.hpp"

namespace archipelago::diloco {

CreditedWork credit_work(uint64_t claimed_steps, uint64_t claimed_tokens, int largest_period,
                         int64_t tokens_per_step) {
  CreditedWork w;
  if (claimed_steps == 0) {
    w.reason = "it claims 0 inner steps";
    return w;
  }
  const uint64_t bound = static_cast<uint64_t>(kMaxPeriodsPerUpdate) * static_cast<uint64_t>(std::max(1, largest_period));
  w.accept = true;
  w.steps = static_cast<int64_t>(std::min(claimed_steps, bound));
  w.tokens = w.steps * tokens_per_step;
  if (claimed_steps > bound) {
    w.corrected = true;
    w.reason = "it claims " + std::to_string(claimed_steps) + " inner steps, more than one update carries (" +
               std::to_string(kMaxPeriodsPerUpdate) + " periods of at most " + std::to_string(largest_period) +
               "): credited " + std::to_string(w.steps);
  } else if (claimed_tokens != static_cast<uint64_t>(w.tokens)) {
    w.corrected = true;
    w.reason = "it claims " + std::to_string(claimed_tokens) + " tokens for " + std::to_string(w.steps) +
               " inner steps of " + std::to_string(tokens_per_step) + " tokens: credited " + std::to_string(w.tokens);
  }
  return w;
}

StalenessDecision check_staleness(uint64_t base_version, const std::vector<uint64_t>& commit_versions,
                                  uint64_t latest_version, int max_staleness) {
  StalenessDecision d;
  if (base_version > latest_version) {
    d.reason = "base version " + std::to_string(base_version) + " is newer than the latest version " +
               std::to_string(latest_version);
    return d;
  }
  d.staleness = std::count_if(commit_versions.begin(), commit_versions.end(),
                              [&](uint64_t v) { return v > base_version; });
  d.accept = d.staleness <= max_staleness;
  d.reason = "staleness " + std::to_string(d.staleness) + (d.accept ? " <= " : " > ") + "bound " +
             std::to_string(max_staleness);
  return d;
}

double sync_round_wait(const std::vector<double>& spreads, const SyncerOptions& o) {
  if (spreads.empty()) return o.sync_round_min_wait_s;
  return std::max(o.sync_round_min_wait_s, o.sync_round_wait_factor * Screening::median(spreads));
}

double grace_window(const SyncTimings& t, const SyncerOptions& o) {
  const double room = o.grace_gamma * (o.overlap_steps * t.step_s - t.quorum_s - t.sync_s);
  return std::clamp(room, 0.0, o.grace_max_s);
}

MergeDecision decide_merge(Mode mode, double now_s, const PendingFragment& p, int quorum,
                           double grace_s, double sync_wait_s) {
  MergeDecision d;
  if (p.contributors + p.late == 0) {
    d.reason = "nothing pending";
    return d;
  }
  if (diloco::merge_on_arrival(mode)) {
    d.action = MergeAction::merge_now;
    d.reason = "per-arrival merge";
    return d;
  }
  if (p.active_learners == 0) {
    d.action = MergeAction::merge_now;
    d.reason = "no active learner left to wait for";
    return d;
  }
  // Late ones included: a learner whose late update is pending may be waiting for its merge (a
  // draining learner sends its last work only then), so everyone in never waits for more.
  if (p.contributors_active >= p.active_learners) {
    d.action = MergeAction::merge_now;
    d.reason = "every active learner contributed";
    return d;
  }
  if (diloco::round_barrier(mode)) {
    if (sync_wait_s > 0 && p.first_arrival_s >= 0) {
      const double deadline = p.first_arrival_s + sync_wait_s;
      if (now_s >= deadline) {
        d.action = MergeAction::merge_now;
        d.reason = reason("sync: round deadline (%.1f s) passed with %.0f of %.0f active learners in: merged without "
                          "the rest", sync_wait_s, p.contributors_active, p.active_learners);
        return d;
      }
      d.action = MergeAction::wait_until;
      d.deadline_s = deadline;
    }
    d.reason = reason("sync: %.0f of %.0f active learners contributed", p.contributors_active, p.active_learners);
    return d;
  }
  const int effective = std::max(1, std::min(quorum, p.active_learners));
  if (p.contributors < effective || p.quorum_reached_s < 0) {
    d.reason = reason("below quorum: %.0f of %.0f on time (%.0f late)", p.contributors, effective, p.late);
    return d;
  }
  const double deadline = p.quorum_reached_s + grace_s;
  if (now_s >= deadline) {
    d.action = MergeAction::merge_now;
    d.reason = reason("quorum %.0f reached, grace window %.3f s over", effective, grace_s);
    return d;
  }
  d.action = MergeAction::wait_until;
  d.deadline_s = deadline;
  d.reason = reason("quorum reached, waiting %.3f s more for stragglers", deadline - now_s);
  return d;
}

}  // namespace archipelago::diloco

#include "actors/policy.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace archipelago::actors {
namespace {

std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, fmt, a, b, c);
  return buffer;
}

}  // namespace

int fragment_offset(int fragment, int fragments, int inner_steps, bool staggered) {
  if (!staggered || fragments <= 1) return 0;
  return static_cast<int>(static_cast<int64_t>(fragment) * inner_steps / fragments);
}

bool fragment_due(int64_t step, int fragment, int fragments, int inner_steps, bool staggered) {
  const int64_t offset = fragment_offset(fragment, fragments, inner_steps, staggered);
  if (step <= 0 || step < offset) return false;
  return (step - offset) % inner_steps == 0;  // offset > 0: the first period is shorter
}

int64_t next_due_step(int64_t step, int fragment, int fragments, int inner_steps, bool staggered) {
  int64_t first = fragment_offset(fragment, fragments, inner_steps, staggered);
  if (first == 0) first = inner_steps;
  if (step < first) return first;
  return first + ((step - first) / inner_steps + 1) * inner_steps;
}

FragmentSchedule::FragmentSchedule(int inner_steps, int fragments, bool staggered)
    : epochs_{{0, inner_steps}}, fragments_(std::max(1, fragments)), staggered_(staggered) {}

Expected<FragmentSchedule> FragmentSchedule::from_epochs(std::vector<ScheduleEpoch> epochs, int fragments,
                                                         bool staggered) {
  if (epochs.empty() || epochs[0].from_step != 0 || epochs[0].inner_steps < 1) {
    return make_error(ErrorCode::invalid_argument, "a schedule starts at step 0 with H >= 1");
  }
  FragmentSchedule schedule(epochs[0].inner_steps, fragments, staggered);
  for (size_t e = 1; e < epochs.size(); ++e) {
    if (Status ok = schedule.change(epochs[e].from_step, epochs[e].inner_steps); !ok) return ok.error();
  }
  return schedule;
}

Status FragmentSchedule::change(int64_t from_step, int inner_steps) {
  constexpr size_t kMaxEpochs = 1024;  // what a broadcast may carry (messages/envelope.cpp)
  if (inner_steps < 1) return make_error(ErrorCode::invalid_argument, "H must be >= 1, not " + std::to_string(inner_steps));
  if (epochs_.size() >= kMaxEpochs) {
    return make_error(ErrorCode::invalid_argument, "the schedule already holds " + std::to_string(kMaxEpochs) +
                                                       " values of H: no further change");
  }
  if (from_step <= epochs_.back().from_step) {
    return make_error(ErrorCode::invalid_argument, "a schedule change must start after step " +
                                                       std::to_string(epochs_.back().from_step));
  }
  epochs_.push_back({from_step, inner_steps});
  return {};
}

size_t FragmentSchedule::epoch_of(int64_t step) const {
  size_t e = 0;
  while (e + 1 < epochs_.size() && step > epochs_[e + 1].from_step) ++e;
  return e;
}

bool FragmentSchedule::due(int64_t step, int fragment) const {
  if (epochs_.empty()) return false;
  const auto& epoch = epochs_[epoch_of(step)];
  return fragment_due(step - epoch.from_step, fragment, fragments_, epoch.inner_steps, staggered_);
}

uint64_t FragmentSchedule::slot(int64_t step, int fragment) const {
  if (epochs_.empty()) return 0;
  uint64_t base = 0;
  const size_t owner = epoch_of(step);
  for (size_t e = 0; e <= owner; ++e) {
    const auto& epoch = epochs_[e];
    const int64_t offset = fragment_offset(fragment, fragments_, epoch.inner_steps, staggered_);
    const int64_t t = (e == owner ? step : epochs_[e + 1].from_step) - epoch.from_step;
    const uint64_t within = t > offset ? static_cast<uint64_t>((t - offset) / epoch.inner_steps) : 0;
    base = e == owner ? base + within : base + within + 1;  // the next epoch starts one past its last slot
  }
  return base;
}

int64_t FragmentSchedule::next_due(int64_t step, int fragment) const {
  for (size_t e = epoch_of(step + 1); e < epochs_.size(); ++e) {
    const auto& epoch = epochs_[e];
    const int64_t local = std::max<int64_t>(step, epoch.from_step) - epoch.from_step;
    const int64_t candidate = epoch.from_step + next_due_step(local, fragment, fragments_, epoch.inner_steps, staggered_);
    if (e + 1 == epochs_.size() || candidate <= epochs_[e + 1].from_step) return candidate;
  }
  return step + 1;  // unreachable: the last epoch has no end
}

int FragmentSchedule::period_at(int64_t step) const {
  return epochs_.empty() ? 1 : epochs_[epoch_of(step + 1)].inner_steps;
}

int FragmentSchedule::largest_period() const {
  int largest = 1;
  for (const auto& e : epochs_) largest = std::max(largest, e.inner_steps);
  return largest;
}

int64_t configured_tokens_per_step(const training::ReferenceSetup& setup) {
  const int64_t per_batch = static_cast<int64_t>(setup.inner.batch_size) * setup.model.seq_len;
  return setup.run.mode == "ddp" ? per_batch * setup.run.learners : per_batch;
}

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

int dynamic_inner_steps(int inner_steps, double own, double fastest) {
  if (own <= 0 || fastest <= 0 || own >= fastest) return inner_steps;
  const auto steps = static_cast<int>(std::lround(inner_steps * own / fastest));
  return std::clamp(steps, 1, inner_steps);
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

double grace_window(const SyncTimings& t, const SyncerOptions& o) {
  const double room = o.grace_gamma * (o.overlap_steps * t.step_s - t.quorum_s - t.sync_s);
  return std::clamp(room, 0.0, o.grace_max_s);
}

MergeDecision decide_merge(const std::string& mode, double now_s, const PendingFragment& p, int quorum,
                           double grace_s) {
  MergeDecision d;
  if (p.contributors + p.late == 0) {
    d.reason = "nothing pending";
    return d;
  }
  if (mode == "async" || mode == "ddp") {
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
  if (mode == "sync") {
    d.reason = format("sync: %.0f of %.0f active learners contributed", p.contributors_active, p.active_learners);
    return d;
  }
  const int effective = std::max(1, std::min(quorum, p.active_learners));
  if (p.contributors < effective || p.quorum_reached_s < 0) {
    d.reason = format("below quorum: %.0f of %.0f on time (%.0f late)", p.contributors, effective, p.late);
    return d;
  }
  const double deadline = p.quorum_reached_s + grace_s;
  if (now_s >= deadline) {
    d.action = MergeAction::merge_now;
    d.reason = format("quorum %.0f reached, grace window %.3f s over", effective, grace_s);
    return d;
  }
  d.action = MergeAction::wait_until;
  d.deadline_s = deadline;
  d.reason = format("quorum reached, waiting %.3f s more for stragglers", deadline - now_s);
  return d;
}

InstallMode install_mode(bool carry_unsent, double alpha) {
  if (carry_unsent) return InstallMode::carry;
  return alpha == 0 ? InstallMode::replace : InstallMode::mix;
}

void install_global(InstallMode mode, double alpha, float* local, float* ref, const float* global, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (mode) {
      case InstallMode::replace: local[i] = global[i]; break;
      case InstallMode::mix: local[i] = static_cast<float>(alpha * local[i] + (1 - alpha) * global[i]); break;
      case InstallMode::carry: local[i] = global[i] + (local[i] - ref[i]); break;
    }
    ref[i] = global[i];
  }
}

RestartDecision decide_restart(double now_s, const std::vector<double>& recent, const RestartOptions& o) {
  RestartDecision d;
  const auto in_window = std::count_if(recent.begin(), recent.end(),
                                       [&](double t) { return now_s - t <= o.window_s; });
  if (in_window >= o.max_restarts) {
    d.reason = format("%.0f restarts within %.1f s (limit %.0f): giving up", static_cast<double>(in_window),
                      o.window_s, o.max_restarts);
    return d;
  }
  d.restart = true;
  d.delay_s = std::min(o.backoff_max_s, o.backoff_initial_s * std::pow(2.0, static_cast<double>(in_window)));
  d.reason = format("restart %.0f within window, backoff %.3f s", static_cast<double>(in_window + 1), d.delay_s);
  return d;
}

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
  if (h.step_s <= 0 || h.samples < 3) return o.max_timeout_s;
  const double basis = std::max(h.mean_interval_s + 4 * h.deviation_s, h.step_s);
  return std::clamp(o.suspect_factor * basis, o.min_timeout_s, o.max_timeout_s);
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
  d.reason = format("silent %.2f s, timeout %.2f s (mean interval %.3f s)", silent, timeout, h.mean_interval_s);
  return d;
}

}  // namespace archipelago::actors

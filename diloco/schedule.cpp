#include "diloco/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace archipelago::diloco {

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

int dynamic_inner_steps(int inner_steps, double own, double fastest) {
  if (own <= 0 || fastest <= 0 || own >= fastest) return inner_steps;
  const auto steps = static_cast<int>(std::lround(inner_steps * own / fastest));
  return std::clamp(steps, 1, inner_steps);
}

}  // namespace archipelago::diloco

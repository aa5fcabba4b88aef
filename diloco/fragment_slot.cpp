#include "diloco/fragment_slot.hpp"

#include <cassert>
#include <utility>

#include "diloco/merge_rules.hpp"

namespace archipelago::diloco {

void FragmentSlot::start_over(int64_t step) {
  work_ = UnsentWork{};
  work_.since_step = step;
  restored_ = false;
}

std::vector<float> FragmentSlot::start(const std::vector<float>& global, uint64_t version, int64_t step) {
  start_over(step);
  ref_ = global;
  version_ = version;
  outstanding_ = false;
  return ref_;
}

void FragmentSlot::recover(const std::vector<float>& global, int64_t step) {
  start_over(step);
  ref_ = global;
}

bool FragmentSlot::restore(const SavedWork& saved, int64_t received_until, std::vector<float>& local) {
  if (saved.work.steps > 0 && saved.work.since_step < received_until) return false;
  assert(saved.unsent.size() == local.size());
  for (size_t i = 0; i < local.size(); ++i) local[i] += saved.unsent[i];
  work_ = saved.work;
  restored_ = saved.work.steps > 0;
  return true;
}

SavedWork FragmentSlot::snapshot(std::vector<float> local) const {
  assert(local.size() == ref_.size());
  SavedWork saved{version_, work_, std::move(local)};
  for (size_t i = 0; i < saved.unsent.size(); ++i) saved.unsent[i] -= ref_[i];
  return saved;
}

void FragmentSlot::record_step(double compute_s, int64_t tokens, double loss) {
  work_.steps += 1;
  work_.compute_s += compute_s;
  work_.tokens += tokens;
  work_.loss_sum += loss;
}

std::vector<float> FragmentSlot::pseudo_gradient(const std::vector<float>& local) const {
  assert(local.size() == ref_.size());
  std::vector<float> delta(local.size());
  for (size_t i = 0; i < local.size(); ++i) delta[i] = ref_[i] - local[i];
  return delta;
}

void FragmentSlot::sent(std::vector<float> local, int64_t step) {
  ref_ = std::move(local);
  outstanding_ = true;
  outstanding_base_ = version_;
  outstanding_step_ = step;
  start_over(step);
}

void FragmentSlot::answered(uint64_t version) {
  if (outstanding_ && version > outstanding_base_) outstanding_ = false;
}

void FragmentSlot::install(InstallMode mode, double alpha, std::vector<float>& local, const std::vector<float>& global,
                           uint64_t version) {
  assert(local.size() == ref_.size() && global.size() == ref_.size());
  version_ = version;
  install_global(mode, alpha, local.data(), ref_.data(), global.data(), static_cast<int64_t>(local.size()));
}

void FragmentSlot::rebase(const std::vector<float>& global, uint64_t version) {
  version_ = version;
  ref_ = global;
}

void FragmentSlot::expire_outstanding(int64_t step, int period) {
  if (outstanding_ && step - outstanding_step_ >= kResendAfterPeriods * period) outstanding_ = false;
}

}  // namespace archipelago::diloco

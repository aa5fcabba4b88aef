#include "actors/syncer_merge.hpp"

#include <algorithm>
#include <utility>

#include "common/log.hpp"
#include "training/outer.hpp"

namespace archipelago::actors {
namespace {

double merge_weight_of(const PendingContribution& c, const FragmentRules& rules) {
  return training::merge_weight(c.tokens, std::max<int64_t>(1, c.steps), rules.merge);
}

// f's pending contributions as the round rules see them.
std::vector<diloco::PendingArrival> arrivals_of(const FragmentState& f) {
  std::vector<diloco::PendingArrival> arrivals;
  arrivals.reserve(f.pending.size());
  for (const auto& c : f.pending) arrivals.push_back({c.learner_id, c.on_time, c.arrived_s});
  return arrivals;
}

}  // namespace

Expected<MeasuredUpdate> measure_update(UpdatePayload payload, int64_t numel, const FragmentRules& rules) {
  MeasuredUpdate measured;
  measured.codec = payload.codec;
  // Folded straight from the codes when nothing needs the decoded Δ (Delayed Nesterov keeps it).
  if (!payload.encoded.empty() && rules.outer != diloco::OuterRule::delayed_nesterov) {
    auto norm = messages::quantized_norm(payload.codec, payload.encoded.data(), payload.encoded.size(),
                                         static_cast<size_t>(numel));
    if (!norm) return norm.error();
    measured.norm = *norm;
    measured.encoded = std::move(payload.encoded);
    return measured;
  }
  if (payload.encoded.empty()) {
    measured.delta = std::move(payload.values);
  } else {
    auto values = messages::decode_tensor(payload.codec, payload.encoded.data(), payload.encoded.size(),
                                          static_cast<size_t>(numel));
    if (!values) return values.error();
    measured.delta = std::move(*values);
  }
  if (static_cast<int64_t>(measured.delta.size()) != numel) {
    return make_error(ErrorCode::inconsistent, "the update has the wrong number of elements");
  }
  measured.norm = training::l2_norm(measured.delta.data(), numel, rules.merge_threads);
  return measured;
}

void hold_update(PendingContribution& c, MeasuredUpdate&& update) {
  if (update.fused()) {  // held as its codes (checked by quantized_norm), not decoded
    c.codec = update.codec;
    c.encoded = std::move(update.encoded);
  } else {
    c.delta = std::move(update.delta);
  }
  c.screened = false;
}

void fold_update(FragmentState& f, PendingContribution& c, MeasuredUpdate&& update, const FragmentRules& rules) {
  if (update.fused()) {
    fold_encoded(f, c, update.codec, update.encoded, rules);
  } else {
    fold(f, c, std::move(update.delta), rules);
  }
}

void fold(FragmentState& f, PendingContribution& c, std::vector<float> delta, const FragmentRules& rules) {
  if (rules.outer == diloco::OuterRule::delayed_nesterov) {  // per-arrival steps: not a sum
    c.delta = std::move(delta);
    return;
  }
  f.sum.add(delta.data(), merge_weight_of(c, rules), c.norm * c.scale);
  c.delta = {};
}

void fold_encoded(FragmentState& f, PendingContribution& c, messages::Codec codec,
                  const std::vector<uint8_t>& encoded, const FragmentRules& rules) {
  float* sum = nullptr;
  const float factor = f.sum.add_external(merge_weight_of(c, rules), c.norm * c.scale, &sum);
  // The codes were checked by quantized_norm: this cannot fail.
  (void)messages::accumulate_quantized(codec, encoded.data(), encoded.size(), static_cast<size_t>(f.numel),
                                       factor * c.scale, sum, rules.merge_threads);
}

std::optional<double> mark_quorum(FragmentState& f, int quorum, double now_s) {
  const auto time = diloco::quorum_time(arrivals_of(f), f.quorum_reached_s, quorum, now_s);
  f.quorum_reached_s = time.reached_s;
  if (time.wait_s < 0) return std::nullopt;
  return time.wait_s;
}

diloco::PendingFragment tally_of(const FragmentState& f, const std::set<std::string>& active) {
  return diloco::tally_pending(arrivals_of(f), active, f.quorum_reached_s);
}

void drop_merge(int p, FragmentState& f, const std::string& why) {
  std::set<std::string> contributors;
  for (const auto& c : f.pending) contributors.insert(c.learner_id);
  std::string names;
  for (const auto& id : contributors) names += (names.empty() ? "" : ", ") + id;
  component_logger("syncer")->error("{}: the merge of {} update(s) from {} is dropped (counted as non_finite_merge); "
                                    "fragment {} stays at version {}", why, f.pending.size(), names, p, f.version);
  f.pending.clear();
  f.sum = f.sum.fresh();
}

int64_t pending_bytes(const FragmentState& f) {
  int64_t bytes = f.sum.bytes();
  for (const auto& c : f.pending) bytes += static_cast<int64_t>(c.delta.size() * sizeof(float) + c.encoded.size());
  return bytes;
}

}  // namespace archipelago::actors

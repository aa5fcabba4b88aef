#include "actors/fragment_state.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <utility>

#include <xxhash.h>

namespace archipelago::actors {
namespace {

bool same_contribution(const PendingContribution& a, const PendingContribution& b) {
  return a.learner_id == b.learner_id && a.base_version == b.base_version && a.arrived_s == b.arrived_s;
}

void append(std::vector<float>& out, const std::vector<float>& values) { out.insert(out.end(), values.begin(), values.end()); }

// non_finite naming `what` and its first NaN/Inf element, if `values` holds one.
Status check_finite(int fragment, const char* what, const std::vector<float>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return make_error(ErrorCode::non_finite, "fragment " + std::to_string(fragment) + ": the merge made " + what +
                                                   " non-finite (element " + std::to_string(i) + " is " +
                                                   std::to_string(values[i]) + ")");
    }
  }
  return {};
}

}  // namespace

bool keeps_accumulator(diloco::OuterRule rule) {
  return rule == diloco::OuterRule::work_clock || rule == diloco::OuterRule::delayed_nesterov;
}

double commit_share(const FragmentRules& rules, size_t contributions) {
  if (rules.mode == diloco::Mode::sync || diloco::data_parallel(rules.mode)) return 1.0;
  return static_cast<double>(contributions) / static_cast<double>(std::max(1, rules.expected_learners));
}

FragmentState initial_fragment(std::vector<float> initial, const FragmentRules& rules) {
  FragmentState f;
  f.numel = static_cast<int64_t>(initial.size());
  f.outer = training::zero_outer_state(f.numel, keeps_accumulator(rules.outer));
  f.sum = training::MergeAccumulator(f.numel, rules.merge, rules.merge_threads);
  f.broadcast = initial;
  f.parameters = std::move(initial);
  f.parameters_norm = training::l2_norm(f.parameters.data(), f.numel, rules.merge_threads);
  return f;
}

namespace {
// A value's versions and round without its values or pending contributions.
FragmentState bare_copy(const FragmentState& state) {
  FragmentState copy;
  copy.numel = state.numel;
  copy.version = state.version;
  copy.parameters_norm = state.parameters_norm;
  copy.commit_versions = state.commit_versions;
  copy.next_round = state.next_round;
  copy.sum = state.sum.fresh();
  return copy;
}
}  // namespace

FragmentState without_pending(const FragmentState& state) {
  FragmentState copy = bare_copy(state);
  copy.parameters = state.parameters;
  copy.broadcast = state.broadcast;
  copy.outer = state.outer;
  return copy;
}

Expected<StagedFragment> stage_fragment(int fragment, const FragmentState& current, const FragmentRules& rules) {
  if (current.pending.empty()) return make_error(ErrorCode::invalid_argument, "no pending contribution to merge");
  // A fixed merge order (learner index, then arrival) makes sync mode deterministic.
  std::vector<size_t> order(current.pending.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto& pending = current.pending;
  const bool per_arrival = rules.outer == diloco::OuterRule::delayed_nesterov;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (per_arrival) return pending[a].arrived_s < pending[b].arrived_s;
    return pending[a].learner != pending[b].learner ? pending[a].learner < pending[b].learner
                                                    : pending[a].arrived_s < pending[b].arrived_s;
  });
  StagedFragment staged;
  staged.fragment = fragment;
  staged.next = without_pending(current);
  FragmentState& next = staged.next;
  const double share = commit_share(rules, pending.size());
  staged.share = per_arrival ? 1.0 / std::max(1, rules.delayed_every) : share;
  if (keeps_accumulator(rules.outer) && next.outer.accumulated.size() != static_cast<size_t>(next.numel)) {
    next.outer.accumulated.assign(next.numel, 0.0f);
  }
  const double momentum = training::warmed_momentum(rules.momentum, rules.momentum_warmup, next.outer.steps);
  if (per_arrival) {
    for (size_t i : order) {  // N counts arrivals, not commits
      training::delayed_nesterov_arrival(next.outer, next.parameters.data(), pending[i].delta.data(), rules.lr,
                                         training::warmed_momentum(rules.momentum, rules.momentum_warmup, next.outer.steps),
                                         rules.delayed_every);
    }
  } else {
    if (current.sum.count() != static_cast<int64_t>(pending.size())) {
      return make_error(ErrorCode::invalid_argument,
                        "fragment " + std::to_string(fragment) + ": " + std::to_string(pending.size()) +
                            " pending contribution(s), " + std::to_string(current.sum.count()) +
                            " folded into the running sum (every one must be folded before a merge)");
    }
    auto merged = current.sum.result();
    if (!merged) return merged.error();
    if (share != 1.0) {
      for (auto& v : *merged) v = static_cast<float>(v * share);
    }
    switch (rules.outer) {
      case diloco::OuterRule::average:  // θ ← θ_local (plain checkpoint)
        for (int64_t i = 0; i < next.numel; ++i) next.parameters[i] -= (*merged)[i];
        break;
      case diloco::OuterRule::memoryless: {
        const auto lr = static_cast<float>(rules.lr);
        for (int64_t i = 0; i < next.numel; ++i) next.parameters[i] -= lr * (*merged)[i];
        break;
      }
      case diloco::OuterRule::work_clock: {
        int64_t steps = 0;
        for (const auto& c : pending) steps += c.steps;
        training::work_clock_step(next.outer, next.parameters.data(), merged->data(), steps,
                                  static_cast<int64_t>(std::max(1, rules.expected_learners)) * rules.inner_steps,
                                  rules.lr, momentum);
        break;
      }
      case diloco::OuterRule::nesterov:
      case diloco::OuterRule::per_commit_nesterov:
      case diloco::OuterRule::delayed_nesterov:  // (taken above)
        training::nesterov_step(next.outer, next.parameters.data(), merged->data(), rules.lr, momentum);
        break;
    }
  }
  uint64_t highest_round = next.next_round;
  bool any_round = false;
  for (size_t i : order) {
    PendingContribution c = pending[i];
    c.delta = {};
    c.encoded = {};
    highest_round = std::max(highest_round, c.round);
    any_round = true;
    staged.merged.push_back(std::move(c));
  }
  if (diloco::numbered_rounds(rules.mode) && any_round) next.next_round = std::max(next.next_round, highest_round + 1);
  next.parameters_norm = training::l2_norm(next.parameters.data(), next.numel, rules.merge_threads);
  // Finite updates can still overflow (Δ near FLT_MAX, or θ, momentum and Δ adding up): such a
  // value must never be committed, broadcast or persisted.
  for (const auto& [what, values] : {std::pair{"θ_p", &next.parameters}, std::pair{"the outer momentum", &next.outer.momentum},
                                     std::pair{"Delayed Nesterov's accumulator", &next.outer.accumulated}}) {
    if (Status finite = check_finite(fragment, what, *values); !finite) return finite.error();
  }
  auto downlink = encode_broadcast(rules.downlink, next.parameters, next.broadcast, current.version);
  if (!downlink && downlink.error().code == ErrorCode::non_finite) {
    return make_error(ErrorCode::non_finite, "fragment " + std::to_string(fragment) +
                                                 ": the merge made θ_p − B_p non-finite: " + downlink.error().reason);
  }
  if (!downlink) return downlink.error();
  if (Status finite = check_finite(fragment, "B_p", next.broadcast); !finite) return finite.error();
  staged.downlink = std::move(*downlink);
  return staged;
}

FragmentState commit_fragment(StagedFragment&& staged, FragmentState&& current, uint64_t version, size_t history) {
  FragmentState next = std::move(staged.next);
  next.version = version;
  next.commit_versions.push_back(version);
  if (next.commit_versions.size() > history) {
    next.commit_versions.erase(next.commit_versions.begin(),
                               next.commit_versions.end() - static_cast<std::ptrdiff_t>(history));
  }
  next.sum = std::move(current.sum);  // what arrived after staging (the syncer moved the merged sum out)
  for (auto& c : current.pending) {
    const bool merged = std::any_of(staged.merged.begin(), staged.merged.end(),
                                    [&](const PendingContribution& m) { return same_contribution(m, c); });
    if (merged) continue;
    c.on_time = c.on_time && c.round >= next.next_round;
    next.pending.push_back(std::move(c));
  }
  return next;
}

nlohmann::json stored_entry(const FragmentState& state) {
  nlohmann::json layout = nlohmann::json::array();
  if (state.parameters != state.broadcast) layout.push_back("parameters");
  layout.push_back("momentum");
  if (!state.outer.accumulated.empty()) layout.push_back("accumulated");
  return {{"layout", layout},
          {"arrivals", state.outer.arrivals},
          {"outer_steps", state.outer.steps},
          {"work_steps", state.outer.work_steps},
          {"next_round", state.next_round}};
}

std::vector<const std::vector<float>*> stored_outer_parts(const FragmentState& state) {
  std::vector<const std::vector<float>*> parts;
  const nlohmann::json entry = stored_entry(state);
  for (const auto& part : entry["layout"]) {
    if (part == "parameters") parts.push_back(&state.parameters);
    if (part == "momentum") parts.push_back(&state.outer.momentum);
    if (part == "accumulated") parts.push_back(&state.outer.accumulated);
  }
  return parts;
}

uint64_t stored_outer_digest(const FragmentState& state) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> hash(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(hash.get());
  for (const auto* part : stored_outer_parts(state)) XXH3_64bits_update(hash.get(), part->data(), part->size() * sizeof(float));
  return XXH3_64bits_digest(hash.get());
}

FragmentState take_values(FragmentState& state) {
  FragmentState taken = bare_copy(state);
  taken.parameters = std::move(state.parameters);
  taken.broadcast = std::move(state.broadcast);
  taken.outer = std::move(state.outer);
  drop_values(state);
  return taken;
}

void give_back_values(FragmentState& state, FragmentState&& taken) {
  state.parameters = std::move(taken.parameters);
  state.broadcast = std::move(taken.broadcast);
  state.outer = std::move(taken.outer);
}

void drop_values(FragmentState& state) {
  std::vector<float>().swap(state.parameters);
  std::vector<float>().swap(state.broadcast);
  std::vector<float>().swap(state.outer.momentum);
  std::vector<float>().swap(state.outer.accumulated);
}

StoredFragment to_stored(const FragmentState& state) {
  StoredFragment stored;
  stored.broadcast = state.broadcast;
  stored.entry = stored_entry(state);
  for (const auto* part : stored_outer_parts(state)) append(stored.outer, *part);
  return stored;
}

Expected<FragmentState> from_stored(std::vector<float> broadcast, std::vector<float> outer, const nlohmann::json& entry,
                                    uint64_t version, const FragmentRules& rules) {
  FragmentState f;
  f.numel = static_cast<int64_t>(broadcast.size());
  std::vector<std::string> layout = {"momentum"};
  if (entry.is_object() && entry.contains("layout")) layout = entry["layout"].get<std::vector<std::string>>();
  const size_t n = broadcast.size();
  if (outer.size() != n * layout.size()) {
    return make_error(ErrorCode::inconsistent, "stored outer state holds " + std::to_string(outer.size()) +
                                                   " values, its layout needs " + std::to_string(n * layout.size()));
  }
  f.parameters = broadcast;
  for (size_t k = 0; k < layout.size(); ++k) {
    std::vector<float> part(outer.begin() + k * n, outer.begin() + (k + 1) * n);
    if (layout[k] == "parameters") {
      f.parameters = std::move(part);
    } else if (layout[k] == "momentum") {
      f.outer.momentum = std::move(part);
    } else if (layout[k] == "accumulated") {
      f.outer.accumulated = std::move(part);
    } else {
      return make_error(ErrorCode::inconsistent, "stored outer state has an unknown part '" + layout[k] + "'");
    }
  }
  if (f.outer.momentum.size() != n) f.outer.momentum.assign(n, 0.0f);
  if (keeps_accumulator(rules.outer) && f.outer.accumulated.size() != n) f.outer.accumulated.assign(n, 0.0f);
  if (entry.is_object()) {
    f.outer.arrivals = entry.value("arrivals", int64_t{0});
    f.outer.steps = entry.value("outer_steps", int64_t{0});  // stores before the warm-up: 0 (it only matters with one)
    f.outer.work_steps = entry.value("work_steps", int64_t{0});  // the work clock's round in progress
    f.next_round = entry.value("next_round", uint64_t{0});
  }
  f.broadcast = std::move(broadcast);
  f.parameters_norm = training::l2_norm(f.parameters.data(), f.numel, rules.merge_threads);
  f.version = version;
  f.commit_versions = {version};
  f.sum = training::MergeAccumulator(f.numel, rules.merge, rules.merge_threads);
  return f;
}

}  // namespace archipelago::actors

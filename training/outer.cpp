#include "training/outer.hpp"

#include <cmath>

#include "common/parallel.hpp"

namespace archipelago::training {

void pseudo_gradient(const float* global, const float* local, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = global[i] - local[i];
}

Expected<MergeRule> parse_merge_rule(const std::string& name) {
  if (name == "mean") return MergeRule::mean;
  if (name == "token_weighted") return MergeRule::token_weighted;
  if (name == "rda") return MergeRule::rda;
  return make_error(ErrorCode::invalid_argument,
                    "outer.merge: unknown rule '" + name + "' (expected mean, token_weighted or rda)");
}

double merge_weight(int64_t tokens, int64_t steps, MergeRule rule) {
  if (rule == MergeRule::mean) return 1.0;
  const double t = static_cast<double>(tokens);
  return steps > 0 ? t * (t / static_cast<double>(steps)) : 0.0;
}

std::vector<double> merge_weights(const std::vector<Contribution>& contributions, MergeRule rule) {
  std::vector<double> weights;
  weights.reserve(contributions.size());
  for (const auto& c : contributions) weights.push_back(merge_weight(c.tokens, c.steps, rule));
  return weights;
}

double l2_norm(const float* x, int64_t n, int threads) {
  const int parts = pass_threads(n, threads);
  std::vector<double> partial(static_cast<size_t>(parts), 0.0);
  parallel_ranges(n, parts, [&](int64_t begin, int64_t end, int part) {
    double squared = 0;
    for (int64_t i = begin; i < end; ++i) squared += static_cast<double>(x[i]) * x[i];
    partial[static_cast<size_t>(part)] = squared;
  });
  double squared = 0;
  for (double p : partial) squared += p;
  return std::sqrt(squared);
}

float MergeAccumulator::add_external(double weight, double norm, float** sum) {
  if (sum_.empty()) sum_.assign(static_cast<size_t>(n_), 0.0f);
  *sum = sum_.data();
  count_ += 1;
  weight_sum_ += weight;
  if (rule_ != MergeRule::rda) return static_cast<float>(weight);
  norm_sum_ += weight * norm;
  return norm == 0 ? 0.0f : static_cast<float>(weight / norm);  // a zero Δ has no direction to contribute
}

void MergeAccumulator::add(const float* delta, double weight, double norm) {
  float* sum = nullptr;
  const float s = add_external(weight, norm, &sum);
  if (s == 0.0f) return;
  parallel_ranges(n_, pass_threads(n_, threads_), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) sum[i] += s * delta[i];
  });
}


Expected<std::vector<float>> MergeAccumulator::result() const {
  if (count_ == 0) return make_error(ErrorCode::invalid_argument, "merge of no contributions");
  if (!(weight_sum_ > 0)) {
    return make_error(ErrorCode::invalid_argument, "merge weights sum to zero (no tokens or steps reported)");
  }
  std::vector<float> out(static_cast<size_t>(n_), 0.0f);
  if (sum_.empty()) return out;
  double scale = 1.0 / weight_sum_;
  if (rule_ == MergeRule::rda) {
    const double direction_norm = l2_norm(sum_.data(), n_, threads_);
    scale = direction_norm > 0 ? (norm_sum_ / weight_sum_) / direction_norm : 0.0;
  }
  const float* sum = sum_.data();
  float* o = out.data();
  parallel_ranges(n_, pass_threads(n_, threads_), [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) o[i] = static_cast<float>(sum[i] * scale);
  });
  return out;
}

Expected<std::vector<float>> merge(const std::vector<Contribution>& contributions, int64_t n, MergeRule rule) {
  if (contributions.empty()) return make_error(ErrorCode::invalid_argument, "merge of no contributions");
  std::vector<double> weights = merge_weights(contributions, rule);
  double weight_sum = 0;
  for (double w : weights) weight_sum += w;
  if (!(weight_sum > 0)) {
    return make_error(ErrorCode::invalid_argument, "merge weights sum to zero (no tokens or steps reported)");
  }
  std::vector<double> accumulator(n, 0.0);
  if (rule != MergeRule::rda) {
    for (size_t m = 0; m < contributions.size(); ++m) {
      const double w = weights[m] / weight_sum;
      const float* delta = contributions[m].delta;
      for (int64_t i = 0; i < n; ++i) accumulator[i] += w * delta[i];
    }
  } else {
    double mean_norm = 0;
    for (size_t m = 0; m < contributions.size(); ++m) {
      const float* delta = contributions[m].delta;
      const double norm = l2_norm(delta, n);
      mean_norm += weights[m] / weight_sum * norm;
      if (norm == 0) continue;  // a zero Δ has no direction to contribute
      const double scale = weights[m] / norm;
      for (int64_t i = 0; i < n; ++i) accumulator[i] += scale * delta[i];
    }
    double squared = 0;
    for (double v : accumulator) squared += v * v;
    const double direction_norm = std::sqrt(squared);
    const double scale = direction_norm > 0 ? mean_norm / direction_norm : 0.0;
    for (double& v : accumulator) v *= scale;
  }
  return std::vector<float>(accumulator.begin(), accumulator.end());
}

OuterState zero_outer_state(int64_t n, bool delayed) {
  OuterState state;
  state.momentum.assign(n, 0.0f);
  if (delayed) state.accumulated.assign(n, 0.0f);
  return state;
}

double warmed_momentum(double momentum, int64_t warmup, int64_t steps_taken) {
  if (warmup <= 0 || steps_taken + 1 >= warmup) return momentum;
  return momentum * static_cast<double>(steps_taken + 1) / static_cast<double>(warmup);
}

void nesterov_step(OuterState& state, float* params, const float* delta, double lr, double momentum) {
  float* m = state.momentum.data();
  const auto lr_f = static_cast<float>(lr), mu = static_cast<float>(momentum);
  const int64_t n = static_cast<int64_t>(state.momentum.size());
  for (int64_t i = 0; i < n; ++i) {
    m[i] = mu * m[i] + delta[i];
    params[i] -= lr_f * (delta[i] + mu * m[i]);
  }
  ++state.steps;
}

void work_clock_step(OuterState& state, float* params, const float* g, int64_t steps, int64_t round_steps, double lr,
                     double momentum) {
  round_steps = round_steps < 1 ? 1 : round_steps;
  if (state.work_steps == 0 && steps == round_steps) {  // a whole round at once: the Nesterov step itself
    nesterov_step(state, params, g, lr, momentum);
    return;
  }
  const int64_t n = static_cast<int64_t>(state.momentum.size());
  const auto lr_f = static_cast<float>(lr), mu = static_cast<float>(momentum);
  float* acc = state.accumulated.data();
  for (int64_t i = 0; i < n; ++i) {
    acc[i] += g[i];
    params[i] -= lr_f * g[i];
  }
  state.work_steps += steps < 0 ? 0 : steps;
  // One momentum update per whole round of work: each folds a round's share of the accumulator
  // (round ÷ the work it holds) and keeps the rest, with the work beyond the round, for the next.
  float* m = state.momentum.data();
  while (state.work_steps >= round_steps) {
    const double share = static_cast<double>(round_steps) / static_cast<double>(state.work_steps);
    const auto folded = static_cast<float>(share), kept = static_cast<float>(1.0 - share);
    const bool whole = state.work_steps == round_steps;  // nothing left over: the accumulator empties
    for (int64_t i = 0; i < n; ++i) {
      m[i] = mu * m[i] + acc[i] * folded;
      params[i] -= lr_f * mu * m[i];
      acc[i] = whole ? 0.0f : acc[i] * kept;
    }
    state.work_steps -= round_steps;
    ++state.steps;
  }
}

void delayed_nesterov_arrival(OuterState& state, float* params, const float* delta, double lr, double momentum,
                              int every) {
  every = every < 1 ? 1 : every;
  const int64_t n = static_cast<int64_t>(state.momentum.size());
  const auto lr_f = static_cast<float>(lr), mu = static_cast<float>(momentum);
  const float share = 1.0f / static_cast<float>(every);
  float* acc = state.accumulated.data();
  for (int64_t i = 0; i < n; ++i) {
    acc[i] += delta[i];
    params[i] -= lr_f * share * delta[i];
  }
  if (++state.arrivals < every) return;
  float* m = state.momentum.data();
  for (int64_t i = 0; i < n; ++i) {
    m[i] = mu * m[i] + share * acc[i];
    params[i] -= lr_f * mu * m[i];
    acc[i] = 0.0f;
  }
  state.arrivals = 0;
  ++state.steps;
}

NesterovOuter::NesterovOuter(int64_t n, double lr, double momentum, int64_t warmup)
    : state_(zero_outer_state(n, false)), lr_(lr), momentum_(momentum), warmup_(warmup) {}

DelayedNesterovOuter::DelayedNesterovOuter(int64_t n, double lr, double momentum, int every)
    : state_(zero_outer_state(n, true)), lr_(lr), momentum_(momentum), every_(every < 1 ? 1 : every) {}

}  // namespace archipelago::training

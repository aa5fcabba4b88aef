#include "training/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace archipelago::training {

Status validate(const SamplingOptions& options) {
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
    return make_error(ErrorCode::invalid_argument, "--temperature must be a finite number >= 0");
  if (options.top_k < 0) return make_error(ErrorCode::invalid_argument, "--top-k must be >= 0 (0: every token)");
  if (!(options.top_p > 0 && options.top_p <= 1))
    return make_error(ErrorCode::invalid_argument, "--top-p must be in (0, 1]");
  if (options.tokens < 0) return make_error(ErrorCode::invalid_argument, "--tokens must be >= 0");
  return Status::success();
}

int32_t draw_token(const std::vector<float>& logits, const SamplingOptions& options, std::mt19937_64& rng) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; a stable sort keeps the lower id first among equals.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (options.temperature == 0 || vocab == 1) return order.front();
  size_t keep = options.top_k > 0 ? std::min<size_t>(static_cast<size_t>(options.top_k), order.size()) : order.size();
  std::vector<double> probability(keep);
  const double top = logits[order.front()];
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    probability[i] = std::exp((static_cast<double>(logits[order[i]]) - top) / options.temperature);
    total += probability[i];
  }
  if (options.top_p < 1) {
    double mass = 0;
    size_t nucleus = 0;
    while (nucleus < keep) {
      mass += probability[nucleus] / total;
      ++nucleus;
      if (mass >= options.top_p) break;
    }
    keep = nucleus;
    total = std::accumulate(probability.begin(), probability.begin() + keep, 0.0);
  }
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double cumulative = 0;
  for (size_t i = 0; i < keep; ++i) {
    cumulative += probability[i];
    if (u < cumulative) return order[i];
  }
  return order[keep - 1];
}

}  // namespace archipelago::training

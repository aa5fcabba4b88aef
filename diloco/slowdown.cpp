#include "diloco/slowdown.hpp"

#include <algorithm>

namespace archipelago::diloco {

double step_slowdown(double straggler_factor, double jitter, double throttle, std::mt19937_64& generator) {
  double factor = straggler_factor;
  if (jitter > 0) factor *= 1.0 + jitter * std::normal_distribution<double>(0.0, 1.0)(generator);
  return std::max(1.0, factor) * std::max(1.0, throttle);
}

}  // namespace archipelago::diloco

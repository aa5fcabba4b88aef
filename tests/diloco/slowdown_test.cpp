#include "diloco/slowdown.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using archipelago::diloco::step_slowdown;

TEST_CASE("a straggler's step slowdown: its factor, varied by the jitter's relative sd, never below 1") {
  std::mt19937_64 generator(7);
  CHECK(step_slowdown(1.0, 0.0, 1.0, generator) == 1.0);
  CHECK(step_slowdown(1.18, 0.0, 1.0, generator) == 1.18);
  CHECK(step_slowdown(1.5, 0.0, 2.0, generator) == 3.0);  // an operator's throttle multiplies it
  CHECK(step_slowdown(0.5, 0.0, 1.0, generator) == 1.0);  // a sleep cannot make a step faster

  // 18 % slower with a 10 % step-time variance: over 20,000 steps the median is the factor and the
  // quartiles are the normal's (±0.6745 sd of 0.118). A draw below 1 is cut to 1 (a sleep cannot
  // speed a step up): at 1.18 ± 0.118 that is Φ(−1.525) = 6.4 % of the steps.
  std::vector<double> draws;
  for (int i = 0; i < 20000; ++i) draws.push_back(step_slowdown(1.18, 0.1, 1.0, generator));
  std::sort(draws.begin(), draws.end());
  const auto at = [&](double q) { return draws[static_cast<size_t>(q * (draws.size() - 1))]; };
  CHECK(at(0.5) == doctest::Approx(1.18).epsilon(0.004).scale(0));
  CHECK(at(0.75) - at(0.25) == doctest::Approx(2 * 0.6745 * 0.118).epsilon(0.04).scale(0));
  const auto cut = std::count(draws.begin(), draws.end(), 1.0);
  CHECK(static_cast<double>(cut) / draws.size() == doctest::Approx(0.0636).epsilon(0.006));
  CHECK(draws.front() == 1.0);

  // The same seed draws the same steps.
  std::mt19937_64 a(11), b(11);
  for (int i = 0; i < 10; ++i) CHECK(step_slowdown(2.0, 0.2, 1.0, a) == step_slowdown(2.0, 0.2, 1.0, b));
}

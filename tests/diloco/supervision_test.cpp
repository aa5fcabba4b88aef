// diloco/supervision: the restart policy (backoff, intensity limit). Table-driven where it fits.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "diloco/supervision.hpp"

using namespace archipelago::diloco;

TEST_CASE("policy: restarts back off exponentially and stop at the intensity limit") {
  RestartOptions o;
  o.max_restarts = 3;
  o.window_s = 10;
  o.backoff_initial_s = 0.1;
  o.backoff_max_s = 0.3;
  auto first = decide_restart(100, {}, o);
  CHECK(first.restart);
  CHECK(first.delay_s == doctest::Approx(0.1));
  auto second = decide_restart(100, {99}, o);
  CHECK(second.delay_s == doctest::Approx(0.2));
  auto third = decide_restart(100, {98, 99}, o);
  CHECK(third.delay_s == doctest::Approx(0.3));  // capped
  auto give_up = decide_restart(100, {97, 98, 99}, o);
  CHECK_FALSE(give_up.restart);
  CHECK(give_up.reason.find("giving up") != std::string::npos);
  // Old restarts fall out of the window.
  CHECK(decide_restart(100, {80, 85, 99}, o).restart);
}

// diloco/detector: the failure detector's adaptive timeout. Table-driven where it fits.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "diloco/detector.hpp"

using namespace archipelago::diloco;

TEST_CASE("policy: the failure detector adapts to each learner's heartbeat history") {
  DetectorOptions o;
  o.heartbeat_s = 0.2;
  o.suspect_factor = 3;
  o.min_timeout_s = 0.5;
  o.max_timeout_s = 30;
  HeartbeatHistory fast, slow, starting;
  CHECK(suspect_timeout(fast, o) == doctest::Approx(30));  // no step yet: start-up gets the maximum
  for (int i = 0; i <= 20; ++i) observe_heartbeat(fast, i * 0.1, i);
  for (int i = 0; i <= 20; ++i) observe_heartbeat(slow, i * 2.0, i);
  CHECK(suspect_timeout(fast, o) < 1.0);
  CHECK(suspect_timeout(slow, o) > 5.0);  // a learner with 2 s steps is not declared dead after 2.4 s
  CHECK_FALSE(check_liveness(slow, 40 + 4.0, o).suspected);
  CHECK(check_liveness(fast, 2.0 + 1.0, o).suspected);
  CHECK_FALSE(check_liveness(HeartbeatHistory{}, 100, o).suspected);
  // Fast beats while joining, then slow steps: one step always fits in the timeout.
  for (int i = 0; i <= 10; ++i) observe_heartbeat(starting, i * 0.1, 0);
  CHECK_FALSE(check_liveness(starting, 1.0 + 20, o).suspected);  // still starting: the maximum applies
  observe_heartbeat(starting, 3.0, 1);
  observe_heartbeat(starting, 5.5, 2);
  CHECK(starting.step_s >= 2.5);  // includes the start-up before step 1
  CHECK(suspect_timeout(starting, o) >= 3 * 2.5);
  CHECK_FALSE(check_liveness(starting, 5.5 + 5.0, o).suspected);
  CHECK(check_liveness(starting, 5.5 + 31, o).suspected);
}

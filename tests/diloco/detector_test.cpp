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
  CHECK(suspect_timeout(fast, o) == doctest::Approx(30));  // no history yet: start-up gets the maximum
  for (int i = 0; i <= 20; ++i) observe_heartbeat(fast, i * 0.1, i);
  for (int i = 0; i <= 20; ++i) observe_heartbeat(slow, i * 2.0, i);
  CHECK(suspect_timeout(fast, o) < 1.0);
  CHECK(suspect_timeout(slow, o) > 5.0);  // a learner that beats every 2 s is not declared dead after 2.4 s
  CHECK_FALSE(check_liveness(slow, 40 + 4.0, o).suspected);
  CHECK(check_liveness(fast, 2.0 + 1.0, o).suspected);
  CHECK_FALSE(check_liveness(HeartbeatHistory{}, 100, o).suspected);
  // Its pulse beats every 0.2 s while one inner step takes 60 s: the silence bound is the beats',
  // never the step's (a slow learner is not a silent one), and a minute without a step is no death.
  o.min_timeout_s = 2;
  for (int i = 0; i <= 600; ++i) observe_heartbeat(starting, i * 0.2, i / 300);
  CHECK(starting.step_s == doctest::Approx(60).epsilon(0.01));
  CHECK(suspect_timeout(starting, o) == doctest::Approx(2));
  CHECK_FALSE(check_liveness(starting, 120 + 1.5, o).suspected);
  CHECK(check_liveness(starting, 120 + 2.5, o).suspected);
}

TEST_CASE("policy: a beating learner without inner steps is stalled, judged on its own step time") {
  DetectorOptions o;
  o.stall_factor = 20;
  o.stall_min_s = 30;
  HeartbeatHistory fast, slow, fresh;
  for (int i = 0; i <= 50; ++i) observe_heartbeat(fast, i * 0.1, i);       // 0.1 s per step, last at 5 s
  for (int i = 0; i <= 600; ++i) observe_heartbeat(slow, i * 0.2, i / 300);  // 60 s per step, last at 120 s
  for (int i = 0; i <= 600; ++i) observe_heartbeat(fresh, i * 0.2, 0);       // no step time yet
  CHECK_FALSE(check_progress(fast, 5 + 29, o).stalled);  // 20 steps' time is 2 s: the floor applies
  CHECK(check_progress(fast, 5 + 31, o).stalled);
  CHECK(check_progress(fast, 5 + 31, o).reason.find("no inner step for 31.0 s") != std::string::npos);
  CHECK_FALSE(check_progress(slow, 120 + 1199, o).stalled);  // 20 of its 60-s steps
  CHECK(check_progress(slow, 120 + 1201, o).stalled);
  CHECK_FALSE(check_progress(fresh, 1e6, o).stalled);  // never judged before it has a step time
}

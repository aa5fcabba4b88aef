// diloco/time_sheet: each moment charged to one activity, the one in progress counted to now, and
// the time between activities (unseen) charged to none of the parts a heartbeat reports.
#include <doctest/doctest.h>

#include "diloco/time_sheet.hpp"

using namespace archipelago::diloco;

TEST_CASE("time sheet: disjoint activities, the open one counted to now") {
  TimeSheet sheet(10.0);  // starts recovering at t = 10
  CHECK(sheet.current() == Activity::recovering);
  CHECK(sheet.seconds(Activity::recovering, 12.5) == doctest::Approx(2.5));
  sheet.switch_to(Activity::computing, 13);
  sheet.switch_to(Activity::throttled, 14);
  sheet.switch_to(Activity::overhead, 14.5);
  sheet.switch_to(Activity::unseen, 14.75);
  sheet.switch_to(Activity::overhead, 15.5);  // 0.75 s between two messages: no activity's
  sheet.switch_to(Activity::computing, 15.625);
  const double now = 16;
  CHECK(sheet.seconds(Activity::recovering, now) == doctest::Approx(3));
  CHECK(sheet.seconds(Activity::computing, now) == doctest::Approx(1 + 0.375));
  CHECK(sheet.seconds(Activity::throttled, now) == doctest::Approx(0.5));
  CHECK(sheet.seconds(Activity::overhead, now) == doctest::Approx(0.25 + 0.125));
  CHECK(sheet.seconds(Activity::waiting, now) == 0);
  double reported = 0;
  for (auto a : {Activity::recovering, Activity::computing, Activity::throttled, Activity::waiting, Activity::paused,
                 Activity::overhead}) {
    reported += sheet.seconds(a, now);
  }
  CHECK(reported == doctest::Approx(now - 10 - 0.75));  // the life less the unseen gap, exactly
}

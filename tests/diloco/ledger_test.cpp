// diloco/ledger: each part is its own measurement, the parts add up to the allocated time, and a
// report that contradicts itself shows as a negative part instead of being hidden.
#include <doctest/doctest.h>

#include "diloco/ledger.hpp"

using namespace archipelago::diloco;

TEST_CASE("ledger: parts per slot and in all add up to the allocated time; a contradiction shows as a negative part") {
  SlotTimes honest;
  honest.lifetime_s = 50;
  honest.alive_s = 48;
  honest.recovery_s = 3;
  honest.compute_s = 40;
  honest.merged_compute_s = 30;
  honest.rejected_compute_s = 2;
  SlotTimes overclaimed = honest;
  overclaimed.merged_compute_s = 45;  // more compute merged than the learner measured
  const Ledger ledger = build_ledger(60, {honest, overclaimed});
  CHECK(ledger.allocated_s == 120);
  CHECK(ledger.slots[0].unmerged == doctest::Approx(40 + 2 - 30 - 2));
  CHECK(ledger.slots[0].overhead == doctest::Approx(48 - 3 - 40));
  CHECK(ledger.slots[0].idle == doctest::Approx(10));
  CHECK(ledger.slots[1].unmerged == doctest::Approx(-5));  // shown, never clamped
  for (const auto& p : ledger.slots) CHECK(p.sum() == doctest::Approx(60));
  CHECK(ledger.seconds.sum() == doctest::Approx(120));
  CHECK(ledger.goodput() == doctest::Approx(75.0 / 120));
  CHECK(build_ledger(10, {}).goodput() == 0);
}

// diloco/ledger: each part is its own measurement; what no clock saw is one part, `unaccounted`,
// which grows when a measurement is missing; a report that contradicts itself shows as a negative
// part instead of being hidden.
#include <doctest/doctest.h>

#include "diloco/ledger.hpp"

using namespace archipelago::diloco;

namespace {

// A running slot over 60 s: 3 s recovering, 40 s computing (of which 30 s merged, 2 s refused, 3 s
// in updates on their way, 5 s unsent), 4 s throttled, 1 s waiting, 2 s overhead, 1 s idle before
// its first spawn; 9 s no clock saw.
SlotTimes running_slot() {
  SlotTimes t;
  t.recovery_s = 3;
  t.compute_s = 40;
  t.throttled_s = 4;
  t.wait_s = 1;
  t.overhead_s = 2;
  t.sent_compute_s = 35;
  t.held_compute_s = 5;
  t.running = true;
  t.idle_s = 1;
  t.merged_compute_s = 30;
  t.rejected_compute_s = 2;
  return t;
}

}  // namespace

TEST_CASE("ledger: measured parts, one unaccounted part, and the compute split into merged, rejected, in flight, lost") {
  const SlotTimes running = running_slot();
  SlotTimes ended = running;  // the same slot once its incarnation exited: nothing is in flight any more
  ended.running = false;
  ended.left_compute_s = ended.held_compute_s;
  ended.held_compute_s = 0;
  SlotTimes overclaimed = running;
  overclaimed.merged_compute_s = 40;  // more compute merged than the learner sent
  const Ledger ledger = build_ledger(60, {running, ended, overclaimed});
  CHECK(ledger.allocated_s == 180);
  const auto& r = ledger.slots[0];
  CHECK(r.in_flight == doctest::Approx(5 + 35 - 30 - 2));
  CHECK(r.lost == 0);
  CHECK(r.throttled == 4);
  CHECK(r.idle == 1);
  CHECK(r.unaccounted == doctest::Approx(60 - 40 - 4 - 3 - 1 - 2 - 1));
  // The compute's parts add up to the compute the learner measured.
  CHECK(r.merged + r.rejected + r.in_flight + r.lost == doctest::Approx(running.compute_s));
  const auto& e = ledger.slots[1];
  CHECK(e.in_flight == 0);
  CHECK(e.lost == doctest::Approx(5 + 3));
  CHECK(e.unaccounted == doctest::Approx(r.unaccounted));
  CHECK(ledger.slots[2].in_flight == doctest::Approx(5 + 35 - 40 - 2));  // negative: shown, never clamped
  for (const auto& p : ledger.slots) CHECK(p.sum() == doctest::Approx(60));
  CHECK(ledger.seconds.sum() == doctest::Approx(180));
  CHECK(ledger.goodput() == doctest::Approx(100.0 / 180));
  CHECK(ledger.unaccounted_share() == doctest::Approx(3 * 9.0 / 180));
  CHECK(build_ledger(10, {}).goodput() == 0);
}

TEST_CASE("ledger: a part no clock measured is unaccounted, not hidden in another part") {
  const SlotTimes full = running_slot();
  SlotTimes missing = full;
  missing.overhead_s = 0;  // the learner did not report its overhead
  missing.idle_s = 0;      // nor its supervisor the time before the spawn
  const Ledger a = build_ledger(60, {full});
  const Ledger b = build_ledger(60, {missing});
  CHECK(b.seconds.unaccounted == doctest::Approx(a.seconds.unaccounted + 2 + 1));
  CHECK(b.seconds.merged == a.seconds.merged);
  CHECK(b.seconds.sum() == doctest::Approx(60));
  // A slot nobody reported on: all of it unaccounted.
  const Ledger empty = build_ledger(50, {SlotTimes{}});
  CHECK(empty.slots[0].unaccounted == 50);
  CHECK(empty.unaccounted_share() == 1);
  CHECK(empty.goodput() == 0);
}

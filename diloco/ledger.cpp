#include "diloco/ledger.hpp"

namespace archipelago::diloco {

namespace {

void add(LedgerParts& into, const LedgerParts& p) {
  into.merged += p.merged;
  into.rejected += p.rejected;
  into.in_flight += p.in_flight;
  into.lost += p.lost;
  into.throttled += p.throttled;
  into.recovering += p.recovering;
  into.waiting += p.waiting;
  into.paused += p.paused;
  into.overhead += p.overhead;
  into.restarting += p.restarting;
  into.idle += p.idle;
  into.unaccounted += p.unaccounted;
}

}  // namespace

Ledger build_ledger(double wall_s, const std::vector<SlotTimes>& slots) {
  Ledger ledger;
  ledger.allocated_s = wall_s * static_cast<double>(slots.size());
  for (const auto& t : slots) {
    LedgerParts p;
    // Sent updates the syncer has not merged nor refused: on their way while the slot runs.
    const double pipeline = t.sent_compute_s - t.merged_compute_s - t.rejected_compute_s;
    p.merged = t.merged_compute_s;
    p.rejected = t.rejected_compute_s;
    p.in_flight = t.held_compute_s + (t.running ? pipeline : 0);
    p.lost = t.left_compute_s + (t.running ? 0 : pipeline);
    p.throttled = t.throttled_s;
    p.recovering = t.recovery_s;
    p.waiting = t.wait_s;
    p.paused = t.paused_s;
    p.overhead = t.overhead_s;
    p.restarting = t.restarting_s;
    p.idle = t.idle_s;
    p.unaccounted = wall_s - p.measured();
    ledger.slots.push_back(p);
    add(ledger.seconds, p);
  }
  return ledger;
}

}  // namespace archipelago::diloco

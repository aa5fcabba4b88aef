#include "diloco/ledger.hpp"

namespace archipelago::diloco {

Ledger build_ledger(double wall_s, const std::vector<SlotTimes>& slots) {
  Ledger ledger;
  ledger.allocated_s = wall_s * static_cast<double>(slots.size());
  for (const auto& t : slots) {
    LedgerParts p;
    const double computed = t.compute_s + (t.lifetime_s - t.alive_s);
    p.merged = t.merged_compute_s;
    p.rejected = t.rejected_compute_s;
    p.unmerged = computed - t.merged_compute_s - t.rejected_compute_s;
    p.recovering = t.recovery_s;
    p.waiting = t.wait_s;
    p.paused = t.paused_s;
    p.overhead = t.alive_s - t.recovery_s - t.compute_s - t.wait_s - t.paused_s;
    p.restarting = t.restarting_s;
    p.idle = wall_s - t.lifetime_s - t.restarting_s;
    ledger.slots.push_back(p);
    auto& s = ledger.seconds;
    s.merged += p.merged;
    s.rejected += p.rejected;
    s.unmerged += p.unmerged;
    s.recovering += p.recovering;
    s.waiting += p.waiting;
    s.paused += p.paused;
    s.overhead += p.overhead;
    s.restarting += p.restarting;
    s.idle += p.idle;
  }
  return ledger;
}

}  // namespace archipelago::diloco

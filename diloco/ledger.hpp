// The goodput ledger. Every learner slot's allocated time (the run's wall time) is split into parts,
// each one measured by a clock that saw it, never derived from the others or from averages:
//
//   merged       compute whose work reached a committed version: each update carries the compute
//                time behind it (every inner step's time × the fragment's share of the
//                parameters), summed by the syncer when it merges the update: this is goodput
//   rejected     compute of updates the syncer refused (stale, duplicate, non-finite, ...)
//   in_flight    compute not yet merged while its learner runs: the unsent work it holds, and the
//                updates it sent that the syncer has not merged or refused yet (a live part: it
//                turns into merged as the run goes on)
//   lost         compute that will never be merged: the unsent work of an incarnation that exited
//                (crashed, or cut off by the drain timeout) and no later one restored from its
//                checkpoint, work dropped after a non-finite step, updates of a slot no longer
//                running that the syncer never merged nor refused
//   throttled    inner steps made slower on purpose (the configured straggler, an operator's or a
//                drill's throttle): the step's sleep, not compute
//   recovering   an incarnation's start → its first inner step: model build, join, state fetch
//   waiting      blocked on the syncer: sync mode's round barrier, the drain's wait for the last merges
//   paused       paused by an operator
//   overhead     the learner's message handlers outside the parts above: encoding and sending
//                updates, installing globals, checkpoint copies, heartbeats, messaging
//   restarting   an incarnation's exit → the next one's spawn (the supervisor's backoff)
//   idle         no incarnation: before the slot's first spawn (a node not yet joined), after it
//                finished or was given up
//   unaccounted  allocated − every part above: the time no clock saw. A learner's thread between two
//                messages, a frozen (SIGSTOPped) or killed learner after its last heartbeat, a node
//                process gone, a start-up before the supervisor. Near 0 in a clean run; large when
//                the ledger misses something. Negative: two clocks counted the same time.
//
// Where the times come from. A learner keeps a time sheet of its incarnation (diloco/time_sheet.hpp:
// recovering, computing, throttled, waiting, paused, overhead; disjoint intervals on its clock) and
// the fate of its compute (sent in updates, unsent now, dropped, restored from a checkpoint), and
// reports them in its heartbeats; its supervisor, in the same process and on the same clock, sums
// each incarnation's last heartbeat per slot and measures the restarts and the idle time around its
// lives (messages' SlotReport). The syncer measures the compute it merged and refused. A learner's
// compute is split without a remainder of the ledger, from its own counters at each heartbeat:
//   compute + restored = sent + unsent + dropped          (per incarnation)
//   in_flight = unsent of the running incarnation + (running ? sent − merged − rejected : 0)
//   lost      = unsent of ended incarnations + dropped − restored + (running ? 0 : sent − merged − rejected)
// so merged + rejected + in_flight + lost is the compute the heartbeats reported. Nothing is clamped:
// a negative `in_flight` or `lost` means the syncer credited more compute than the learners
// measured, a negative `unaccounted` two clocks that overlap: each a defect shown as it is.
// Pure; any thread.
#pragma once

#include <vector>

namespace archipelago::diloco {

// One learner slot's reported times (seconds), summed over its incarnations.
struct SlotTimes {
  // Its learners' time sheets, as their last heartbeats gave them.
  double recovery_s = 0;
  double compute_s = 0;
  double throttled_s = 0;
  double wait_s = 0;
  double paused_s = 0;
  double overhead_s = 0;
  // The fate of that compute, by the learners' counters.
  double sent_compute_s = 0;   // carried by the updates they sent
  double held_compute_s = 0;   // unsent work of the running incarnation
  double left_compute_s = 0;   // unsent work of ended incarnations + dropped work − work restored
  bool running = false;        // an incarnation runs now
  // Its supervisor's clock.
  double restarting_s = 0;     // exit → respawn
  double idle_s = 0;           // no incarnation: before the first spawn, after the end
  // The syncer's.
  double merged_compute_s = 0;
  double rejected_compute_s = 0;
};

struct LedgerParts {
  double merged = 0, rejected = 0, in_flight = 0, lost = 0, throttled = 0, recovering = 0, waiting = 0, paused = 0,
         overhead = 0, restarting = 0, idle = 0, unaccounted = 0;
  // Every part but `unaccounted`: what the clocks saw.
  double measured() const {
    return merged + rejected + in_flight + lost + throttled + recovering + waiting + paused + overhead + restarting +
           idle;
  }
  double sum() const { return measured() + unaccounted; }
};

struct Ledger {
  double allocated_s = 0;          // slots × wall
  LedgerParts seconds;             // summed over slots
  std::vector<LedgerParts> slots;  // per slot, seconds
  // `part_s` ÷ allocated (0 with nothing allocated): a part's share of the slots' time.
  double share(double part_s) const { return allocated_s > 0 ? part_s / allocated_s : 0; }
  double goodput() const { return share(seconds.merged); }
  double unaccounted_share() const { return share(seconds.unaccounted); }
};

// `wall_s`: the run's wall time, allocated to every slot.
Ledger build_ledger(double wall_s, const std::vector<SlotTimes>& slots);

}  // namespace archipelago::diloco

// The goodput ledger. Every learner slot's allocated time (the run's wall time) is split into parts
// measured from timestamps, never from averages, and the parts add up to the allocated time
// exactly (nothing is clamped or rescaled):
//
//   merged       compute whose work reached a committed version: each update carries the compute
//                time behind it (every inner step's time × the fragment's share of the
//                parameters), summed by the syncer when it merges the update: this is goodput
//   rejected     compute of updates the syncer refused (stale, duplicate, non-finite, ...)
//   unmerged     compute not (yet) in a committed version: lost with a crashed incarnation, cut
//                off by the drain timeout, or still in flight while the run goes on
//   recovering   an incarnation's start → its first inner step: model build, join, state fetch
//   waiting      blocked on the syncer (sync mode's round barrier)
//   paused       paused by an operator
//   overhead     the rest of a live incarnation's time: encoding and sending updates, installing
//                globals, checkpoint copies, messaging
//   restarting   an incarnation's exit → the next one's spawn (the supervisor's backoff)
//   idle         no incarnation at all: before the slot's first spawn (a node not yet joined), after
//                it finished or was given up, while its node is gone
//
// Where the times come from. A learner measures its own incarnation (alive, recovery, compute,
// wait, paused: disjoint intervals on its clock) and reports them in its heartbeats; its supervisor,
// in the same process and on the same clock, measures each incarnation's life (spawn → exit) and
// the restarts between them, and sums both per slot (messages' SlotReport). The part of a life its
// heartbeats do not cover (after the last heartbeat: a crash loses what was computed there, and a
// live incarnation is computing) counts as compute. So
//   computed   = compute + (lifetime − alive)     merged + rejected + unmerged = computed
//   overhead   = alive − recovery − compute − wait − paused
//   idle       = allocated − lifetime − restarting
// A negative `unmerged` would mean updates carried more compute than the learner measured, a
// negative `idle` a supervisor whose lives outlast the run's clock: either is a defect shown as it
// is, never hidden.
#pragma once

#include <vector>

namespace archipelago::diloco {

// One learner slot's reported times (seconds), summed over its incarnations.
struct SlotTimes {
  double lifetime_s = 0;     // incarnations' lives, spawn → exit or now
  double alive_s = 0;        // ... covered by their heartbeats
  double recovery_s = 0;
  double compute_s = 0;
  double wait_s = 0;
  double paused_s = 0;
  double restarting_s = 0;   // exit → respawn
  double merged_compute_s = 0;    // from the syncer
  double rejected_compute_s = 0;  // from the syncer
};

struct LedgerParts {
  double merged = 0, rejected = 0, unmerged = 0, recovering = 0, waiting = 0, paused = 0, overhead = 0,
         restarting = 0, idle = 0;
  double sum() const {
    return merged + rejected + unmerged + recovering + waiting + paused + overhead + restarting + idle;
  }
};

struct Ledger {
  double allocated_s = 0;          // slots × wall
  LedgerParts seconds;             // summed over slots
  std::vector<LedgerParts> slots;  // per slot, seconds
  double goodput() const { return allocated_s > 0 ? seconds.merged / allocated_s : 0; }
};

// `wall_s`: the run's wall time, allocated to every slot.
Ledger build_ledger(double wall_s, const std::vector<SlotTimes>& slots);

}  // namespace archipelago::diloco

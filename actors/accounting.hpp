// Goodput and bytes accounting: pure functions over the counters the actors report.
//
// Goodput = learner compute time whose work reached a committed version ÷ allocated learner time
// (learner slots × wall time). Work is counted in "step equivalents": an update of fragment p
// carrying s inner steps is worth s · numel_p / numel of a step once it is committed, so partial
// (per-fragment) merges count partially. An update carries every inner step since the learner's
// previous update of that fragment, including steps whose effect on the fragment was later mixed
// with (or replaced by) a newer global: that is the algorithm (Streaming / Decoupled DiLoCo's
// overlap), not lost work, as in the published goodput. Steps restored from a learner's checkpoint
// after a kill count once, in the update that finally carries them. Badput is split into
//   restart     a slot without a running learner (death → respawn, and the rest of the run after
//               a learner was given up),
//   recovery    respawn → first new inner step (model build, join, state fetch),
//   discarded   compute whose work was rejected (stale, ...) or lost (never merged: killed before
//               sending, or in flight at a crash),
//   waiting     everything else: waiting for the syncer (sync mode), start-up, draining, overhead.
// Shares add up to 1. Pure; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace archipelago::actors {

struct LearnerAccount {
  double step_s = 0;                     // mean compute time of one inner step
  double step_equivalents_merged = 0;
  double step_equivalents_rejected = 0;
  int64_t steps_computed = 0;            // all incarnations, this run
};

struct GoodputInputs {
  double wall_s = 0;
  int learner_slots = 0;
  std::vector<LearnerAccount> learners;
  double restart_s = 0;    // summed over slots: downtime + idle time of failed learners
  double recovery_s = 0;
};

struct Goodput {
  double goodput = 0;
  double restart = 0;
  double recovery = 0;
  double discarded = 0;
  double waiting = 0;
  double allocated_s = 0;
  double useful_s = 0;
};

Goodput compute_goodput(const GoodputInputs& inputs);
nlohmann::json to_json(const Goodput& goodput);

// Bytes a data-parallel run would send for the same tokens: every step, each of the workers sends
// its gradients and receives parameters (2 × model bytes per worker-step).
int64_t ddp_equivalent_bytes(int64_t tokens, int64_t tokens_per_worker_step, int64_t parameters);

}  // namespace archipelago::actors

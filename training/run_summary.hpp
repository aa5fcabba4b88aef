// What a finished run of `archipelago train` reports, whichever engine ran it: the figures its
// summary.json, its --json line and its summary table show. The reference engine
// (training/reference_engine.hpp, ReferenceResult) and the local cluster of the actor runtime
// (run/cluster.hpp, ClusterResult) each extend it with what only they know; it becomes JSON only
// where it is printed (apps/train_command.cpp). A plain value: copy freely, any thread.
#pragma once

#include <cstdint>

#include "diloco/mode.hpp"

namespace archipelago::training {

struct RunSummary {
  diloco::Mode mode = diloco::Mode::sync;
  int learners = 0;                 // train.learners
  int inner_steps = 0;              // H
  int64_t parameters = 0;
  int64_t rounds = 0;               // reference: outer rounds; actors: versions committed in this run
  int64_t steps = 0;                // inner steps per learner (actors: mean over learner slots)
  int64_t tokens = 0;               // training tokens consumed in this run, all learners
  double initial_heldout_loss = 0;  // of the parameters the run started from
  double heldout_loss = 0;          // of the final parameters (actors: the final committed version)
  uint64_t best_version = 0;        // actors: the version of the lowest held-out loss scored (0: none)
  double best_heldout_loss = 0;     // ... its loss (NaN: none); the run's result is still the final version
  double train_loss = 0;            // NaN: no inner step was taken
  double wall_s = 0;
  int64_t bytes_sent = 0;           // up + down
  bool bytes_measured = false;      // counted where they crossed the actors' links; false: computed
  int64_t bytes_ddp_equivalent = 0; // computed: what a data-parallel job of `learners` workers would send
                                    // for the same tokens, ring all-reduce of fp32 gradients, 2(M−1) ×
                                    // model bytes per step (0 for one learner)

  double tokens_per_s() const { return wall_s > 0 ? tokens / wall_s : 0.0; }
};

}  // namespace archipelago::training

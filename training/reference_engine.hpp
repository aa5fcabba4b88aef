// The reference engine: synchronous DiLoCo and a data-parallel baseline, run sequentially in one
// thread with no actors. It is the ground truth the actor runtime must reproduce.
//
//   sync: every round, each of M learners starts from the global parameters, runs H AdamW steps on
//         its own shard, and returns Δ_m = θ − θ_m; Δ = merge(Δ_m) (per fragment); θ ← Nesterov(θ, Δ).
//   ddp:  one model; every step averages the gradients of M batches (one per learner's shard).
//
// Bytes are what would cross the network, computed: a model (fp32) up and down per learner and
// round for DiLoCo; for data-parallel a ring all-reduce of the fp32 gradients every step, 2(M−1)
// model bytes in all (what the gloo job measures, run/data_parallel_job.hpp).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "training/corpus.hpp"
#include "training/options.hpp"
#include "training/replica.hpp"
#include "training/run_summary.hpp"

namespace archipelago::training {

struct ReferenceSetup {
  ModelConfig model;
  InnerOptions inner;
  OuterOptions outer;
  DataOptions data;
  RunOptions run;
  // Fault injection (sync mode): each learner's pseudo-gradient is lost from its round with this
  // probability, drawn from `drop_seed`; a round that loses every one makes no outer step.
  double drop_outer_gradient = 0;
  uint64_t drop_seed = 7;
};

struct ProgressPoint {
  int64_t round = 0;     // outer rounds (ddp: steps / H)
  int64_t steps = 0;     // inner steps per learner so far
  int64_t tokens = 0;    // training tokens, all learners
  double train_loss = 0;
  double heldout_loss = 0;  // NaN when this point was not evaluated
  double elapsed_s = 0;
  int64_t bytes_sent = 0;
};

// The run's summary (bytes computed, as above), and what only
// this engine reports.
struct ReferenceResult : RunSummary {
  int64_t dropped_outer_gradients = 0;    // learner-rounds lost to drop_outer_gradient
  int64_t rounds_without_outer_step = 0;  // rounds that lost every learner's
  std::vector<float> final_parameters;
  std::vector<ProgressPoint> curve;
};

// Hooks for checking the engine's arithmetic from outside (tests/crosscheck); called on the
// engine's thread, in order. An unset member costs nothing.
struct ReferenceObserver {
  // After every inner step: the learner that took it (ddp: 0, the one model), the batches it
  // consumed (ddp: one per learner, in learner order) and its stats.
  std::function<void(int learner, const std::vector<Batch>& batches, const StepStats& stats)> step;
  // The global parameters (flat, in `Replica::parameters()` order) before the first round
  // (round 0) and after every round.
  std::function<void(int64_t round, const std::vector<float>& parameters)> round;
};

// Runs until train.max_tokens or train.max_seconds (at least one must be set), finishing the
// current round. `progress` (optional) is called after every evaluation.
Expected<ReferenceResult> run_reference(const ReferenceSetup& setup, std::shared_ptr<const Corpus> corpus,
                                        const std::function<void(const ProgressPoint&)>& progress = {},
                                        const ReferenceObserver& observer = {});

}  // namespace archipelago::training

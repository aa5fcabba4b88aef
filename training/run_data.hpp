// The data and step budget of one run, made the same way by every engine and process: the
// reference engine, a local cluster, a coordinator and a node cut the corpus into the same train
// and held-out split, give learner m the same shard of training spans, score the same held-out
// batches, and stop each learner after the same number of inner steps.
//
// Invariant: a function of the corpus and the configuration only (seeded): two processes of one
// run that call it agree, so a node's learner m reads what a local run's learner m reads. Pure;
// any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "training/corpus.hpp"
#include "training/reference_engine.hpp"

namespace archipelago::training {

struct RunData {
  std::vector<std::vector<Span>> shards;  // one shard of training spans per learner slot (train.learners)
  std::vector<Batch> heldout;             // the held-out batches every evaluation scores
};

// The split, the shards and the held-out batches. invalid_argument: an unknown split or sharding, or
// a held-out split too small to evaluate.
Expected<RunData> prepare_run_data(const Corpus& corpus, const ReferenceSetup& setup);

// The held-out batches alone (what turns a loss into bits per byte).
Expected<std::vector<Batch>> heldout_of(const Corpus& corpus, const ReferenceSetup& setup);

// Tokens one learner consumes per inner step: batch_size × seq_len.
int64_t tokens_per_learner_step(const ReferenceSetup& setup);

// The inner-step budget of train.max_tokens: fills inner.total_steps (the learning-rate schedule's
// length) when it is 0, and returns each learner's step limit (0: no token budget), rounded up to
// whole rounds of H steps in the modes whose learners stop on a whole round (diloco::whole_rounds).
int64_t plan_step_budget(ReferenceSetup& setup);

}  // namespace archipelago::training

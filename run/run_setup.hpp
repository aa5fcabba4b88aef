// What a coordinator and a node both derive from one run configuration, the same way a local
// cluster does (run/cluster.cpp): the held-out batches, the learners' data shards, the model
// layout with its fragment plan, θ0 per fragment, and the learners' budgets. Both processes build
// it from the same configuration (a node receives the coordinator's), so learner m reads the same
// shard and every fragment has the same shape wherever it is computed.
//
// Pure apart from building one replica (LibTorch) to read the layout and θ0; call from any thread
// before actors start.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "actors/initial_fragments.hpp"
#include "actors/learner.hpp"
#include "actors/runtime_options.hpp"
#include "actors/supervisor.hpp"
#include "common/error.hpp"
#include "storage/checkpoint_store.hpp"
#include "training/corpus.hpp"
#include "training/replica.hpp"

namespace archipelago::run {

struct RunSetup {
  std::shared_ptr<const actors::ModelLayout> layout;
  std::shared_ptr<actors::InitialFragments> initial_fragments;  // θ0, per fragment (released by the syncer)
  std::shared_ptr<const std::vector<std::vector<training::Span>>> shards;    // one per learner slot
  std::shared_ptr<const std::vector<training::Batch>> heldout;
  int64_t tokens_per_learner_step = 0;
  int64_t step_limit = 0;  // per learner, from train.max_tokens (0: none)
};

// The model layout with its fragment plan and θ0 per fragment, read from one replica built with the
// run's seed (same seed: same θ0 in every process), or with the weights of model.init_from (an
// export; invalid_argument naming a missing or mis-shaped tensor) when `apply_init_from`: the
// process that commits version 1 applies it, a node or a reader of stored versions need not. The
// replica comes along for a first evaluation.
struct ModelStart {
  std::unique_ptr<training::Replica> replica;
  std::shared_ptr<const actors::ModelLayout> layout;
  std::shared_ptr<actors::InitialFragments> initial_fragments;
};
Expected<ModelStart> build_model_start(const training::ReferenceSetup& setup, bool apply_init_from = true);

// A stored version's fragments as one flat parameter vector in `layout`'s order. inconsistent:
// a fragment this layout does not have, or one of another size.
Expected<std::vector<float>> flat_parameters(const actors::ModelLayout& layout, const storage::VersionData& version);

// Opens (creating if needed) the run's RocksDB store, <run_dir>/store, with the run's sync and
// retention settings.
Expected<std::shared_ptr<storage::CheckpointStore>> open_run_store(const actors::RuntimeOptions& options);

// Validates the mode and the budget, fills inner.total_steps from max_tokens like a local run.
Expected<RunSetup> prepare_run(actors::RuntimeOptions& options, const training::Corpus& corpus);

// Held-out loss of the parameters of `version` (or of θ0 when `version` is null).
Expected<double> heldout_loss(const actors::RuntimeOptions& options, const RunSetup& setup,
                              const storage::VersionData* version);

// Adds the coordinator-side children to a root supervisor, in start order: checkpoint store,
// failure monitor, syncer (starting from `initial_fragments` when the store is empty), evaluator.
// Shared by the local cluster and the coordinator process.
void add_infrastructure_children(actors::SupervisorSpec& root, std::shared_ptr<storage::CheckpointStore> store,
                                 std::shared_ptr<const actors::RuntimeOptions> options,
                                 std::shared_ptr<actors::InitialFragments> initial_fragments,
                                 std::shared_ptr<const std::vector<training::Batch>> heldout,
                                 std::shared_ptr<const actors::ModelLayout> layout);

// A learner supervisor spec for learner slots [first, first + count), like a local cluster's.
struct LearnerSlots {
  int first = 0;
  int count = 0;
  std::vector<int64_t> start_steps;  // per slot in the range; empty: 0
  std::shared_ptr<const actors::SharedDeadline> deadline;  // the run's end for these learners (null: none)
};
actors::SupervisorSpec learner_supervisor_spec(std::shared_ptr<const actors::RuntimeOptions> options,
                                       std::shared_ptr<const training::Corpus> corpus, const RunSetup& setup,
                                       const LearnerSlots& slots);

}  // namespace archipelago::run

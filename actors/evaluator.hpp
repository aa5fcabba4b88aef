// The evaluator: held-out loss of committed global versions, without stalling training.
//
// It keeps a copy of the global parameters: the latest committed version from the checkpoint
// store at start (Join -> Welcome + GlobalFragment*), then every GlobalFragment the syncer
// broadcasts after a commit. When the version it holds is at least `eval_every_versions` past the
// last one it scored, or newer than it and `eval_interval_s` has passed since its last score (its
// start, before the first), it scores it (a self-sent `eval`, so fragments that arrived meanwhile
// are applied first and a backlog collapses into one evaluation of the newest version).
// (admin_atom, "evaluate" [version]) answers once a version >= the requested one is scored
// (fetching from the store if needed); "status" returns the curve. Runs detached: an evaluation
// is LibTorch compute on its own thread, never on the scheduler the syncer uses.
//
// Contract:
//   accepts  WireBytes{GlobalFragment}          the syncer's broadcasts and the store's fetch (others ignored)
//            (admin, WireBytes{AdminRequest})    -> WireBytes{AdminReply}: "status", "evaluate" [v]
//            init, tick, eval                    self-sent only
//   sends    Join{heldDigests}                   to the store (its start, and a requested version)
// Guarantees: it scores only committed versions, and never blocks the syncer's scheduler.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/learner.hpp"
#include "actors/runtime_options.hpp"
#include "training/corpus.hpp"

namespace archipelago::actors {

struct EvaluatorSpec {
  std::shared_ptr<const RuntimeOptions> options;
  std::shared_ptr<const std::vector<training::Batch>> heldout;
  std::shared_ptr<const ModelLayout> layout;
};

caf::actor spawn_evaluator(caf::actor_system& system, EvaluatorSpec spec);

}  // namespace archipelago::actors

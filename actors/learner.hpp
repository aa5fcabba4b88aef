// The learner actor: one model replica (training::Replica: parameters + AdamW state), its data
// cursor(s), and the Streaming/Decoupled DiLoCo inner loop.
//
//   init ──Join──> joining ──Welcome(syncer)──> fetching ──Welcome + GlobalFragment*(store)──> training
//                    ^  (retry every beat)                                                     │ ^
//                    │                              sync mode: all fragments sent ─> waiting ──┘ │
//                    └── syncer down / Welcome{refused}: rejoin, but keep training ──────────────┘
//   training ──step limit or deadline──> draining (last Δ of every fragment out) ──> finished (quit normal)
//
// Runs detached (its own thread): one inner step per self-sent `step`, so GlobalFragments,
// heartbeat timers and admin requests are handled between steps, and it never waits for the
// syncer (except in `sync` mode, which is synchronous DiLoCo by definition). Fragment p is due
// every H steps with offset p·H/P (decoupled; offset 0 in sync/ddp; async: every round(H · own speed /
// fastest speed) steps); its update is Δ_p = θ_ref,p − θ_local,p (θ_ref: the global last installed,
// or θ_local at the last send), encoded with the configured codec and per-fragment error feedback,
// sent as FragmentUpdate chunks. A received GlobalFragment newer than the local copy is installed
// (mix α·local + (1−α)·global, or carry; sync mode replaces). That θ_ref algebra and each fragment's
// bookkeeping (version held, update in flight, unsent work) is one value per fragment,
// diloco/fragment_slot.hpp; the actor reads θ_p from its replica, hands it over and writes back.
// Decoupled/async learners checkpoint their unsent work and AdamW state (learner_checkpoint.hpp)
// and a restarted incarnation continues from it.
// Heartbeats (every detector.heartbeat_s, or after each step when steps are slower) go to the
// failure monitor and to the learner's supervisor (which restarts it at that data position).
//
// Contract (every message shape it accepts; CAF 0.17's typed_actor cannot say which Envelope kind
// a WireBytes holds, so this table is the interface):
//   accepts  WireBytes{GlobalFragment}          a committed fragment (syncer broadcast or store fetch)
//            WireBytes{Welcome}                 the syncer's or the store's answer to Join
//            (admin, WireBytes{AdminRequest})   -> WireBytes{AdminReply}: "status"
//            (stop, key)                        finish the in-flight work, leave, exit normally
//            (pause, key, bool) -> bool; (throttle, key, factor); (corrupt, key); (restart, key)
//                                               local only, with the process key (actors/authorization.hpp)
//            init, step, beat                   self-sent only
//   sends    Join, FragmentUpdate*, Leave       to the syncer; Join{heldDigests} to the store
//            Heartbeat                          to the failure monitor and its supervisor
// Guarantees: an update leaves only for work done since the last one sent for its fragment
// (Δ = θ_ref − θ_local, diloco/fragment_slot.hpp); an installed fragment is never older than the one held.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/runtime_options.hpp"
#include "actors/shared_deadline.hpp"
#include "training/corpus.hpp"
#include "training/fragments.hpp"

namespace archipelago::actors {

struct ModelLayout {
  std::vector<training::ParameterInfo> parameters;
  training::FragmentPlan plan;
  int64_t parameter_count = 0;
};

struct LearnerSpec {
  int index = 0;
  int incarnation = 0;
  std::shared_ptr<const RuntimeOptions> options;
  std::shared_ptr<const training::Corpus> corpus;
  // One shard; in ddp mode one per data-parallel worker (the learner averages their gradients).
  std::vector<std::vector<training::Span>> shards;
  std::shared_ptr<const ModelLayout> layout;
  int64_t start_step = 0;    // data cursor position (inner steps already taken)
  int64_t step_limit = 0;    // stop after this many steps (0: no limit)
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<const SharedDeadline> run_deadline;  // the run's end, movable by the node (null: none)
  caf::actor supervisor;     // receives heartbeats too
  bool crash_on_start = false;  // fault injection: fail during start-up
};

caf::actor spawn_learner(caf::actor_system& system, LearnerSpec spec);

}  // namespace archipelago::actors

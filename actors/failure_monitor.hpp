// The failure monitor: liveness of every learner from its heartbeats and from CAF down signals.
//
// Per learner id it keeps the current incarnation's actor (CAF-monitored from its first heartbeat),
// a HeartbeatHistory and a state:
//     alive ──silence > suspect_timeout(history)──> dead      (diloco/detector.hpp: adaptive timeout)
//     alive ──down_msg (non-normal exit)─────────> dead
//     alive ──Leave{"finished"} / normal exit───> finished
//     dead/finished ──heartbeat from a new incarnation──> alive
// A death is reported once, as Leave{learnerId, "dead: <reason>"}, to the syncer (quorum shrinks)
// and to the learner supervisor (which kills a frozen learner and restarts it). Checks run on a
// 100 ms tick. Status: (admin_atom, AdminRequest "status") -> per-learner state, step, tokens/s.
//
// Contract:
//   accepts  WireBytes{Heartbeat}                a learner's beat (data position, times, incarnation)
//            WireBytes{Leave}                    a learner finished
//            WireBytes{SlotReport}               the learner supervisor's account of a slot
//            (admin, WireBytes{AdminRequest})    -> WireBytes{AdminReply}: "status"
//            tick                                self-sent only
//   sends    Leave{"dead: ..."}                  to the syncer and the learner supervisor, once per death
//            (ledger, carry JSON)                to the syncer, for the next version's manifest
// Guarantees: a death is reported once per incarnation; a heartbeat from a new incarnation makes a
// learner alive again.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/runtime_options.hpp"

namespace archipelago::actors {

caf::actor spawn_failure_monitor(caf::actor_system& system, std::shared_ptr<const RuntimeOptions> options);

}  // namespace archipelago::actors

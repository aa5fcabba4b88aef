// One-for-one supervisor: spawns its children, watches them (CAF monitor → down_msg) and restarts a
// child that exits abnormally, after an exponential backoff, unless it restarted R times within T
// seconds (diloco/supervision.hpp, decide_restart): then the child is marked failed and the run goes on without
// it. A child that exits normally (a learner whose budget is spent) is marked finished.
//
//   running ──down (abnormal)──> restarting ──backoff elapsed──> running (incarnation + 1)
//      │                             └──intensity exceeded──> failed
//      └──down (normal)──> finished
//
// Two instances run in a local cluster: the learner supervisor (children = learners; it also
// receives their heartbeats to know each one's data position, and the monitor's Leave{"dead: ..."}
// to kill a frozen learner) and the root supervisor (children = checkpoint store, failure
// monitor, syncer, evaluator, learner supervisor). Every child is (re)registered in the actor
// registry under its name, so peers always reach the current incarnation. When the supervisor
// itself terminates it takes its children down with the same reason.
//
// Contract:
//   accepts  WireBytes{Heartbeat}                a child learner's data position (learner supervisor)
//            WireBytes{Leave}                    the monitor's "dead: ..." (kills a frozen child)
//            (admin, WireBytes{AdminRequest})    -> WireBytes{AdminReply}: "status"
//            (restart, child index)              self-sent after the backoff
//            down / exit                         CAF's signals of its children
//   sends    WireBytes{SlotReport}               to the failure monitor (learner supervisor)
// Guarantees: a child is restarted at most R times within T seconds; every incarnation is
// registered under the child's name before it can be reached.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>

#include "actors/runtime_options.hpp"

namespace archipelago::actors {

struct ChildContext {
  int index = 0;
  int incarnation = 0;
  int64_t last_step = 0;   // last data position the child reported (learners)
  caf::actor supervisor;
};

struct ChildSpec {
  caf::atom_value name;    // registry name
  std::string id;          // id in heartbeats and Leave messages (learners), else the role name
  int64_t start_step = 0;
  std::function<caf::actor(caf::actor_system&, const ChildContext&)> spawn;
};

struct SupervisorSpec {
  std::string name;        // for logs and status
  caf::atom_value registry_name;
  std::shared_ptr<const RuntimeOptions> options;
  std::vector<ChildSpec> children;
  bool report_slots = false;  // learner supervisors: SlotReports to the failure monitor (the goodput ledger)
};

caf::actor spawn_supervisor(caf::actor_system& system, SupervisorSpec spec);

}  // namespace archipelago::actors

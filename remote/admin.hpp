// The coordinator's admin actor: answers an operator's typed AdminCommands (messages/archipelago.capnp)
// with an AdminReply whose `json` holds the answer. `archipelago console HOST:PORT` talks to it.
//
// Reached only through an admin session: the console asks the gateway (adminjoin, admin token),
// which checks the token in constant time against the coordinator's admin secret (a file, separate
// from the join token), counts a refusal, and on success hands out a random session key and this
// actor's handle. Every command must carry a session key the gateway issued:
//   (admin, key, WireBytes AdminCommand) -> WireBytes AdminReply
// Anything else is refused and counted (actors/authorization.hpp). Commands: status, learners, nodes,
// versions, audit (read-only); pin, unpin, kill_syncer, set, drain (mutating: each is appended to the store's
// audit log in RocksDB — time, peer, command — before it acts, and its result after; a command whose
// audit entry cannot be written is not carried out). Detached: it asks the local actors synchronously.
//
// Contract:
//   accepts  (admin, session key, WireBytes{AdminCommand}) -> WireBytes{AdminReply}
//   sends    (admin, WireBytes{AdminRequest}) to the local actors; (tune, ...), checkpoint to the
//            syncer; (pin | unpin | audit, ...) to the store; learner controls through `control`
// Guarantees: a mutating command is audited before it acts; a command whose audit entry cannot be
// written is not carried out.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <map>
#include <string>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "actors/events.hpp"
#include "actors/status.hpp"
#include "diloco/mode.hpp"
#include "remote/gateway.hpp"
#include "messages/message_types.hpp"

namespace archipelago::remote {

// Session keys the gateway issued to authenticated consoles. Any thread.
class AdminSessions {
 public:
  void add(const std::string& key, const std::string& peer);
  // The peer a key was issued to ("" when none; every key is compared, in constant time each).
  std::string peer_of(const std::string& key) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::string> peers_;  // key -> peer
};

// Carries out a learner control on this process's learners (a node's, or a local run's):
// kill (exit reason kill: as abrupt as a crash), restart, pause, resume, throttle; kill_node
// SIGKILLs this process; corrupt_update only where drill hooks are on. Errors: no such learner here,
// drill hooks off.
Expected<nlohmann::json> apply_learner_control(caf::actor_system& system, const messages::LearnerControl& control);
// (Drill hooks: actors/authorization.hpp, set_drill_hooks.)

// How the admin actor reaches the learners: in a coordinator through the gateway to the node that
// runs them; in a local run directly (apply_learner_control).
using LearnerControlFn = std::function<Expected<nlohmann::json>(const messages::LearnerControl&)>;

struct AdminSpec {
  std::shared_ptr<AdminSessions> sessions;
  std::shared_ptr<RemoteCounters> counters;
  std::shared_ptr<net::LinkStats> stats;
  diloco::Mode mode = diloco::Mode::sync;
  std::string run_dir;
  double started_s = 0;  // monotonic seconds when the coordinator started
  int learner_slots = 0;
  LearnerControlFn control;
  std::shared_ptr<actors::EventLog> events;
  actors::SyncerAccounting accounting_at_start;  // a resumed version's (goodput ledger)
  double ledger_offset_s = 0;  // the run's time before started_s that the ledger covers (a carried ledger)
  std::function<void()> drain;  // the console's `drain` (a coordinator: counters->drain_requested)
};

caf::actor spawn_admin(caf::actor_system& system, AdminSpec spec);

// The learner control an admin verb is carried out as, by the node that runs the learner (none: the
// verb acts on the coordinator itself).
std::optional<messages::ControlAction> control_action_of(messages::AdminVerb verb);

}  // namespace archipelago::remote

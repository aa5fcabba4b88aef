// Who may send what to whom: every message that can arrive from outside this process.
//
// Reachable from the network are only the actors whose handles a process hands out:
//
//   actor (process)         from                        message                         requires
//   ----------------------  --------------------------  ------------------------------  -----------------------------
//   gateway (coordinator)   anyone who connects         nodejoin                        the join token (net::verify_join)
//                           this process                stop                            the process key
//   node link (coordinator) its admitted node           up: Join, FragmentUpdate, Leave  the session key; the sender id
//                                                           to syncer; Fetch to the        is a learner of the node's
//                                                           store; Heartbeat, Leave,       admitted slots
//                                                           SlotReport to monitor
//                           this process (gateway)      stop                            the process key
//   watcher (node)          its coordinator's link      deliver, stop, LearnerControl   the session key
//                           this process                init                            the process key
//   learner (node)          this process only           envelopes                       a sender on this node
//
// Everything else (another kind, a role actor's message from a node — Persist, AdminRequest,
// GlobalFragment —, a missing or wrong key, an unknown message shape) is refused, counted by
// reason and logged once per actor, kind and reason. The role actors (syncer, store, monitor,
// supervisors, evaluator) are named in actors/directory.hpp, not in CAF's registry, and their
// handles never cross a process boundary: no peer can address them.
//
// Keys: the session key is random per admitted node session (16 bytes from the OS, hex) and travels
// in the gateway's join answer (inside TLS when [net] tls); the process key is random per process
// and never leaves it, so a message carrying it was sent from inside. Keys are compared in
// constant time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/logger.h>

#include "messages/message_types.hpp"

namespace archipelago::actors {

enum class Refusal {
  unauthenticated,     // no key, or a message shape no authenticated peer sends
  wrong_key,           // a session or process key that does not match
  kind_not_allowed,    // an authenticated node sent a kind its role may not send to that actor
  foreign_learner,     // an envelope whose sender is not a learner of the session's slots
  malformed,           // not a decodable envelope, or an unknown role
};
const char* to_string(Refusal refusal);

// The kinds a node session may send to the coordinator actor `role` (syncer, store, monitor).
bool node_may_send(caf::atom_value role, const messages::Message& body);

// 16 random bytes from the OS as 32 hex characters.
std::string random_key();
// This process's key, made once; it is never sent anywhere.
const std::string& process_key();
bool keys_equal(const std::string& a, const std::string& b);  // constant time

// Refusals of one process, by reason and by (actor, kind, reason). Any thread.
class Refusals {
 public:
  void refuse(const std::string& actor, const std::string& kind, Refusal reason, spdlog::logger& log,
              const std::string& detail = "");
  int64_t total() const;
  int64_t count(Refusal reason) const;
  nlohmann::json to_json() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, int64_t> by_reason_;
  std::map<std::string, int64_t> by_kind_;  // "actor kind reason" -> count
};

// Makes every message no handler of `self` takes a refusal: counted as unauthenticated under
// `actor`, logged once, a request answered with an error (the peer learns nothing else).
void refuse_unmatched(caf::scheduled_actor* self, std::string actor, std::shared_ptr<Refusals> refusals,
                      std::shared_ptr<spdlog::logger> log);

// A short name for an unmatched CAF message: its leading atom, else its first element's type.
std::string message_kind(const caf::type_erased_tuple& message);

// Drill hooks (`archipelago node --drill-hooks`): whether this process obeys corrupt_update. Off
// unless set; recovery drills turn it on for the nodes they start, and nothing else should.
void set_drill_hooks(bool on);
bool drill_hooks();

}  // namespace archipelago::actors

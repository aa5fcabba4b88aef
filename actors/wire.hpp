// What actors send one another: one encoded messages::Envelope = one CAF message holding a
// `WireBytes` (messages/framing.hpp: an Outbox wraps and chunks, a TensorInbox reassembles), the
// atoms that tag requests and timers, the names actors are registered under, and the admin
// request/reply helpers.
//
// Two message shapes exist between actors:
//   (WireBytes)             one-way envelope (join, update, fragment, heartbeat, persist, leave ...)
//   (admin_atom, WireBytes) AdminRequest envelope; the reply is one AdminReply envelope.
// Plus CAF's own system messages (down/exit) and self-sent timer atoms (never between actors).
// Free functions are pure (any thread) but ask_admin, which blocks its caller on a scoped actor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/string_view.hpp>
#include <nlohmann/json.hpp>

#include "actors/status.hpp"
#include "common/error.hpp"
#include "diloco/learner_id.hpp"
#include "messages/envelope.hpp"
#include "messages/framing.hpp"

namespace archipelago::actors {

// Atoms (<= 10 characters). admin_atom tags request/reply; the others are self-sent timers.
using admin_atom = caf::atom_constant<caf::atom("admin")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using init_atom = caf::atom_constant<caf::atom("init")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using eval_atom = caf::atom_constant<caf::atom("eval")>;
// Sent to a learner (or across processes to a node): finish the in-flight work, leave, exit normally.
using stop_atom = caf::atom_constant<caf::atom("stop")>;
// Store commands of the admin actor (local only): pin / unpin a version, append / read the audit log.
using pin_atom = caf::atom_constant<caf::atom("pin")>;
using unpin_atom = caf::atom_constant<caf::atom("unpin")>;
using audit_atom = caf::atom_constant<caf::atom("audit")>;
// The admin actor's `set` of a runtime-tunable syncer key (local only): (tune, key, value).
using tune_atom = caf::atom_constant<caf::atom("tune")>;
// failure monitor -> syncer, in process: the goodput ledger's carry (accounting.hpp, LedgerCarry) as
// JSON text, for the next committed version's manifest.
using ledger_atom = caf::atom_constant<caf::atom("ledger")>;
// To a learner (local only, with the process key): (pause, key, true | false); (restart, key).
using pause_atom = caf::atom_constant<caf::atom("pause")>;
// To a learner (local only, with the process key): (throttle, key, factor >= 1); (corrupt, key): its
// next update leaves with one payload bit flipped (drill hook).
using throttle_atom = caf::atom_constant<caf::atom("throttle")>;
using corrupt_atom = caf::atom_constant<caf::atom("corrupt")>;
// A store actor's prepare worker -> the store actor (local only): (prepared, ticket) is done.
using prepared_atom = caf::atom_constant<caf::atom("prepared")>;
// The syncer -> its store (local only), as a request after a window of a commit's chunks: the
// (empty) answer says the store has taken every chunk sent before it.
using taken_atom = caf::atom_constant<caf::atom("taken")>;
// To the syncer (local only): commit every fragment with pending contributions now.
using checkpoint_atom = caf::atom_constant<caf::atom("checkpoint")>;
// A learner control for a node (LearnerControl): gateway -> node link -> node watcher.
using control_atom = caf::atom_constant<caf::atom("control")>;

// Names in the actor registry; a restarted actor is registered again under the same name.
inline caf::atom_value syncer_name() { return caf::atom("syncer"); }
inline caf::atom_value store_name() { return caf::atom("store"); }
inline caf::atom_value monitor_name() { return caf::atom("monitor"); }
inline caf::atom_value evaluator_name() { return caf::atom("evaluator"); }
inline caf::atom_value learner_supervisor_name() { return caf::atom("lsup"); }
caf::atom_value learner_name(int index);  // "l<index>"
using diloco::learner_id;     // diloco/learner_id.hpp
using diloco::learner_ids;
using diloco::learner_index;

// The framing (messages/framing.hpp), under the names the actors have always used.
using messages::WireBytes;
using messages::Outbox;
using messages::TensorInbox;
using messages::unwrap;
using messages::bytes_to_floats;

// Admin helpers: a request envelope and the JSON of a reply.
WireBytes admin_request(const std::string& sender, const std::string& command, std::vector<std::string> args = {});
WireBytes admin_reply(const std::string& sender, uint64_t request_id, bool ok, const std::string& text,
                      const nlohmann::json& json);
// Parses an AdminRequest (command + args) out of wire bytes.
Expected<messages::AdminRequest> read_admin_request(WireBytes&& bytes);
Expected<nlohmann::json> read_admin_reply(WireBytes&& bytes);
// Asks the actor registered as `name` (from outside any actor: a scoped actor that blocks up to
// `timeout_s`) and returns the JSON of its reply; unavailable when nothing is registered or no reply came.
Expected<nlohmann::json> ask_admin(caf::actor_system& system, caf::atom_value name, const std::string& sender,
                                   const std::string& command, std::vector<std::string> args, double timeout_s);

// The status of the actor registered as `name`, decoded into its struct T (status.hpp).
template <class T>
Expected<T> ask_status(caf::actor_system& system, caf::atom_value name, const std::string& sender, double timeout_s) {
  auto j = ask_admin(system, name, sender, "status", {}, timeout_s);
  if (!j) return j.error();
  return decode_status<T>(*j, caf::to_string(name));
}


// Seconds on the process-wide monotonic clock: every actor stamps events with it, so times from
// different actors (a kill, a rejoin, a merge) can be compared.
double monotonic_seconds();
}  // namespace archipelago::actors

// The coordinator's gateway actor and its per-node links (coordinator side of
// remote/remote_protocol.hpp). Only this process's plane (remote/server.hpp) talks to it, with the
// process key, after it checked a node's proof of the join token or a console's proof of the admin
// token; no peer can address it.
//
// gateway: answers `nodejoin` by admitting the node to a contiguous range of learner slots
// (train.learners in all): the one the node asks for (the range its running learners had before
// the coordinator restarted) if free, else the range this node name held before if free, else the
// lowest free one. It spawns a `link` for the session and answers with the run's configuration,
// the site topology and the link's handle. A slot range is free again when its link ends.
//
//   link (one per admitted node session; ends when the plane's sink proxy of the node is down, i.e.
//   the node process died, froze past the connection timeout, or left):
//     (up, session key, role, learner, bytes) -> counts the bytes on the node's link
//        (net::LinkStats), refuses what actors/authorization.hpp does not allow (a wrong key, a kind
//        the role does not take from a node, a sender outside the admitted range or not in
//        canonical form), then re-sends it to the role's current actor *as* that learner's
//        downlink for the role
//     (stop, process key)        -> tells the node the run is over
//   downlink (one per learner incarnation and role): every reply or broadcast of the role actor
//     goes through the link's downlink ShapedLink to the node's sink; it ends with its learner
//     (same exit reason, so the failure monitor sees a dead learner at once) or with its link.
//
// (adminjoin, process key, peer) -> (accepted, reason, session key, admin actor): an operator's
// console session (remote/admin.hpp). (stop, process key) -> every link tells its node the run is
// over. Status: RemoteCounters (nodes, slots, joins, refusals), read directly by the coordinator.
//
// Contract (all three actors are reached only by this process's plane and by their own children):
//   gateway  (nodejoin, process key, WireBytes{NodeJoin}, learners, preferred, sink) -> JoinReply
//            (adminjoin, process key, peer) -> (accepted, reason, session key, admin actor)
//            (stop, process key); (control, process key, WireBytes{LearnerControl}) -> (ok, reason)
//   link     (up, session key, role, learner, WireBytes) ; (stop, key) ; (control, key, WireBytes)
//   downlink WireBytes from the role actor -> the node's sink, through the link's ShapedLink
// Guarantees: an envelope reaches an actor only from a session the plane authenticated, and only
// about that session's own learners; every refusal is counted (RemoteCounters::refusals).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <nlohmann/json.hpp>

#include "actors/authorization.hpp"
#include "net/auth.hpp"
#include "net/link_stats.hpp"
#include "net/sites.hpp"
#include "remote/edge.hpp"

namespace archipelago::remote {

class AdminSessions;

// Message counts per node link, for the expected-bytes check (whole tensors, counted at chunk 0).
struct LinkTally {
  int64_t updates_received = 0;          // FragmentUpdate tensors from the node's learners
  int64_t global_fragments_sent = 0;     // GlobalFragment tensors to them (broadcasts and state fetches)
  int64_t messages_received = 0;
  int64_t messages_sent = 0;
};

// Shared between the gateway, its links and the coordinator driver (any thread).
struct RemoteCounters {
  std::atomic<int64_t> joins_accepted{0};
  std::atomic<int64_t> joins_refused_wrong_token{0};
  std::atomic<int64_t> joins_refused_missing_token{0};
  std::atomic<int64_t> joins_refused_identity{0};  // under TLS: a Join naming another node than its certificate
  std::atomic<int64_t> joins_refused_bad_name{0};  // a node, site or device name outside net/names.hpp's rule
  std::atomic<int64_t> joins_refused_other{0};
  std::atomic<int64_t> rejected_foreign{0};  // envelopes from a learner id outside the session's range
  std::atomic<int64_t> admin_sessions_accepted{0};
  std::atomic<int64_t> admin_sessions_refused{0};  // wrong or missing admin token, or none configured
  std::atomic<bool> drain_requested{false};         // the console's `drain`: the coordinator stops cleanly
  std::mutex mutex;
  std::map<std::string, LinkTally> tallies;  // node name -> counts (guarded by mutex)
  std::set<std::string> learners_joined;     // learner ids that joined the syncer (guarded by mutex)
  nlohmann::json nodes = nlohmann::json::array();  // the admitted sessions (guarded by mutex)
  int learner_slots = 0;
  actors::Refusals refusals;                         // messages refused at the gateway and the links
  std::shared_ptr<const remote::EdgeCounters> edge;  // the plane's limits hit (null: no plane yet)

  nlohmann::json to_json();
};

struct GatewaySpec {
  std::shared_ptr<const net::Secret> secret;  // null: this gateway takes no nodes (a local run)
  std::string config_toml;     // the run's effective configuration, sent to every node
  std::string topology_toml;   // [sites]/[links] text ("" when none)
  std::shared_ptr<const net::SiteTopology> topology;  // null when none
  std::string site;            // the coordinator's site
  int learner_slots = 0;       // train.learners
  std::shared_ptr<net::LinkStats> stats;
  std::shared_ptr<RemoteCounters> counters;
  // Admin sessions (archipelago console): refused when no admin secret is configured.
  std::shared_ptr<const net::Secret> admin_secret;
  caf::actor admin;
  std::shared_ptr<AdminSessions> admin_sessions;
  // A node's learner slots stay held for it this long after its session ends (net.slot_grace_s):
  // no other node takes them meanwhile, so one frozen for a few seconds gets its own range back.
  double slot_grace_s = 0;
};

// The counters' refusals as a handle that keeps the counters alive (for refuse_unmatched).
inline std::shared_ptr<actors::Refusals> refusals_of(const std::shared_ptr<RemoteCounters>& counters) {
  return std::shared_ptr<actors::Refusals>(counters, &counters->refusals);
}

caf::actor spawn_gateway(caf::actor_system& system, GatewaySpec spec);

}  // namespace archipelago::remote

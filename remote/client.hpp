// The dialling side of the cross-site plane: a node's session with its coordinator, and a
// console's admin session (remote/plane.capnp; the serving side is remote/server.hpp).
//
// Both dial host:port (TLS with the run's CA when configured: the coordinator's certificate must
// name the host dialled; plaintext only to a loopback address unless insecure_plaintext), ask the
// Gateway for a nonce and prove their token with it (remote/proof.hpp): the token never leaves
// this process. A client pings every ping_interval_s and cuts a connection whose peer has not
// answered for idle_timeout_s (a frozen coordinator).
//
// NodePlane::join hands the node a local `link` actor that stands for the coordinator's link:
// it takes (up, key, role, learner, bytes) from the node's facades, sends each envelope as the
// Session method of its kind (updates as ordered streaming calls with flow control; heartbeats
// and slot reports at once, never behind them) and tells the coordinator when a learner
// incarnation it spoke for ends. What the coordinator sends arrives at the `watcher` given to
// join as (deliver, key, role, learner, bytes), (control, key, bytes) and (stop, key). When the
// connection ends, the link actor ends (exit reason remote_link_unreachable).
// Call from one thread (not the plane's).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "common/error.hpp"
#include "net/auth.hpp"
#include "remote/edge.hpp"

namespace archipelago::remote {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::optional<TlsFiles> tls;
  bool insecure_plaintext = false;
  EdgeLimits limits;
};

struct NodeJoin {
  std::vector<char> join;  // Envelope Join{node, site, device}
  int learners = 1;
  int preferred_first = -1;
  std::string certificate_name;  // under TLS, this node's certificate's: the proof is bound to it (join_purpose)
};

struct NodeSession {
  std::vector<char> welcome;  // Envelope Welcome: accepted, or the refusal and its reason
  std::string config_toml, topology_toml, coordinator_site;
  std::string tokenizer_model;  // the run's SentencePiece model ("" for byte-level)
  int first_learner = -1;
  int shard = 0, shards = 1;  // the syncer shard that answered (it owns fragment p when p mod shards = shard)
  caf::actor link;            // null when refused
  std::string key;            // what the facades and the watcher use in this process
};

class NodePlane {
 public:
  static Expected<std::unique_ptr<NodePlane>> start(caf::actor_system& system, Endpoint endpoint);
  ~NodePlane();
  NodePlane(const NodePlane&) = delete;
  NodePlane& operator=(const NodePlane&) = delete;

  // Dials, proves the token, joins. A refusal is a NodeSession with a refusing Welcome; errors
  // are the dial's (unreachable, TLS, timeout). Ends the previous session first.
  Expected<NodeSession> join(const net::Secret& secret, NodeJoin request, caf::actor watcher, double timeout_s);
  // Ends the current session (its link actor ends).
  void leave();

  std::shared_ptr<const EdgeCounters> counters() const;

  struct Impl;

 private:
  explicit NodePlane(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A console's session: one Admin capability.
class AdminClient {
 public:
  // Errors: unreachable, TLS, refused (the reason the coordinator gave), timeout.
  static Expected<std::unique_ptr<AdminClient>> open(Endpoint endpoint, const net::Secret& admin_secret, double timeout_s);
  ~AdminClient();
  AdminClient(const AdminClient&) = delete;
  AdminClient& operator=(const AdminClient&) = delete;

  // One AdminCommand envelope -> its AdminReply envelope. Errors: the session ended, timeout.
  Expected<std::vector<char>> request(const std::vector<char>& command, double timeout_s);

  struct Impl;

 private:
  explicit AdminClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace archipelago::remote

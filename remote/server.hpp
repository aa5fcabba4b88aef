// The coordinator's side of the cross-site plane: one port serving Cap'n Proto RPC (over mutual TLS
// unless the listen address is loopback and TLS is off), and the bridge from its calls to the
// process's CAF actors.
//
//   accept ──limits (total, per address)──> [TLS handshake: verifyClients, timeout] ──> Gateway
//   Gateway.challenge -> nonce;  Gateway.join(proof of the join token, NodeSink) -> Session
//                                Gateway.openAdmin(proof of the admin token)     -> Admin
//
// A peer reaches nothing but the Gateway of its connection until it proves a secret. A Session is
// bound to the learner slots the gateway actor (remote/gateway.hpp) admitted: each of its methods
// takes one envelope kind (remote/plane.capnp), whose sender must be a canonical learner id of
// those slots; the bridge sends it to the session's link actor on behalf of a local proxy of the
// learner incarnation, so the link and the role actors see what they saw across CAF before.
// Replies and broadcasts the link sends to the session's sink proxy go out as NodeSink.deliver
// streaming calls, in order, with flow control; stop and learner control are sent at once. When
// the connection ends (the peer left, was silent past idle_timeout_s, broke a limit), the sink
// proxy and the learner proxies end too, and with them the link and its downlinks.
// Construct and destroy from one thread; counters() may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "common/error.hpp"
#include "net/auth.hpp"
#include "remote/edge.hpp"

namespace archipelago::remote {

struct RemoteCounters;  // remote/gateway.hpp

struct ServerSpec {
  caf::actor_system* system = nullptr;
  caf::actor gateway;                                 // the gateway actor (nodejoin, adminjoin)
  std::shared_ptr<const net::Secret> join_secret;     // null: every join is refused
  std::shared_ptr<const net::Secret> admin_secret;    // null: every admin session is refused
  std::shared_ptr<RemoteCounters> counters;           // joins and refusals, shared with the gateway
  std::string host = "127.0.0.1";
  uint16_t port = 0;                                  // 0: any free port
  std::optional<TlsFiles> tls;                        // none: plaintext (loopback only, or insecure)
  bool insecure_plaintext = false;                    // allow plaintext off loopback
  EdgeLimits limits;
  std::string tokenizer_model;                        // sent to every admitted node (empty: byte-level)
  int shard = 0, shards = 1;                          // the syncer shard this port serves (JoinAnswer)
};

class Server {
 public:
  // Listens at once. Errors: plaintext on a non-loopback address without insecure_plaintext (the
  // message names --insecure-plaintext), a TLS file, an address in use.
  static Expected<std::unique_ptr<Server>> start(ServerSpec spec);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  uint16_t port() const;
  bool tls() const;
  std::shared_ptr<const EdgeCounters> counters() const;

  struct Impl;

 private:
  explicit Server(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

// The check start() makes: plaintext only on loopback unless explicitly allowed.
Status check_plaintext_allowed(const std::string& host, bool tls, bool insecure_plaintext, const char* what);

}  // namespace archipelago::remote

// What the coordinator's and a node's actors exchange through the cross-site plane (remote/), in
// each process. The plane carries encoded messages::Envelope bytes as Cap'n Proto RPC calls
// (remote/plane.capnp); in each process a bridge turns them into these CAF messages and back, so
// the actors never see the network:
//
//   plane -> gateway          (nodejoin, process key, WireBytes Join{node, site, device},
//                              int32 learners, int32 preferred_first, actor sink)
//                             -> (WireBytes Welcome, string config_toml, string topology_toml,
//                                 string coordinator_site, int32 first_learner, actor link,
//                                 string session_key)
//                             The plane has checked the node's proof of the join token first. A
//                             refusal is the same tuple with Welcome{accepted=false, refusal,
//                             reason}, an empty link and an empty key.
//   plane -> gateway          (adminjoin, process key, string peer) -> (bool, reason, key, admin actor)
//   node facade  -> link      (up, key, atom role, actor learner, WireBytes)      learner -> coordinator
//   downlink     -> sink      (deliver, key, atom role, actor learner, WireBytes) coordinator -> learner
//   link         -> sink      (stop, key)   the run is over: learners finish their in-flight work, leave
//
// On the coordinator `learner` is the plane's local proxy of one learner incarnation of the node
// (it ends when the node says that incarnation ended, or with the session); `sink` is the plane's
// proxy of the node's NodeSink. On the node `link` is the plane's proxy of the session; the
// watcher delivers what arrives *as* the node's facade of the role, so the learner keeps talking
// to its facade. Identity across processes is therefore: learner id (envelope, checked against the
// session's slots by the plane and the link) + the admitting session.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include "common/error.hpp"
#include "remote/edge.hpp"

namespace archipelago::remote {

using nodejoin_atom = caf::atom_constant<caf::atom("nodejoin")>;
using adminjoin_atom = caf::atom_constant<caf::atom("adminjoin")>;
using up_atom = caf::atom_constant<caf::atom("up")>;
using deliver_atom = caf::atom_constant<caf::atom("deliver")>;

// How processes connect: shared by coordinator and node (config [net]).
struct TransportOptions {
  double heartbeat_interval_s = 0.5;   // a client's ping of its session
  double connection_timeout_s = 3.0;   // a session silent this long is cut off (both sides)
  double join_timeout_s = 10.0;        // a node's join, dialled, proved and answered, or failed
  double reconnect_initial_s = 0.2;    // node reconnect backoff (net::Backoff), first delay
  double reconnect_max_s = 5.0;        // ... cap
  bool tls = false;                    // mutual TLS with the run's CA (archipelago ca)
  std::string tls_certificate;         // PEM file of this process's certificate chain
  std::string tls_key;                 // PEM file of its private key
  std::string tls_ca;                  // PEM file of the CA that signed every peer's certificate
  bool insecure_plaintext = false;     // allow plaintext off loopback (--insecure-plaintext)
  remote::EdgeLimits limits;           // [net] max_message_mib, max_connections, ... (heartbeat and timeout above)
  double slot_grace_s = 30.0;          // the coordinator holds a dropped node's learner slots for it this long
};

// What a node's learners present in their Join to the syncer, and what the coordinator's syncer
// expects: across processes the plane's session is the authentication (the node proved the join
// token to the Gateway), so the token itself is never put in a message.
inline constexpr const char* kSessionJoinToken = "authenticated-by-the-plane";

// Errors: TLS on without its three files, or a file that does not exist.
Status validate_transport(const TransportOptions& options);
// The plane's limits (ping interval and idle timeout from the heartbeat and connection timeout).
remote::EdgeLimits edge_limits(const TransportOptions& options);
// The TLS files when tls is on.
std::optional<remote::TlsFiles> tls_files(const TransportOptions& options);

// "host:port" -> (host, port); the error names the text.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
Expected<HostPort> parse_host_port(const std::string& text);

}  // namespace archipelago::remote

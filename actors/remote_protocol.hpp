// What crosses a process boundary between a coordinator and its nodes, besides Envelope bytes.
//
// Every payload is still one encoded messages::Envelope (WireBytes, a std::vector<char>, which CAF
// 0.17.6 serializes natively); the shapes below only add routing, and use nothing but CAF's
// built-in types (atoms, int32, strings, actor handles), so no process needs a type registration
// and nothing can arrive empty.
//
//   node watcher -> gateway   (nodejoin, WireBytes Join{node, site, device, authToken},
//                              int32 learners, int32 preferred_first, actor watcher)
//                             -> (WireBytes Welcome, string config_toml, string topology_toml,
//                                 string coordinator_site, int32 first_learner, actor link,
//                                 string session_key)
//                             A refusal is the same tuple with Welcome{accepted=false, refusal,
//                             reason}, an empty link and an empty key.
//   node facade  -> link      (up, key, atom role, actor learner, WireBytes)      learner -> coordinator
//   downlink     -> watcher   (deliver, key, atom role, actor learner, WireBytes) coordinator -> learner
//   link         -> watcher   (stop, key)   the run is over: learners finish their in-flight work, leave
//
// `key` is the session key; actors/authorization.hpp says what each side accepts and refuses.
// `role` is the directory name (actors/directory.hpp) of the actor a learner addressed (syncer, store, monitor). On the
// coordinator, the link re-sends each message to that role's current actor *as* a per-learner
// downlink actor, so replies and broadcasts come back through the link; on the node, the watcher
// delivers them *as* the node's facade of that role, so the learner keeps talking to its facade.
// Identity across processes is therefore: learner id (envelope) + the admitting session.
//
// Both processes set CAF's middleman heartbeat and connection timeout (they must match on both
// sides, or healthy idle peers are dropped), so a frozen peer is detected in about
// connection_timeout_s, a crashed one at once (its TCP connection closes).
#pragma once

#include <cstdint>
#include <string>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>

#include "common/error.hpp"

namespace archipelago::actors {

using nodejoin_atom = caf::atom_constant<caf::atom("nodejoin")>;
using adminjoin_atom = caf::atom_constant<caf::atom("adminjoin")>;
using up_atom = caf::atom_constant<caf::atom("up")>;
using deliver_atom = caf::atom_constant<caf::atom("deliver")>;

// How processes connect: shared by coordinator and node (config [net]).
struct TransportOptions {
  double heartbeat_interval_s = 0.5;   // CAF middleman heartbeat (both sides)
  double connection_timeout_s = 3.0;   // a peer silent this long is cut off (both sides)
  double join_timeout_s = 10.0;        // a node's join request, answered or failed
  double reconnect_initial_s = 0.2;    // node reconnect backoff (net::Backoff), first delay
  double reconnect_max_s = 5.0;        // ... cap
  bool tls = false;                    // CAF's OpenSSL module between processes
  std::string tls_certificate;         // PEM file of this process's certificate
  std::string tls_key;                 // PEM file of its private key
  std::string tls_ca;                  // PEM file of the CA that signed every peer's certificate
};

// Loads the io middleman (and the OpenSSL manager when options.tls) into `config` and sets the
// heartbeat and timeout. Errors: a TLS file that does not exist.
Status configure_transport(caf::actor_system_config& config, const TransportOptions& options);

// "host:port" -> (host, port); the error names the text.
struct HostPort {
  std::string host;
  uint16_t port = 0;
};
Expected<HostPort> parse_host_port(const std::string& text);

}  // namespace archipelago::actors

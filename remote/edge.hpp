// The limits at the edge of a process's cross-site plane and the counters of every limit hit.
//
// Everything a peer can make this process spend is bounded here before it reaches an actor: the
// bytes of one message (Cap'n Proto's traversal limit, checked before a segment is allocated), the
// connections in total and from one address, the time to authenticate (TLS handshake plus the
// first successful join or admin proof), the silence a session may keep, and the bytes a session
// may have in flight each way. Each limit is a [net] key (config/default.toml); each hit is
// counted in EdgeCounters and shown in the coordinator's status and /metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "net/session_budget.hpp"

namespace archipelago::remote {

struct TlsFiles {
  std::string certificate;  // PEM chain of this process (leaf first)
  std::string key;          // PEM private key of that certificate
  std::string ca;           // PEM certificate of the run's CA: every peer must be signed by it
};

struct EdgeLimits {
  uint64_t max_message_bytes = 16ull << 20;      // one RPC message (a chunk is <= 1 MiB)
  int max_connections = 256;                     // open connections in total
  int max_connections_per_address = 16;          // ... from one peer address
  double handshake_timeout_s = 5.0;              // TLS handshake + join/openAdmin proof
  double idle_timeout_s = 3.0;                   // a session silent this long is cut (a frozen peer)
  double ping_interval_s = 0.5;                  // how often a client proves it is alive
  uint64_t max_pending_bytes = 256ull << 20;     // per session: incoming calls in flight, outgoing queue
  int max_failed_proofs = 3;                     // wrong proofs on one connection before it is cut
  // The door: before a proof a connection may hold frames of at most pre_auth_message_bytes, must
  // send its first byte within first_byte_timeout_s, and at most max_unauthenticated of them are
  // open at once (past that the plane stops accepting until one proves or closes: the kernel's
  // backlog holds the rest), so most of max_connections stays for sessions.
  uint64_t pre_auth_message_bytes = 8ull << 10;
  double first_byte_timeout_s = 1.0;
  int max_unauthenticated = 64;
  net::SessionLimits session;                    // per session: calls and bytes per second it may send
};

// Incremented on the plane's thread, read from any thread.
struct EdgeCounters {
  std::atomic<int64_t> connections_accepted{0};
  std::atomic<int64_t> connections_open{0};
  std::atomic<int64_t> refused_connection_limit{0};   // max_connections reached
  std::atomic<int64_t> refused_address_limit{0};      // max_connections_per_address reached
  std::atomic<int64_t> tls_handshakes_failed{0};      // no or untrusted certificate, bad bytes, timeout
  std::atomic<int64_t> handshake_timeouts{0};         // not authenticated within handshake_timeout_s
  std::atomic<int64_t> closed_unauthenticated{0};     // ended (by the peer or an error) before a proof
  std::atomic<int64_t> frames_refused_unauthenticated{0};  // a frame past pre_auth_message_bytes before a proof (cut)
  std::atomic<int64_t> first_byte_timeouts{0};        // no byte within first_byte_timeout_s (cut)
  std::atomic<int64_t> accept_paused{0};              // times the plane stopped accepting: max_unauthenticated open
  std::atomic<int64_t> idle_timeouts{0};              // a session silent past idle_timeout_s
  std::atomic<int64_t> proofs_refused{0};             // wrong or missing join/admin proofs
  std::atomic<int64_t> pending_limit_hits{0};         // a session past max_pending_bytes (cut)
  std::atomic<int64_t> calls_refused{0};              // a session call refused (kind, learner, handle)
  std::atomic<int64_t> budget_delays{0};              // a session call answered late: over its rate (net::SessionBudget)
  std::atomic<int64_t> budget_cuts{0};                // a session cut: its debt past net.session_max_delay_s
  std::atomic<int64_t> bytes_received{0};             // envelope bytes of session calls
  std::atomic<int64_t> bytes_sent{0};                 // envelope bytes of sink calls

  nlohmann::json to_json() const;
};

// Whether `host` names this machine's loopback (127.0.0.0/8, ::1, localhost).
bool is_loopback(const std::string& host);

}  // namespace archipelago::remote

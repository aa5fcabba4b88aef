// One bulk upload, timed: `total_bytes` sent in `chunk_bytes` pieces from a sending thread to a
// receiving thread of this process over loopback TCP, by one of four carriers:
//
//   raw_tcp_copy    plain sockets (send with MSG_NOSIGNAL, poll), nothing on top: the floor
//   raw_tls_copy    the same bytes through kj-tls (remote/tls.hpp's contexts, mutual TLS)
//   openssl_copy    the same bytes through OpenSSL straight on blocking sockets (one stream)
//   plane_copy      Cap'n Proto RPC of remote/plane.capnp: Gateway.join -> Session, then
//                   Session.update streaming calls (the product's ReaderOptions and flow limit),
//                   received by a bench Session that counts bytes; optionally over kj-tls
//   product_copy    the product's own remote::Server and remote::NodePlane, with bench CAF actors
//                   as gateway, link and learner (plane_copy plus both bridges and their actor hops)
//
// Every carrier runs sender and receiver on their own threads (each carrier its own kj event loop
// per thread), and times the same way: the clock starts on the sender once every connection is
// set up (connected, TLS handshakes done, sessions joined) and stops on the receiver when its
// count of payload bytes reaches total_bytes. CPU is getrusage(RUSAGE_THREAD) of each thread over
// its transfer (the receiver's from its last accepted connection: what the coordinator's plane
// thread would spend); for product_copy, the CPU clocks of the two planes' loop threads, and
// separately the whole process but the learner's thread (the actor systems' threads included). `route` lets a test put something between them (bench/multisite/delay_line.hpp):
// it gets the receiver's port and returns the port the sender dials.
// Call from one thread at a time; each call makes and ends its own threads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "remote/edge.hpp"

namespace multisite_bench {

// How `streams` uploads share the receiver: one connection each, one connection with a Session
// each (each its own flow-control window), or one Session with `streams` update streams at once
// (one window). Raw carriers always use one connection per stream.
enum class Fanout { connections, sessions, calls };
const char* to_string(Fanout fanout);

struct TransferSpec {
  uint64_t total_bytes = 100'000'000;
  uint64_t chunk_bytes = 1ull << 20;           // one update call (the product cuts updates at 1 MiB)
  int streams = 1;                             // uploads at once, total_bytes / streams each
  Fanout fanout = Fanout::connections;
  std::optional<archipelago::remote::TlsFiles> tls;  // none: plaintext
  archipelago::remote::EdgeLimits limits;      // traversal limit (max_message_bytes), flow limit (max_pending_bytes)
  int send_buffer_bytes = 0;                   // > 0: SO_SNDBUF of the sender's sockets (Cap'n Proto's stream window follows it)
  bool reference_payload = false;              // plane_copy: the chunk referenced in place (Orphanage::referenceExternalData), not copied into the message
  std::function<uint16_t(uint16_t)> route;     // receiver port -> port to dial; empty: the receiver's
};

struct TransferResult {
  bool ok = false;
  std::string error;
  double seconds = 0;          // first byte sent -> last byte counted
  uint64_t bytes = 0;          // payload bytes the receiver counted
  double receiver_cpu_s = 0;   // user + system of the receiving thread
  double sender_cpu_s = 0;     // ... of the sending thread
  double process_cpu_s = 0;    // product_copy only: the whole process but the learner's thread (both planes, both actor systems)
  int window_bytes = 0;        // SO_SNDBUF of the (first) sending socket at the end: Cap'n Proto's stream window

  double gigabytes_per_s() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
  double receiver_cpu_s_per_gb() const { return bytes > 0 ? receiver_cpu_s / (bytes / 1e9) : 0; }
};

TransferResult raw_tcp_copy(const TransferSpec& spec);
TransferResult raw_tls_copy(const TransferSpec& spec);
TransferResult openssl_copy(const TransferSpec& spec);
TransferResult plane_copy(const TransferSpec& spec);
// One stream only (a node holds one session); spec.streams and fanout are ignored.
TransferResult product_copy(const TransferSpec& spec);

// User + system CPU seconds of the calling thread so far.
double thread_cpu_s();

}  // namespace multisite_bench

#include "remote/edge.hpp"

#include <arpa/inet.h>

namespace archipelago::remote {

nlohmann::json EdgeCounters::to_json() const {
  return {{"connections_accepted", connections_accepted.load()},
          {"connections_open", connections_open.load()},
          {"refused_connection_limit", refused_connection_limit.load()},
          {"refused_address_limit", refused_address_limit.load()},
          {"tls_handshakes_failed", tls_handshakes_failed.load()},
          {"handshake_timeouts", handshake_timeouts.load()},
          {"closed_unauthenticated", closed_unauthenticated.load()},
          {"frames_refused_unauthenticated", frames_refused_unauthenticated.load()},
          {"first_byte_timeouts", first_byte_timeouts.load()},
          {"accept_paused", accept_paused.load()},
          {"idle_timeouts", idle_timeouts.load()},
          {"proofs_refused", proofs_refused.load()},
          {"pending_limit_hits", pending_limit_hits.load()},
          {"calls_refused", calls_refused.load()},
          {"budget_delays", budget_delays.load()},
          {"budget_cuts", budget_cuts.load()},
          {"bytes_received", bytes_received.load()},
          {"bytes_sent", bytes_sent.load()}};
}

bool is_loopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return false;
}

}  // namespace archipelago::remote

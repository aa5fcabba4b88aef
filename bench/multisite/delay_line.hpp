// An emulated WAN link on loopback, in user space (tc netem is not available on this kernel): a
// TCP relay that every connection of a transfer passes through, both ways.
//
// Each direction is one shared link (net::LinkShaper: FIFO, `bandwidth`, one-way `latency`), so
// connections compete for it as flows on one WAN link would. The relay reads what a sender writes,
// and writes it to the far side at its release time. It stops reading a connection while more
// than `window_bytes` of it are unacknowledged — read, but not yet delivered and answered, which
// on a real link takes release + latency — standing in for the sender kernel's TCP window (its
// send buffer, at most net.ipv4.tcp_wmem's maximum): the most a TCP flow keeps in flight.
//
// What it does not emulate: slow start, loss and congestion control; the two loopback legs on
// either side of it add their own (small) buffering and copies. So it is faithful for what waits
// on round trips above TCP — Cap'n Proto's stream window, whose acknowledgement is the call's
// return — and for TCP's window cap, and optimistic for everything else.
// Start and stop from one thread; its own threads do the relaying.
#pragma once

#include <cstdint>
#include <memory>

#include "common/error.hpp"
#include "net/link_shaper.hpp"

namespace multisite_bench {

class DelayLine {
 public:
  // Listens on 127.0.0.1 (any free port) and relays each connection to 127.0.0.1:target_port.
  static archipelago::Expected<std::unique_ptr<DelayLine>> start(archipelago::net::LinkSpec link, uint64_t window_bytes,
                                                                 uint16_t target_port);
  // Cuts every relayed connection and joins the relay's threads.
  ~DelayLine();
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  uint16_t port() const;

  struct Impl;

 private:
  explicit DelayLine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace multisite_bench

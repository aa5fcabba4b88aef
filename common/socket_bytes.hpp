// Bytes this process's own TCP sockets have carried, as the kernel counts them (TCP_INFO:
// tcpi_bytes_acked, payload the peer acknowledged, and tcpi_bytes_received): what crossed the link,
// measured where it crossed, whatever library opened the socket (gloo's all-reduce pairs, a
// TCPStore client). Linux 4.19 or newer. Any thread; reads /proc/self/fd.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.hpp"

namespace archipelago {

struct SocketBytes {
  int fd = -1;
  int local_port = 0;
  int peer_port = 0;     // 0: a listening socket
  int64_t sent = 0;      // payload bytes the peer acknowledged
  int64_t received = 0;  // payload bytes received
};

// Every open TCP socket of this process (IPv4 and IPv6), in fd order. unavailable: /proc/self/fd
// cannot be read, or the kernel reports no byte counters.
Expected<std::vector<SocketBytes>> tcp_sockets_of_this_process();

}  // namespace archipelago

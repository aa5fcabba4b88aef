#include "common/socket_bytes.hpp"

#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>

namespace archipelago {
namespace {

int port_of(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return 0;
}

}  // namespace

Expected<std::vector<SocketBytes>> tcp_sockets_of_this_process() {
  std::error_code ec;
  std::filesystem::directory_iterator fds("/proc/self/fd", ec);
  if (ec) return make_error(ErrorCode::unavailable, "cannot list /proc/self/fd: " + ec.message());
  std::vector<int> numbers;
  for (const auto& entry : fds) numbers.push_back(std::atoi(entry.path().filename().c_str()));
  std::sort(numbers.begin(), numbers.end());

  std::vector<SocketBytes> sockets;
  for (int fd : numbers) {
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int type = 0;
    socklen_t length = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 || type != SOCK_STREAM) continue;
    sockaddr_storage local {}, peer {};
    socklen_t local_length = sizeof local, peer_length = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_length) != 0) continue;
    if (local.ss_family != AF_INET && local.ss_family != AF_INET6) continue;  // a Unix socket
    SocketBytes s;
    s.fd = fd;
    s.local_port = port_of(local);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0) s.peer_port = port_of(peer);
    tcp_info info {};
    socklen_t info_length = sizeof info;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &info_length) != 0) continue;
    if (info_length < offsetof(tcp_info, tcpi_bytes_received) + sizeof info.tcpi_bytes_received) {
      return make_error(ErrorCode::unavailable, "this kernel's TCP_INFO has no byte counters (Linux 4.19 or newer has)");
    }
    s.sent = static_cast<int64_t>(info.tcpi_bytes_acked);
    s.received = static_cast<int64_t>(info.tcpi_bytes_received);
    sockets.push_back(s);
  }
  return sockets;
}

}  // namespace archipelago

// A peer of the cross-site plane as anyone on the network could write one: raw sockets for bytes
// that are not Cap'n Proto, and a Cap'n Proto RPC client of remote/plane.capnp on its own kj event
// loop (this thread), holding only what the coordinator hands it. Loopback only.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <doctest/doctest.h>
#include <kj/async-io.h>

#include "remote/plane.capnp.h"

namespace multisite {

namespace wire = archipelago::remote::wire;

// A TCP connection to 127.0.0.1:port (-1 when refused).
// A TCP connection to 127.0.0.1:port, from the loopback address `from` when given (127.0.0.2, ...:
// each its own peer to the plane).
inline int raw_connect(int port, const char* from = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && from) {
    sockaddr_in source{};
    source.sin_family = AF_INET;
    ::inet_pton(AF_INET, from, &source.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) != 0) {
      ::close(fd);
      return -1;
    }
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  return fd;
}

inline bool raw_send(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Whether the peer closed `fd` within `timeout_s` (a read returns 0 or an error).
inline bool closed_by_peer(int fd, double timeout_s) {
  timeval tv{static_cast<time_t>(timeout_s), static_cast<suseconds_t>((timeout_s - static_cast<int>(timeout_s)) * 1e6)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

// An RPC client of the plane, on its own kj event loop or on one it shares with other clients of
// this thread (there is one kj loop per thread).
struct PlaneClient {
  std::unique_ptr<kj::AsyncIoContext> own_io;
  kj::AsyncIoContext* shared_io = nullptr;
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> client;
  kj::Maybe<wire::Gateway::Client> gateway_cap;

  explicit PlaneClient(int port, kj::AsyncIoContext* on = nullptr) : shared_io(on) {
    if (!shared_io) own_io = std::make_unique<kj::AsyncIoContext>(kj::setupAsyncIo());
    auto address = io().provider->getNetwork().parseAddress("127.0.0.1", static_cast<uint16_t>(port)).wait(io().waitScope);
    stream = address->connect().wait(io().waitScope);
    client = kj::heap<capnp::TwoPartyClient>(*stream);
    gateway_cap = client->bootstrap().castAs<wire::Gateway>();
  }
  kj::AsyncIoContext& io() { return shared_io ? *shared_io : *own_io; }
  wire::Gateway::Client& gateway() { return KJ_ASSERT_NONNULL(gateway_cap); }
  std::string nonce() {
    auto response = gateway().challengeRequest().send().wait(io().waitScope);
    auto n = response.getNonce();
    return std::string(reinterpret_cast<const char*>(n.begin()), n.size());
  }
  // Whether the coordinator has closed this connection (a call fails as disconnected).
  bool disconnected() {
    try {
      gateway().challengeRequest().send().wait(io().waitScope);
      return false;
    } catch (kj::Exception&) {
      return true;
    }
  }
};

inline kj::ArrayPtr<const kj::byte> bytes_of(const std::string& s) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(s.data()), s.size());
}
inline kj::ArrayPtr<const kj::byte> bytes_of(const std::vector<char>& v) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(v.data()), v.size());
}

// A NodeSink that takes every delivery and does nothing, or (stall) never completes one.
class QuietSink final : public wire::NodeSink::Server {
 public:
  explicit QuietSink(bool stall, int* deliveries = nullptr) : stall_(stall), deliveries_(deliveries) {}
  kj::Promise<void> deliver(DeliverContext) override {
    if (deliveries_) *deliveries_ += 1;
    if (stall_) return kj::NEVER_DONE;
    return kj::READY_NOW;
  }
  kj::Promise<void> control(ControlContext) override { return kj::READY_NOW; }
  kj::Promise<void> stop(StopContext) override { return kj::READY_NOW; }

 private:
  bool stall_;
  int* deliveries_;
};

// The coordinator's resident memory in MiB (VmRSS of /proc/PID/status; -1 when unreadable).
inline double rss_mib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atof(line.c_str() + 6) / 1024.0;
  }
  return -1;
}

}  // namespace multisite

// The baselines: the same bytes over plain loopback sockets, and through kj-tls.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include <kj/compat/tls.h>
#include <kj/timer.h>
#include <kj/vector.h>

#include "bench/multisite/transfer_pair.hpp"
#include "remote/tls.hpp"

namespace multisite_bench {
namespace {

using archipelago::remote::context_of;

// ---- plain sockets ---------------------------------------------------------------------------------

sockaddr_in loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  return address;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

int send_buffer_of(int fd) {
  int value = 0;
  socklen_t length = sizeof value;
  getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, &length);
  return value;
}

void wait_for(const std::atomic<bool>& flag, const Pair& pair) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!flag && !pair.failed && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void close_all(const std::vector<int>& fds) {
  for (int fd : fds) ::close(fd);
}

void tcp_receive(Pair& pair, uint16_t) {
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto address = loopback(0);
  socklen_t length = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(listener, 64) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(listener);
    throw std::runtime_error(std::string("cannot listen: ") + std::strerror(errno));
  }
  pair.port.set_value(ntohs(address.sin_port));
  std::vector<int> fds;
  while (static_cast<int>(fds.size()) < pair.spec.streams) {
    pollfd waiting{listener, POLLIN, 0};
    if (::poll(&waiting, 1, 30'000) != 1) break;
    fds.push_back(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  }
  ::close(listener);
  if (static_cast<int>(fds.size()) < pair.spec.streams) {
    close_all(fds);
    throw std::runtime_error("the sender did not connect");
  }
  const double cpu_at_start = thread_cpu_s();
  std::vector<char> buffer(1 << 20);
  std::vector<pollfd> open;
  for (int fd : fds) open.push_back({fd, POLLIN, 0});
  uint64_t got = 0;
  const uint64_t total = pair.spec.total_bytes;
  while (got < total && !open.empty() && !pair.failed) {
    if (::poll(open.data(), open.size(), 100) <= 0) continue;
    for (size_t i = 0; i < open.size();) {
      if (!open[i].revents) {
        ++i;
        continue;
      }
      const ssize_t n = ::recv(open[i].fd, buffer.data(), buffer.size(), 0);
      if (n > 0) {
        got += static_cast<uint64_t>(n);
        if (got >= total) pair.end = Clock::now();
      } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
        open.erase(open.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      ++i;
    }
  }
  pair.receiver_cpu_s = thread_cpu_s() - cpu_at_start;
  pair.bytes = got;
  if (got < total) pair.fail("the receiver counted " + std::to_string(got) + " of " + std::to_string(total) + " bytes");
  pair.receiver_done = true;
  wait_for(pair.sender_done, pair);
  close_all(fds);
}

void tcp_send(Pair& pair, uint16_t port) {
  const auto& spec = pair.spec;
  std::vector<int> fds;
  for (int i = 0; i < spec.streams; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto address = loopback(port);
    if (spec.send_buffer_bytes > 0) ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &spec.send_buffer_bytes, sizeof(int));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      ::close(fd);
      close_all(fds);
      throw std::runtime_error(std::string("cannot connect: ") + std::strerror(errno));
    }
    set_nonblocking(fd);
    fds.push_back(fd);
  }
  const std::vector<char> chunk(spec.chunk_bytes, 'x');
  std::vector<uint64_t> left(fds.size()), at(fds.size(), 0);  // bytes still to send; offset in the current chunk
  for (size_t i = 0; i < fds.size(); ++i) left[i] = share_of(spec.total_bytes, spec.streams, static_cast<int>(i));
  pair.start = Clock::now();
  const double cpu_at_start = thread_cpu_s();
  size_t unfinished = fds.size();
  std::vector<pollfd> waiting;
  while (unfinished > 0 && !pair.failed) {
    waiting.clear();
    for (size_t i = 0; i < fds.size(); ++i) waiting.push_back({fds[i], static_cast<short>(left[i] > 0 ? POLLOUT : 0), 0});
    if (::poll(waiting.data(), waiting.size(), 100) <= 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (left[i] == 0 || !(waiting[i].revents & (POLLOUT | POLLERR | POLLHUP))) continue;
      const size_t size = static_cast<size_t>(std::min<uint64_t>(chunk.size() - at[i], left[i]));
      const ssize_t n = ::send(fds[i], chunk.data() + at[i], size, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
      left[i] -= static_cast<uint64_t>(n);
      at[i] = (at[i] + static_cast<uint64_t>(n)) % chunk.size();
      if (left[i] == 0) --unfinished;
    }
  }
  pair.sender_cpu_s = thread_cpu_s() - cpu_at_start;
  pair.window_bytes = send_buffer_of(fds.front());
  pair.sender_done = true;
  wait_for(pair.receiver_done, pair);
  close_all(fds);
}

// ---- kj-tls ----------------------------------------------------------------------------------------

kj::Promise<void> drain(kj::AsyncIoStream& stream, kj::ArrayPtr<kj::byte> buffer, ByteCount& count, Pair& pair) {
  return stream.tryRead(buffer.begin(), 1, buffer.size()).then([&stream, buffer, &count, &pair](size_t n) -> kj::Promise<void> {
    if (n == 0) return kj::READY_NOW;
    count.add(n, pair);
    return drain(stream, buffer, count, pair);
  });
}

kj::Promise<void> fill(kj::AsyncIoStream& stream, kj::ArrayPtr<const kj::byte> chunk, uint64_t left) {
  if (left == 0) return kj::READY_NOW;
  const size_t size = static_cast<size_t>(std::min<uint64_t>(chunk.size(), left));
  return stream.write(chunk.begin(), size).then([&stream, chunk, left, size] { return fill(stream, chunk, left - size); });
}

void tls_receive(Pair& pair, uint16_t) {
  auto io = kj::setupAsyncIo();
  auto& timer = io.provider->getTimer();
  auto tls = archipelago::remote::make_server_tls(*pair.spec.tls, timer, 30.0);
  if (!tls) throw std::runtime_error(tls.error().reason);
  auto listener = io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope)->listen();
  pair.port.set_value(static_cast<uint16_t>(listener->getPort()));
  std::vector<kj::Own<kj::AsyncIoStream>> streams;
  for (int i = 0; i < pair.spec.streams; ++i) {
    auto accepted = timer.timeoutAfter(30 * kj::SECONDS, listener->accept()).wait(io.waitScope);
    streams.push_back(timer.timeoutAfter(30 * kj::SECONDS, context_of(**tls).wrapServer(kj::mv(accepted))).wait(io.waitScope));
  }
  const double cpu_at_start = thread_cpu_s();
  ByteCount count;
  std::vector<kj::Array<kj::byte>> buffers;
  kj::Vector<kj::Promise<void>> reads;
  for (auto& stream : streams) {
    buffers.push_back(kj::heapArray<kj::byte>(1 << 20));
    reads.add(drain(*stream, buffers.back(), count, pair));
  }
  auto reading = kj::joinPromises(reads.releaseAsArray()).eagerlyEvaluate([&pair](kj::Exception&& e) {
    if (!pair.receiver_done) pair.fail(std::string("read: ") + e.getDescription().cStr());
  });
  turn_loop_until(io, pair, [&] { return count.got >= pair.spec.total_bytes; });
  pair.receiver_cpu_s = thread_cpu_s() - cpu_at_start;
  pair.bytes = count.got;
  if (count.got < pair.spec.total_bytes) pair.fail("the receiver counted " + std::to_string(count.got) + " bytes");
  pair.receiver_done = true;
  turn_loop_until(io, pair, [&] { return pair.sender_done.load(); }, 30);
}

void tls_send(Pair& pair, uint16_t port) {
  const auto& spec = pair.spec;
  auto io = kj::setupAsyncIo();
  auto& timer = io.provider->getTimer();
  auto tls = archipelago::remote::make_client_tls(*spec.tls);
  if (!tls) throw std::runtime_error(tls.error().reason);
  auto address = io.provider->getNetwork().parseAddress("127.0.0.1", port).wait(io.waitScope);
  std::vector<kj::Own<kj::AsyncIoStream>> streams;
  for (int i = 0; i < spec.streams; ++i) {
    auto raw = timer.timeoutAfter(30 * kj::SECONDS, address->connect()).wait(io.waitScope);
    if (spec.send_buffer_bytes > 0) raw->setsockopt(SOL_SOCKET, SO_SNDBUF, &spec.send_buffer_bytes, sizeof(int));
    streams.push_back(timer.timeoutAfter(30 * kj::SECONDS, context_of(**tls).wrapClient(kj::mv(raw), "127.0.0.1")).wait(io.waitScope));
  }
  auto chunk = kj::heapArray<kj::byte>(spec.chunk_bytes);
  memset(chunk.begin(), 'x', chunk.size());
  pair.start = Clock::now();
  const double cpu_at_start = thread_cpu_s();
  kj::Vector<kj::Promise<void>> writes;
  for (size_t i = 0; i < streams.size(); ++i) writes.add(fill(*streams[i], chunk, share_of(spec.total_bytes, spec.streams, static_cast<int>(i))));
  timer.timeoutAfter(120 * kj::SECONDS, kj::joinPromises(writes.releaseAsArray())).wait(io.waitScope);
  pair.sender_cpu_s = thread_cpu_s() - cpu_at_start;
  int window = 0;
  kj::uint length = sizeof window;
  streams.front()->getsockopt(SOL_SOCKET, SO_SNDBUF, &window, &length);
  pair.window_bytes = window;
  pair.sender_done = true;
  turn_loop_until(io, pair, [&] { return pair.receiver_done.load(); }, 30);
}

}  // namespace

TransferResult raw_tcp_copy(const TransferSpec& spec) { return run_pair(spec, tcp_receive, tcp_send); }

TransferResult raw_tls_copy(const TransferSpec& spec) {
  if (!spec.tls) return TransferResult{false, "no TLS files"};
  return run_pair(spec, tls_receive, tls_send);
}

}  // namespace multisite_bench

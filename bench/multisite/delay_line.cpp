#include "bench/multisite/delay_line.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace multisite_bench {

using archipelago::net::Clock;
using archipelago::net::TimePoint;

namespace {

constexpr size_t kPieceBytes = 64 << 10;  // what the relay reads at once

// One direction of the link, shared by every relayed connection.
struct Link {
  std::mutex mutex;
  archipelago::net::LinkShaper shaper;
  explicit Link(archipelago::net::LinkSpec spec) : shaper(spec) {}
  TimePoint release_time(size_t bytes) {
    std::lock_guard lock(mutex);
    return shaper.release_time(Clock::now(), bytes);
  }
};

struct Piece {
  TimePoint release;
  std::vector<char> bytes;  // empty: the sender closed (pass the shutdown on)
};

// One direction of one connection: a reader that stamps what it reads, a writer that delivers it.
struct Flow {
  int from = -1, to = -1;
  Link* link = nullptr;
  uint64_t window_bytes = 0;
  Clock::duration latency{};
  const std::atomic<bool>* stopping = nullptr;

  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Piece> queue;
  std::thread reader, writer;

  void read() {
    std::deque<std::pair<TimePoint, size_t>> unacknowledged;  // (when its answer is back, bytes)
    uint64_t in_flight = 0;
    std::vector<char> buffer(kPieceBytes);
    while (!*stopping) {
      while (!unacknowledged.empty() && unacknowledged.front().first <= Clock::now()) {
        in_flight -= unacknowledged.front().second;
        unacknowledged.pop_front();
      }
      if (in_flight >= window_bytes) {
        std::this_thread::sleep_until(unacknowledged.front().first);
        continue;
      }
      pollfd readable{from, POLLIN, 0};
      if (::poll(&readable, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(from, buffer.data(), std::min<uint64_t>(buffer.size(), window_bytes - in_flight), 0);
      if (n <= 0) break;
      const TimePoint release = link->release_time(static_cast<size_t>(n));
      unacknowledged.emplace_back(release + latency, static_cast<size_t>(n));
      in_flight += static_cast<uint64_t>(n);
      push(Piece{release, std::vector<char>(buffer.data(), buffer.data() + n)});
    }
    push(Piece{Clock::now(), {}});
  }

  void push(Piece piece) {
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(piece));
    }
    ready.notify_one();
  }

  void write() {
    while (true) {
      Piece piece;
      {
        std::unique_lock lock(mutex);
        ready.wait(lock, [&] { return !queue.empty() || *stopping; });
        if (queue.empty()) return;
        piece = std::move(queue.front());
        queue.pop_front();
      }
      if (piece.bytes.empty()) {
        ::shutdown(to, SHUT_WR);
        return;
      }
      std::this_thread::sleep_until(piece.release);
      for (size_t at = 0; at < piece.bytes.size();) {
        const ssize_t n = ::send(to, piece.bytes.data() + at, piece.bytes.size() - at, MSG_NOSIGNAL);
        if (n <= 0) return;
        at += static_cast<size_t>(n);
      }
    }
  }
};

sockaddr_in loopback(uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  return address;
}

}  // namespace

struct DelayLine::Impl {
  archipelago::net::LinkSpec spec;
  uint64_t window_bytes = 0;
  uint16_t target = 0, port = 0;
  int listener = -1;
  std::atomic<bool> stopping{false};
  Link forward{spec}, backward{spec};
  std::mutex mutex;
  std::list<Flow> flows;   // guarded by mutex; std::list: a Flow never moves
  std::vector<int> fds;    // guarded by mutex
  std::thread acceptor;

  void start_flow(int from, int to, Link& link) {
    std::lock_guard lock(mutex);
    Flow& flow = flows.emplace_back();
    flow.from = from;
    flow.to = to;
    flow.link = &link;
    flow.window_bytes = window_bytes;
    flow.latency = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(spec.latency_s));
    flow.stopping = &stopping;
    flow.reader = std::thread([&flow] { flow.read(); });
    flow.writer = std::thread([&flow] { flow.write(); });
  }

  void accept_loop() {
    while (!stopping) {
      pollfd waiting{listener, POLLIN, 0};
      if (::poll(&waiting, 1, 50) <= 0) continue;
      const int near = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (near < 0) continue;
      const int far = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      auto address = loopback(target);
      if (::connect(far, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        ::close(near);
        ::close(far);
        continue;
      }
      {
        std::lock_guard lock(mutex);
        fds.push_back(near);
        fds.push_back(far);
      }
      start_flow(near, far, forward);
      start_flow(far, near, backward);
    }
  }
};

archipelago::Expected<std::unique_ptr<DelayLine>> DelayLine::start(archipelago::net::LinkSpec link, uint64_t window_bytes,
                                                                   uint16_t target_port) {
  if (auto valid = archipelago::net::validate(link); !valid) return valid.error();
  auto impl = std::make_unique<Impl>();
  impl->spec = link;
  impl->forward.shaper = archipelago::net::LinkShaper(link);
  impl->backward.shaper = archipelago::net::LinkShaper(link);
  impl->window_bytes = window_bytes;
  impl->target = target_port;
  impl->listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  auto address = loopback(0);
  socklen_t length = sizeof address;
  if (::bind(impl->listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(impl->listener, 64) != 0 ||
      ::getsockname(impl->listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(impl->listener);
    return archipelago::make_error(archipelago::ErrorCode::unavailable, std::string("delay line: ") + std::strerror(errno));
  }
  impl->port = ntohs(address.sin_port);
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->accept_loop(); });
  return std::unique_ptr<DelayLine>(new DelayLine(std::move(impl)));
}

DelayLine::DelayLine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DelayLine::~DelayLine() {
  impl_->stopping = true;
  impl_->acceptor.join();
  std::lock_guard lock(impl_->mutex);
  for (int fd : impl_->fds) ::shutdown(fd, SHUT_RDWR);
  for (auto& flow : impl_->flows) {
    { std::lock_guard flow_lock(flow.mutex); }  // a writer between its check and its wait sees `stopping`
    flow.ready.notify_all();
    flow.reader.join();
    flow.writer.join();
  }
  for (int fd : impl_->fds) ::close(fd);
  ::close(impl_->listener);
}

uint16_t DelayLine::port() const { return impl_->port; }

}  // namespace multisite_bench

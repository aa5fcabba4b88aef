#include "bench/multisite/transfer_pair.hpp"

#include <sys/resource.h>

#include <thread>

#include <kj/debug.h>
#include <kj/timer.h>

namespace multisite_bench {

const char* to_string(Fanout fanout) {
  switch (fanout) {
    case Fanout::connections: return "connections";
    case Fanout::sessions: return "sessions on one connection";
    case Fanout::calls: return "update streams on one session";
  }
  return "?";
}

double thread_cpu_s() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

void Pair::fail(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    if (error_.empty()) error_ = why;
  }
  failed = true;
}

std::string Pair::error() {
  std::lock_guard lock(mutex_);
  return error_;
}

uint64_t share_of(uint64_t total, int streams, int index) {
  const uint64_t each = total / streams;
  return index == streams - 1 ? total - each * (streams - 1) : each;
}

bool turn_loop_until(kj::AsyncIoContext& io, Pair& pair, const std::function<bool()>& done, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  auto& timer = io.provider->getTimer();
  while (!done()) {
    if (pair.failed || Clock::now() > deadline) return false;
    timer.afterDelay(1 * kj::MILLISECONDS).wait(io.waitScope);
  }
  return true;
}

namespace {

// Runs one side, turning whatever it throws into the pair's failure.
void guarded(Pair& pair, const Side& side, uint16_t port, const char* which) {
  try {
    side(pair, port);
  } catch (kj::Exception& e) {
    pair.fail(std::string(which) + ": " + e.getDescription().cStr());
  } catch (const std::exception& e) {
    pair.fail(std::string(which) + ": " + e.what());
  }
}

}  // namespace

TransferResult run_pair(const TransferSpec& spec, const Side& receive, const Side& send) {
  Pair pair(spec);
  auto port_future = pair.port.get_future();
  std::thread receiver([&] {
    guarded(pair, receive, 0, "receiver");
    try {
      pair.port.set_value(0);  // the receiver failed before it listened
    } catch (const std::future_error&) {
    }
  });
  TransferResult result;
  uint16_t port = 0;
  if (port_future.wait_for(std::chrono::seconds(30)) == std::future_status::ready) port = port_future.get();
  if (port == 0) {
    pair.fail("the receiver did not listen");
  } else {
    const uint16_t dial = spec.route ? spec.route(port) : port;
    std::thread sender([&] { guarded(pair, send, dial, "sender"); });
    sender.join();
  }
  receiver.join();
  if (pair.failed) {
    result.error = pair.error();
    return result;
  }
  result.ok = true;
  result.seconds = std::chrono::duration<double>(pair.end - pair.start).count();
  result.bytes = pair.bytes;
  result.receiver_cpu_s = pair.receiver_cpu_s;
  result.sender_cpu_s = pair.sender_cpu_s;
  result.window_bytes = pair.window_bytes;
  return result;
}

}  // namespace multisite_bench

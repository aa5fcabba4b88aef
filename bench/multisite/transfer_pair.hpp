// The two threads of one timed transfer (bench/multisite/transfer.hpp) and what they share.
//
// run_pair starts `receive` on a thread of its own, waits for it to publish the port it listens
// on, routes that port (TransferSpec::route) and starts `send` on a second thread with the port to
// dial. Each side reports into the Pair: the sender stamps the start once its connections are set
// up, the receiver stamps the end when it has counted every byte. Then each side says it is done
// and waits for the other before it closes anything, so neither sees the other's close as an
// error. A side that throws marks the pair failed, which releases the other side's waits.
// Internal to bench_multisite.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <string>

#include <kj/async-io.h>

#include "bench/multisite/transfer.hpp"

namespace multisite_bench {

using Clock = std::chrono::steady_clock;

struct Pair {
  explicit Pair(const TransferSpec& s) : spec(s) {}
  const TransferSpec& spec;

  std::promise<uint16_t> port;  // published by the receiver (0: it could not listen)
  std::atomic<bool> receiver_done{false}, sender_done{false}, failed{false};

  // Written by one side before it sets its done flag; read after both threads end.
  Clock::time_point start{}, end{};
  uint64_t bytes = 0;
  double receiver_cpu_s = 0, sender_cpu_s = 0;
  int window_bytes = 0;

  void fail(const std::string& why);
  std::string error();

 private:
  std::mutex mutex_;
  std::string error_;
};

using Side = std::function<void(Pair&, uint16_t port)>;  // port: receiver 0, sender the one to dial

// Runs both sides; the result is the pair's stamps, or the first side's error.
TransferResult run_pair(const TransferSpec& spec, const Side& receive, const Side& send);

// The receiver's count of payload bytes: stamps the pair's end when it reaches total_bytes.
struct ByteCount {
  uint64_t got = 0;
  void add(uint64_t n, Pair& pair) {
    const bool complete_before = got >= pair.spec.total_bytes;
    got += n;
    if (!complete_before && got >= pair.spec.total_bytes) pair.end = Clock::now();
  }
};

// The bytes stream `index` of `streams` carries (the last one takes the remainder).
uint64_t share_of(uint64_t total, int streams, int index);

// Turns the kj event loop of this thread until `done()` holds or the pair failed, checking each
// millisecond. False on failure or after `timeout_s`.
bool turn_loop_until(kj::AsyncIoContext& io, Pair& pair, const std::function<bool()>& done, double timeout_s = 120);

}  // namespace multisite_bench

// The link schedule on exact cases, and the real-time sender measured against its settings.
#include <algorithm>
#include <cmath>
#include <limits>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "net/link_shaper.hpp"

using namespace archipelago::net;
using namespace std::chrono_literals;

namespace {

const TimePoint t0 = TimePoint{} + 1h;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Collects deliveries with their arrival times; waits are bounded by a deadline, never open-ended.
struct Recorder {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<std::pair<TimePoint, ShapedSender::Message>> deliveries;

  ShapedSender::Deliver callback() {
    return [this](ShapedSender::Message&& message) {
      const TimePoint now = Clock::now();
      {
        std::lock_guard lock(mutex);
        deliveries.emplace_back(now, std::move(message));
      }
      arrived.notify_all();
    };
  }
  bool wait_for(std::size_t count, Clock::duration timeout) {
    std::unique_lock lock(mutex);
    return arrived.wait_for(lock, timeout, [&] { return deliveries.size() >= count; });
  }
  std::size_t count() {
    std::lock_guard lock(mutex);
    return deliveries.size();
  }
};

ShapedSender::Message tagged(std::size_t bytes, std::uint32_t tag) {
  ShapedSender::Message message(std::max<std::size_t>(bytes, sizeof tag), 0);
  std::memcpy(message.data(), &tag, sizeof tag);
  return message;
}

std::uint32_t tag_of(const ShapedSender::Message& message) {
  std::uint32_t tag;
  std::memcpy(&tag, message.data(), sizeof tag);
  return tag;
}

}  // namespace

TEST_CASE("a burst queues behind the previous chunk, and latency is added once per chunk, not accumulated") {
  // 1 Mbit/s: 125 bytes take exactly 1 ms on the wire.
  LinkShaper link({1e6, 0.010});
  CHECK(link.release_time(t0, 125) == t0 + 11ms);
  CHECK(link.release_time(t0, 125) == t0 + 12ms);
  CHECK(link.release_time(t0, 250) == t0 + 14ms);
  // Handed over while the link is still busy (until t0 + 4 ms): starts when it frees.
  CHECK(link.release_time(t0 + 3ms, 125) == t0 + 15ms);
  // After an idle gap the next chunk starts at once.
  CHECK(link.release_time(t0 + 100ms, 125) == t0 + 111ms);
}

TEST_CASE("unlimited bandwidth and zero latency pass chunks through unchanged") {
  LinkShaper pass({0, 0});
  CHECK(pass.spec().pass_through());
  for (std::size_t bytes : {0u, 1u, 1u << 20, 1u << 30}) CHECK(pass.release_time(t0, bytes) == t0);

  LinkShaper latency_only({0, 0.025});
  CHECK(latency_only.release_time(t0, 1 << 30) == t0 + 25ms);
  CHECK(latency_only.release_time(t0, 1 << 30) == t0 + 25ms);  // nothing queues

  LinkShaper bandwidth_only({8e6, 0});  // 1 byte per microsecond
  CHECK(bandwidth_only.release_time(t0, 1000) == t0 + 1ms);
  CHECK(bandwidth_only.serialization_delay(0) == Clock::duration::zero());
}

TEST_CASE("serialization delay of a 256 KiB chunk at 100 Mbit/s") {
  LinkShaper link({100e6, 0.025});
  CHECK(seconds(link.serialization_delay(256 * 1024)) == doctest::Approx(0.02097152).epsilon(1e-9));
}

TEST_CASE("release times never decrease and finish at total bytes / bandwidth after a burst") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::size_t> size(0, 1 << 20);
  LinkShaper link({100e6, 0.025});
  TimePoint previous = t0;
  std::size_t total = 0;
  for (int chunk = 0; chunk < 1000; ++chunk) {
    const std::size_t bytes = size(rng);
    total += bytes;
    const TimePoint release = link.release_time(t0, bytes);
    CHECK(release >= previous);
    previous = release;
  }
  CHECK(seconds(previous - t0) == doctest::Approx(0.025 + total * 8 / 100e6).epsilon(1e-6));
}

TEST_CASE("validate rejects negative or non-finite link settings") {
  CHECK(validate(LinkSpec{0, 0}).ok());
  CHECK(validate(LinkSpec{100e6, 0.025}).ok());
  CHECK_FALSE(validate(LinkSpec{-1, 0}).ok());
  CHECK_FALSE(validate(LinkSpec{0, -0.001}).ok());
  CHECK_FALSE(validate(LinkSpec{std::numeric_limits<double>::infinity(), 0}).ok());
  auto nan_latency = validate(LinkSpec{0, std::nan("")});
  REQUIRE_FALSE(nan_latency.ok());
  CHECK(nan_latency.error().reason.find("latency") != std::string::npos);
}

TEST_CASE("ShapedSender: measured latency of an idle 100 Mbit/s, 25 ms link is 25 ms within 10%") {
  Recorder recorder;
  ShapedSender sender({100e6, 0.025}, recorder.callback());
  std::vector<double> latencies;
  for (std::uint32_t probe = 0; probe < 7; ++probe) {
    const TimePoint sent = Clock::now();
    REQUIRE(sender.send(tagged(4, probe)).ok());
    REQUIRE(recorder.wait_for(probe + 1, 2s));
    std::lock_guard lock(recorder.mutex);
    latencies.push_back(seconds(recorder.deliveries.back().first - sent));
  }
  std::sort(latencies.begin(), latencies.end());
  const double median = latencies[latencies.size() / 2];
  MESSAGE("median one-way latency " << median * 1e3 << " ms (min " << latencies.front() * 1e3 << ", max "
                                    << latencies.back() * 1e3 << ")");
  CHECK(latencies.front() >= 0.025);  // never early
  CHECK(median == doctest::Approx(0.025).epsilon(0.10));
}

TEST_CASE("ShapedSender: 40 chunks of 256 KiB over 100 Mbit/s, 25 ms arrive in order at 100 Mbit/s within 10%") {
  constexpr std::size_t kChunk = 256 * 1024, kChunks = 40;
  Recorder recorder;
  ShapedSender sender({100e6, 0.025}, recorder.callback());
  const TimePoint start = Clock::now();
  for (std::uint32_t i = 0; i < kChunks; ++i) REQUIRE(sender.send(tagged(kChunk, i)).ok());
  REQUIRE(recorder.wait_for(kChunks, 5s));  // ideal: 25 ms + 40 · 21 ms ≈ 0.86 s

  std::lock_guard lock(recorder.mutex);
  const auto& d = recorder.deliveries;
  for (std::uint32_t i = 0; i < kChunks; ++i) {
    CHECK(tag_of(d[i].second) == i);
    CHECK(d[i].second.size() == kChunk);
  }
  // The first chunk pays latency + its own serialization; each later one adds one serialization.
  const double first = seconds(d.front().first - start);
  const double spread = seconds(d.back().first - d.front().first);
  const double bandwidth = double(kChunks - 1) * kChunk * 8 / spread;
  const double total = seconds(d.back().first - start);
  MESSAGE("first chunk after " << first * 1e3 << " ms (ideal 45.97), bandwidth " << bandwidth / 1e6
                               << " Mbit/s (ideal 100), all 10 MiB after " << total * 1e3 << " ms (ideal 863.9)");
  CHECK(first == doctest::Approx(0.025 + 0.02097152).epsilon(0.10));
  CHECK(bandwidth == doctest::Approx(100e6).epsilon(0.10));
  CHECK(total == doctest::Approx(0.025 + kChunks * 0.02097152).epsilon(0.10));
}

TEST_CASE("ShapedSender: a sender slower than the link sees latency + one serialization per message") {
  // 10 Mbit/s, 5 ms: a 12.5 kB message takes 10 ms on the wire; sent every 40 ms, none queue.
  Recorder recorder;
  ShapedSender sender({10e6, 0.005}, recorder.callback());
  std::vector<double> delays;
  for (std::uint32_t i = 0; i < 5; ++i) {
    const TimePoint sent = Clock::now();
    REQUIRE(sender.send(tagged(12500, i)).ok());
    REQUIRE(recorder.wait_for(i + 1, 2s));
    {
      std::lock_guard lock(recorder.mutex);
      delays.push_back(seconds(recorder.deliveries.back().first - sent));
    }
    std::this_thread::sleep_until(sent + 40ms);  // pacing the sender, not waiting for a result
  }
  std::sort(delays.begin(), delays.end());
  MESSAGE("median delay " << delays[2] * 1e3 << " ms (ideal 15)");
  CHECK(delays.front() >= 0.015);
  CHECK(delays[2] == doctest::Approx(0.015).epsilon(0.10));
}

TEST_CASE("ShapedSender: discard stops at once, drain delivers everything queued, send after stop fails") {
  SUBCASE("discard") {
    Recorder recorder;
    ShapedSender sender({1e6, 0}, recorder.callback());  // 125 kB/s: 40 × 125 kB would take 40 s
    for (std::uint32_t i = 0; i < 40; ++i) REQUIRE(sender.send(tagged(125000, i)).ok());
    CHECK(sender.pending() >= 39);
    const TimePoint before = Clock::now();
    sender.stop(ShapedSender::Shutdown::discard);
    CHECK(seconds(Clock::now() - before) < 0.5);
    CHECK(recorder.count() == 0);
    CHECK(sender.pending() == 0);
    auto late = sender.send(tagged(10, 99));
    REQUIRE_FALSE(late.ok());
    CHECK(late.error().code == archipelago::ErrorCode::unavailable);
    sender.stop(ShapedSender::Shutdown::discard);  // idempotent
  }
  SUBCASE("drain") {
    Recorder recorder;
    ShapedSender sender({10e6, 0.005}, recorder.callback());  // 12.5 kB = 10 ms
    const TimePoint before = Clock::now();
    for (std::uint32_t i = 0; i < 10; ++i) REQUIRE(sender.send(tagged(12500, i)).ok());
    sender.stop(ShapedSender::Shutdown::drain);
    const double took = seconds(Clock::now() - before);
    REQUIRE(recorder.count() == 10);
    for (std::uint32_t i = 0; i < 10; ++i) CHECK(tag_of(recorder.deliveries[i].second) == i);
    CHECK(took >= 0.105);  // 10 serializations + latency: the drain kept the schedule
    CHECK(took < 1.0);
  }
  SUBCASE("destructor discards") {
    Recorder recorder;
    const TimePoint before = Clock::now();
    {
      ShapedSender sender({1e6, 0.5}, recorder.callback());
      REQUIRE(sender.send(tagged(10, 0)).ok());
    }
    CHECK(seconds(Clock::now() - before) < 0.4);
    CHECK(recorder.count() == 0);
  }
}

TEST_CASE("ShapedSender: a pass-through link delivers every message, in order, from several threads") {
  Recorder recorder;
  ShapedSender sender({0, 0}, recorder.callback());
  constexpr std::uint32_t kThreads = 4, kEach = 500;
  std::vector<std::thread> threads;
  for (std::uint32_t t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (std::uint32_t i = 0; i < kEach; ++i) CHECK(sender.send(tagged(8, t * kEach + i)).ok());
    });
  for (auto& thread : threads) thread.join();
  REQUIRE(recorder.wait_for(kThreads * kEach, 5s));
  // Per sending thread, order is kept.
  std::vector<std::uint32_t> last(kThreads, 0);
  std::vector<bool> seen(kThreads, false);
  std::lock_guard lock(recorder.mutex);
  for (const auto& [when, message] : recorder.deliveries) {
    const std::uint32_t tag = tag_of(message), thread = tag / kEach;
    if (seen[thread]) CHECK(tag > last[thread]);
    seen[thread] = true;
    last[thread] = tag;
  }
}

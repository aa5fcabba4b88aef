// The link emulation of the transport, measured at the receiving actor: bytes go through a
// ShapedLink to an actor, and the arrival times must match the configured bandwidth and latency
// within 10%. (The plane's own speed is measured by bench/multisite.)
#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include "remote/remote_protocol.hpp"
#include "remote/shaped_link.hpp"
#include "tests/multisite/process.hpp"

using namespace multisite;
using archipelago::remote::ShapedLink;
using archipelago::actors::WireBytes;

namespace {

struct Arrivals {
  std::mutex mutex;
  std::vector<std::pair<Clock::time_point, size_t>> at;
  size_t count() {
    std::lock_guard lock(mutex);
    return at.size();
  }
};

caf::behavior sink(caf::event_based_actor*, std::shared_ptr<Arrivals> arrivals) {
  return {[=](WireBytes& bytes) {
    std::lock_guard lock(arrivals->mutex);
    arrivals->at.emplace_back(Clock::now(), bytes.size());
  }};
}

}  // namespace

TEST_CASE("an emulated 25 ms 100 Mbit/s link delivers at its latency and bandwidth within 10%") {
  caf::actor_system_config config;
  caf::actor_system system{config};
  auto arrivals = std::make_shared<Arrivals>();
  auto local_sink = system.spawn(sink, arrivals);
  const double bandwidth = 100e6, latency = 0.025;
  ShapedLink link(archipelago::net::LinkSpec{bandwidth, latency});
  auto deliver = [sink = local_sink](WireBytes&& bytes) { caf::anon_send(sink, std::move(bytes)); };

  // Latency: small messages on an idle link, one at a time; the median of five.
  std::vector<double> latencies;
  for (int i = 0; i < 5; ++i) {
    const size_t before = arrivals->count();
    const auto sent = Clock::now();
    link.send(WireBytes(64, 'x'), deliver);
    REQUIRE(wait_until([&] { return arrivals->count() > before; }, 5));
    std::lock_guard lock(arrivals->mutex);
    latencies.push_back(std::chrono::duration<double>(arrivals->at.back().first - sent).count());
  }
  std::sort(latencies.begin(), latencies.end());
  const double measured_latency = latencies[2];
  CAPTURE(measured_latency);
  CHECK(measured_latency >= latency * 0.9);
  CHECK(measured_latency <= latency * 1.1);

  // Bandwidth: 8 MiB in 1 MiB chunks, back to back.
  const size_t chunk = 1 << 20, chunks = 8;
  const size_t before = arrivals->count();
  const auto start = Clock::now();
  for (size_t i = 0; i < chunks; ++i) link.send(WireBytes(chunk, 'y'), deliver);
  REQUIRE(wait_until([&] { return arrivals->count() == before + chunks; }, 10));
  double seconds = 0;
  {
    std::lock_guard lock(arrivals->mutex);
    seconds = std::chrono::duration<double>(arrivals->at.back().first - start).count() - measured_latency;
  }
  const double measured_bandwidth = chunk * chunks * 8.0 / seconds;
  CAPTURE(measured_bandwidth);
  CHECK(measured_bandwidth >= bandwidth * 0.9);
  CHECK(measured_bandwidth <= bandwidth * 1.1);

  link.stop();
  caf::anon_send_exit(local_sink, caf::exit_reason::user_shutdown);
}

// The link emulation of the transport, measured end to end: bytes go through a ShapedLink and
// CAF's io middleman over loopback to an actor of another actor system, and the arrival times must
// match the configured bandwidth and latency within 10%.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <vector>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <doctest/doctest.h>

#include "actors/remote_protocol.hpp"
#include "actors/shaped_link.hpp"
#include "tests/multisite/process.hpp"

using namespace multisite;
using archipelago::actors::ShapedLink;
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

struct Systems {
  caf::actor_system_config receiver_config, sender_config;
  std::unique_ptr<caf::actor_system> receiver, sender;
  Systems() {
    archipelago::actors::TransportOptions transport;
    REQUIRE(archipelago::actors::configure_transport(receiver_config, transport));
    REQUIRE(archipelago::actors::configure_transport(sender_config, transport));
    receiver = std::make_unique<caf::actor_system>(receiver_config);
    sender = std::make_unique<caf::actor_system>(sender_config);
  }
};

}  // namespace

TEST_CASE("an emulated 25 ms 100 Mbit/s link delivers at its latency and bandwidth within 10%") {
  Systems systems;
  auto arrivals = std::make_shared<Arrivals>();
  auto local_sink = systems.receiver->spawn(sink, arrivals);
  auto port = systems.receiver->middleman().publish(local_sink, 0, "127.0.0.1");
  REQUIRE(port);
  auto remote_sink = systems.sender->middleman().remote_actor("127.0.0.1", *port);
  REQUIRE(remote_sink);
  const double bandwidth = 100e6, latency = 0.025;
  ShapedLink link(archipelago::net::LinkSpec{bandwidth, latency});
  auto deliver = [sink = *remote_sink](WireBytes&& bytes) { caf::anon_send(sink, std::move(bytes)); };

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

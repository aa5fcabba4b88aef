// Per-link byte accounting and the comparison with data-parallel training.
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "net/link_stats.hpp"

using namespace archipelago;
using namespace archipelago::net;

TEST_CASE("counters per remote node, summed per site and across sites") {
  LinkStats stats("hub");
  stats.record_sent("east-1", "east", 1000);
  stats.record_sent("east-1", "east", 500);
  stats.record_received("east-1", "east", 70);
  stats.record_sent("west-1", "west", 300);
  stats.record_received("hub-2", "hub", 4000);  // same site: not cross-site

  const LinkStatsSnapshot snapshot = stats.snapshot();
  CHECK(snapshot.local_site == "hub");
  REQUIRE(snapshot.peers.size() == 3);
  CHECK(snapshot.peers[0].node == "east-1");  // sorted by node id
  CHECK(snapshot.peers[0].counters.bytes_sent == 1500);
  CHECK(snapshot.peers[0].counters.messages_sent == 2);
  CHECK(snapshot.peers[0].counters.bytes_received == 70);
  CHECK(snapshot.peers[0].counters.messages_received == 1);

  const LinkCounters total = snapshot.total();
  CHECK(total.bytes_sent == 1800);
  CHECK(total.bytes_received == 4070);
  const LinkCounters cross = snapshot.cross_site();
  CHECK(cross.bytes_sent == 1800);
  CHECK(cross.bytes_received == 70);
  CHECK(cross.messages_received == 1);

  const auto by_site = snapshot.by_site();
  REQUIRE(by_site.size() == 3);
  CHECK(by_site.at("east").bytes_sent == 1500);
  CHECK(by_site.at("west").bytes_sent == 300);
  CHECK(by_site.at("hub").bytes_received == 4000);
}

TEST_CASE("concurrent recording loses no bytes") {
  LinkStats stats("east");
  constexpr int kThreads = 4, kEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&stats, t] {
      const std::string node = "node-" + std::to_string(t % 2);
      for (int i = 0; i < kEach; ++i) {
        stats.record_sent(node, "west", 3);
        stats.record_received(node, "west", 5);
      }
    });
  for (auto& thread : threads) thread.join();
  const LinkCounters total = stats.snapshot().total();
  CHECK(total.bytes_sent == 3ull * kThreads * kEach);
  CHECK(total.bytes_received == 5ull * kThreads * kEach);
  CHECK(total.messages_sent == std::uint64_t(kThreads) * kEach);
  CHECK(stats.snapshot().peers.size() == 2);
}

TEST_CASE("cross-site bytes per token against a data-parallel ring all-reduce, hand-computed") {
  // 1 M fp32 parameters, 3 sites, 1000 tokens per step: 2·2·4 MB = 16 MB per step = 16000 B/token.
  const DataParallelBaseline baseline{1'000'000, 4, 3, 1000};
  auto result = compare_to_data_parallel(1'600'000'000, 1'000'000, baseline);
  REQUIRE(result.ok());
  CHECK(result->cross_site_bytes_per_token == doctest::Approx(1600));
  CHECK(result->data_parallel_bytes_per_token == doctest::Approx(16000));
  CHECK(result->fraction_of_data_parallel == doctest::Approx(0.1));

  // bf16 gradients halve the baseline, two sites halve it again.
  auto bf16 = compare_to_data_parallel(1'600'000'000, 1'000'000, {1'000'000, 2, 2, 1000});
  REQUIRE(bf16.ok());
  CHECK(bf16->data_parallel_bytes_per_token == doctest::Approx(4000));
}

TEST_CASE("compare_to_data_parallel refuses undefined ratios") {
  CHECK_FALSE(compare_to_data_parallel(100, 0, {1000, 4, 3, 10}).ok());
  CHECK_FALSE(compare_to_data_parallel(100, 10, {1000, 4, 1, 10}).ok());
  CHECK_FALSE(compare_to_data_parallel(100, 10, {0, 4, 3, 10}).ok());
  CHECK_FALSE(compare_to_data_parallel(100, 10, {1000, 0, 3, 10}).ok());
  CHECK_FALSE(compare_to_data_parallel(100, 10, {1000, 4, 3, 0}).ok());
  auto error = compare_to_data_parallel(100, 0, {1000, 4, 3, 10});
  CHECK(error.error().code == ErrorCode::invalid_argument);
}

// Reconnect backoff: growth, cap, jitter bounds, determinism.
#include <doctest/doctest.h>

#include "net/backoff.hpp"

using namespace archipelago::net;
using namespace std::chrono_literals;

TEST_CASE("without jitter the delay doubles from initial and stops at max, and reset starts over") {
  Backoff backoff({100ms, 1s, 2.0, 0.0, 1});
  const std::chrono::nanoseconds expected[] = {100ms, 200ms, 400ms, 800ms, 1s, 1s, 1s};
  for (auto delay : expected) CHECK(backoff.next_delay() == delay);
  CHECK(backoff.attempts() == 7);
  backoff.reset();
  CHECK(backoff.attempts() == 0);
  CHECK(backoff.next_delay() == 100ms);
  CHECK(backoff.next_delay() == 200ms);
}

TEST_CASE("a multiplier of 1.5 grows geometrically") {
  Backoff backoff({40ms, 1s, 1.5, 0.0, 1});
  CHECK(backoff.next_delay() == 40ms);
  CHECK(backoff.next_delay() == 60ms);
  CHECK(backoff.next_delay() == 90ms);
  CHECK(backoff.next_delay() == 135ms);
}

TEST_CASE("jittered delays stay within [base·(1 - jitter), base], never above the cap, and use the whole band") {
  const BackoffOptions options{100ms, 2s, 2.0, 0.25, 42};
  Backoff backoff(options);
  double lowest = 10, highest = 0;  // as a fraction of the base
  for (int round = 0; round < 200; ++round) {
    double base = 0.1;
    for (int attempt = 0; attempt < 8; ++attempt) {
      const double delay = std::chrono::duration<double>(backoff.next_delay()).count();
      CHECK(delay >= base * 0.75 - 1e-9);
      CHECK(delay <= base + 1e-9);
      lowest = std::min(lowest, delay / base);
      highest = std::max(highest, delay / base);
      base = std::min(base * 2, 2.0);
    }
    backoff.reset();
  }
  CHECK(lowest < 0.77);
  CHECK(highest > 0.98);
}

TEST_CASE("the same seed gives the same delays, another seed does not") {
  const BackoffOptions a{100ms, 10s, 2.0, 0.2, 7};
  BackoffOptions b = a;
  b.seed = 8;
  Backoff first(a), again(a), other(b);
  int differences = 0;
  for (int i = 0; i < 20; ++i) {
    const auto x = first.next_delay();
    CHECK(x == again.next_delay());
    differences += x != other.next_delay();
  }
  CHECK(differences >= 18);
}

TEST_CASE("thousands of attempts stay in the capped band without overflow, still spread out") {
  Backoff backoff({1ms, 30s, 10.0, 0.1, 3});
  std::chrono::nanoseconds lowest = 1h, highest{};
  for (int i = 0; i < 10000; ++i) {
    const auto delay = backoff.next_delay();
    if (i < 10) continue;  // still growing
    lowest = std::min(lowest, delay);
    highest = std::max(highest, delay);
  }
  CHECK(highest <= 30s);
  CHECK(lowest >= 27s);
  CHECK(highest - lowest > 2s);  // nodes at the cap do not all retry at exactly 30 s
}

TEST_CASE("validate names the bad field") {
  CHECK(validate(BackoffOptions{}).ok());
  struct Case { BackoffOptions options; const char* field; };
  const Case cases[] = {
      {{0ms, 1s, 2.0, 0.1, 1}, "initial"},
      {{2s, 1s, 2.0, 0.1, 1}, "max"},
      {{1ms, 1s, 0.5, 0.1, 1}, "multiplier"},
      {{1ms, 1s, 2.0, 1.0, 1}, "jitter_fraction"},
      {{1ms, 1s, 2.0, -0.1, 1}, "jitter_fraction"},
  };
  for (const auto& c : cases) {
    auto status = validate(c.options);
    REQUIRE_FALSE(status.ok());
    CHECK(status.error().reason.find(c.field) != std::string::npos);
  }
}

// net/session_budget: a session's calls and bytes against their rates, bursts and debt bound.
// Rates and bursts are powers of two, so every time below is exact in binary.
#include <doctest/doctest.h>

#include "net/session_budget.hpp"

using namespace archipelago::net;

TEST_CASE("a rate budget lets the burst pass at once, then charges debt at the rate") {
  RateBudget budget({128, 8});  // 128 per second, 8 at once
  for (int i = 0; i < 8; ++i) CHECK(budget.charge(1, 0.0) == 0);
  CHECK(budget.charge(1, 0.0) == doctest::Approx(1.0 / 128));
  CHECK(budget.charge(1, 0.0) == doctest::Approx(2.0 / 128));
  CHECK(budget.charge(1, 1.0) == 0);  // a second later the debt is repaid

  RateBudget at_rate({128, 8});  // arrivals exactly at the rate never wait
  double waited = 0;
  for (int i = 0; i < 1280; ++i) waited += at_rate.charge(1, i / 128.0);
  CHECK(waited == 0);

  RateBudget twice({128, 8});  // arrivals at twice the rate for 10 s: half of it is debt, less the burst
  double debt = 0;
  for (int i = 0; i < 2560; ++i) debt = twice.charge(1, i / 256.0);
  CHECK(debt == doctest::Approx(20.0 - 2559 / 256.0 - 8.0 / 128));
}

TEST_CASE("an honest session never waits, a flood waits and is then cut with its reason") {
  SessionLimits limits;
  limits.calls = {1024, 1024};
  limits.bytes = {1 << 20, 1 << 20};  // 1 MiB per second, 1 MiB at once
  limits.max_delay_s = 2.0;
  SessionBudget honest(limits);
  // Five heartbeats per second from each of 8 learners, and a 512 KiB update every second, for 60 s.
  double waited = 0;
  for (int tick = 0; tick < 60 * 40; ++tick) {
    waited += honest.charge(200, tick / 40.0).delay_s;
    if (tick % 40 == 20) waited += honest.charge(512 << 10, tick / 40.0).delay_s;
  }
  CHECK(waited == 0);

  SessionBudget flood(limits);  // 30 000 small calls at one instant
  int at_once = 0, delayed = 0, calls = 0;
  BudgetDecision last;
  for (; calls < 30000; ++calls) {
    last = flood.charge(100, 5.0);
    if (last.cut) break;
    (last.delay_s == 0 ? at_once : delayed) += 1;
  }
  CHECK(last.cut);
  CHECK(at_once == 1024);   // the burst
  CHECK(delayed == 2048);   // then 2 s of debt at 1024 per second
  CHECK(calls == 3072);     // the next one is cut: the flood ends long before 30 000
  CHECK(last.reason.find("more calls than 1024 per second (burst 1024)") != std::string::npos);

  SessionBudget bulk(limits);  // bytes that ignore flow control: 1 MiB chunks back to back
  BudgetDecision chunk;
  int chunks = 0;
  while (!(chunk = bulk.charge(1 << 20, 0.0)).cut && chunks < 100) ++chunks;
  CHECK(chunks == 3);  // 1 MiB at once, then 1 s and 2 s of debt; the fourth is cut
  CHECK(chunk.reason.find("more bytes than 1 MiB per second (burst 1 MiB)") != std::string::npos);
}

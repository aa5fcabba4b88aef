// The runtime's accounting (actors/accounting.hpp): the ledger in JSON, from the actors' status, and
// its carry across coordinator restarts; tokens per step from the run's configuration.
#include <vector>

#include <doctest/doctest.h>

#include "actors/accounting.hpp"
#include "actors/runtime_options.hpp"

using namespace archipelago::actors;

TEST_CASE("goodput ledger: every part from its own measurement, what no clock saw in one part") {
  // Slot 0: running 100 s: 2 s recovering, 80 s computing (70 s merged, 4 s refused, 1 s in updates on
  // their way, 5 s unsent), 3 s waiting, 4 s throttled, 6 s overhead; 5 s no clock saw.
  SlotTimes a;
  a.recovery_s = 2;
  a.compute_s = 80;
  a.wait_s = 3;
  a.throttled_s = 4;
  a.overhead_s = 6;
  a.sent_compute_s = 75;
  a.held_compute_s = 5;
  a.running = true;
  a.merged_compute_s = 70;
  a.rejected_compute_s = 4;
  // Slot 1: killed and held down for 30 s, two incarnations computing 45 s, 5 s paused; the first
  // left 3 s of unsent work behind; given up since (idle 9 s).
  SlotTimes b;
  b.recovery_s = 4;
  b.compute_s = 45;
  b.paused_s = 5;
  b.restarting_s = 30;
  b.idle_s = 9;
  b.sent_compute_s = 42;
  b.left_compute_s = 3;
  b.merged_compute_s = 40;
  const auto ledger = build_ledger(100, {a, b});
  CHECK(ledger.allocated_s == 200);
  const auto& s0 = ledger.slots[0];
  CHECK(s0.merged == 70);
  CHECK(s0.rejected == 4);
  CHECK(s0.in_flight == doctest::Approx(5 + 1));
  CHECK(s0.lost == 0);
  CHECK(s0.unaccounted == doctest::Approx(100 - 2 - 80 - 3 - 4 - 6));
  const auto& s1 = ledger.slots[1];
  CHECK(s1.restarting == 30);
  CHECK(s1.paused == 5);
  CHECK(s1.in_flight == 0);  // nothing runs: the 2 s never merged are lost with the 3 s left behind
  CHECK(s1.lost == doctest::Approx(3 + 2));
  CHECK(s1.unaccounted == doctest::Approx(100 - 4 - 45 - 5 - 30 - 9));
  CHECK(ledger.goodput() == doctest::Approx(110.0 / 200));
  // A slot held down X s can have goodput at most 1 - X / (wall · slots), whatever else happened.
  CHECK(ledger.goodput() <= 1 - 30.0 / 200);
  for (const auto& p : ledger.slots) CHECK(p.sum() == doctest::Approx(100).epsilon(1e-12));
  // Shares of the allocated time in JSON: goodput plus the badput parts is one, unaccounted included.
  const auto j = to_json(ledger);
  CHECK(j["badput"]["unaccounted"].get<double>() == doctest::Approx(12.0 / 200));
  CHECK(j["seconds"]["in_flight"].get<double>() == doctest::Approx(6));
  double shares = j["goodput"].get<double>();
  for (const auto& [part, share] : j["badput"].items()) shares += share.get<double>();
  CHECK(std::abs(shares - 1) < 1e-9);
  // A slot nobody reported on: no clock saw it.
  const auto empty = build_ledger(50, {SlotTimes{}});
  CHECK(empty.slots[0].unaccounted == 50);
  CHECK(empty.goodput() == 0);
  // Ring all-reduce: 10 worker-steps of 4 workers (2.5 steps) × 2·3 model bytes of 40 B per step.
  CHECK(ddp_equivalent_bytes(1000, 100, 10, 4) == 10 * 2 * 3 * 10 * 4 / 4);
  CHECK(ddp_equivalent_bytes(1000, 100, 10, 1) == 0);  // one worker sends nothing
}

TEST_CASE("goodput ledger from actor status: a resumed run's earlier merges are not this run's") {
  // Partial statuses, as JSON crosses a mailbox: what is missing keeps its default.
  const auto monitor = decode_status<MonitorStatus>(
      {{"slots",
        {{"learner-0",
          {{"state", "running"},
           {"times", {{"lifetime_s", 10.0}, {"alive_s", 10.0}, {"compute_s", 8.0}, {"sent_compute_s", 7.5},
                      {"held_compute_s", 0.5}, {"idle_s", 0.25}}}}}}}},
      "monitor");
  const auto syncer = decode_status<SyncerStatus>({{"learners", {{"learner-0", {{"compute_merged_s", 107.0}}}}}}, "syncer");
  const auto at_start =
      decode_status<SyncerAccounting>({{"learners", {{"learner-0", {{"compute_merged_s", 100.0}}}}}}, "accounting");
  REQUIRE(monitor);
  REQUIRE(syncer);
  REQUIRE(at_start);
  const auto ledger = ledger_from_status(10, {"learner-0", "learner-1"}, *monitor, *syncer, *at_start);
  CHECK(ledger.slots[0].merged == doctest::Approx(7));
  CHECK(ledger.slots[0].in_flight == doctest::Approx(0.5 + 0.5));  // running: unsent, and sent not merged yet
  CHECK(ledger.slots[0].idle == 0.25);
  // learner-1 never reported: the monitor, up all along, saw it with no incarnation: idle, measured.
  CHECK(ledger.slots[1].idle == 10);
  CHECK(ledger.slots[1].unaccounted == 0);
  CHECK(ledger.goodput() == doctest::Approx(7.0 / 20));
}

TEST_CASE("goodput ledger carry: a committed version's value round-trips, and a bad one is refused with its reason") {
  LedgerCarry carry;
  carry.run_started_unix_s = unix_seconds() - 100;
  SlotCarry slot;
  slot.total.lifetime_seconds = 90;
  slot.total.compute_seconds = 70;
  slot.raw.reporter = 0xfedcba9876543210ull;  // above 2^53: kept exactly
  slot.total.overhead_seconds = 2.5;
  slot.total.left_compute_seconds = -0.125;  // restored work counted back: may be negative
  slot.raw.lifetime_seconds = 40;
  slot.raw.incarnation = 3;
  carry.slots["learner-0"] = slot;
  auto back = ledger_carry_from_json(nlohmann::json::parse(to_json(carry).dump()));
  REQUIRE_MESSAGE(back, back.error().reason);
  CHECK(back->run_started_unix_s == carry.run_started_unix_s);
  REQUIRE(back->slots.count("learner-0") == 1);
  const auto& b = back->slots.at("learner-0");
  CHECK(b.raw.reporter == 0xfedcba9876543210ull);
  CHECK(b.raw.incarnation == 3);
  CHECK(b.raw.lifetime_seconds == 40);
  CHECK(b.total.lifetime_seconds == 90);
  CHECK(b.total.compute_seconds == 70);
  CHECK(b.total.overhead_seconds == 2.5);
  CHECK(b.total.left_compute_seconds == -0.125);

  auto refused = [](nlohmann::json j, const std::string& why) {
    auto r = ledger_carry_from_json(j);
    REQUIRE_FALSE(r);
    CHECK_MESSAGE(r.error().reason.find(why) != std::string::npos, r.error().reason);
  };
  auto j = to_json(carry);
  refused(nlohmann::json::array(), "not an object");
  auto future = j;
  future["run_started_unix_s"] = unix_seconds() + 3600;
  refused(future, "run_started_unix_s");
  auto negative = j;
  negative["slots"]["learner-0"]["total"]["compute_s"] = -1.0;
  refused(negative, "compute_s");
  auto negative_idle = j;
  negative_idle["slots"]["learner-0"]["total"]["idle_s"] = -1.0;
  refused(negative_idle, "idle_s");
  // A carry written before the ledger measured every part lacks the later times: they count from 0.
  auto older = j;
  for (const char* key : {"throttled_s", "overhead_s", "sent_compute_s", "held_compute_s", "left_compute_s", "idle_s"}) {
    older["slots"]["learner-0"]["total"].erase(key);
    older["slots"]["learner-0"]["raw"].erase(key);
  }
  auto read_older = ledger_carry_from_json(older);
  REQUIRE_MESSAGE(read_older, read_older.error().reason);
  CHECK(read_older->slots.at("learner-0").total.overhead_seconds == 0);
  CHECK(read_older->slots.at("learner-0").total.compute_seconds == 70);
  auto no_reporter = j;
  no_reporter["slots"]["learner-0"]["raw"].erase("reporter");
  refused(no_reporter, "reporter");
}

TEST_CASE("policy: tokens per inner step come from the configuration, ddp's one learner averages every shard's batch") {
  archipelago::training::ReferenceSetup setup;
  setup.inner.batch_size = 8;
  setup.model.seq_len = 32;
  setup.run.learners = 4;
  setup.run.mode = archipelago::diloco::Mode::decoupled;
  CHECK(configured_tokens_per_step(setup) == 256);
  setup.run.mode = archipelago::diloco::Mode::ddp;  // one learner averaging the batches of every shard
  CHECK(configured_tokens_per_step(setup) == 1024);
}

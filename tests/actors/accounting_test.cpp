// The runtime's accounting (actors/accounting.hpp): the ledger in JSON, from the actors' status, and
// its carry across coordinator restarts; tokens per step from the run's configuration.
#include <vector>

#include <doctest/doctest.h>

#include "actors/accounting.hpp"
#include "actors/runtime_options.hpp"

using namespace archipelago::actors;

TEST_CASE("goodput ledger: every part from its own measurement, and they add up to the allocated time") {
  // Slot 0: 100 s of one incarnation, 90 s of it in heartbeats: 2 s recovering, 80 s computing,
  // 3 s waiting; the syncer merged 70 s of compute and refused 4 s.
  SlotTimes a;
  a.lifetime_s = 100;
  a.alive_s = 90;
  a.recovery_s = 2;
  a.compute_s = 80;
  a.wait_s = 3;
  a.merged_compute_s = 70;
  a.rejected_compute_s = 4;
  // Slot 1: killed and held down for 30 s, two incarnations living 60 s in all, 5 s paused.
  SlotTimes b;
  b.lifetime_s = 60;
  b.alive_s = 59;
  b.recovery_s = 4;
  b.compute_s = 45;
  b.paused_s = 5;
  b.restarting_s = 30;
  b.merged_compute_s = 40;
  const auto ledger = build_ledger(100, {a, b});
  CHECK(ledger.allocated_s == 200);
  const auto& s0 = ledger.slots[0];
  CHECK(s0.merged == 70);
  CHECK(s0.rejected == 4);
  CHECK(s0.unmerged == doctest::Approx(80 + 10 - 70 - 4));  // the 10 s after the last heartbeat computed too
  CHECK(s0.overhead == doctest::Approx(90 - 2 - 80 - 3));
  CHECK(s0.idle == doctest::Approx(0));
  const auto& s1 = ledger.slots[1];
  CHECK(s1.restarting == 30);
  CHECK(s1.paused == 5);
  CHECK(s1.idle == doctest::Approx(100 - 60 - 30));
  CHECK(ledger.goodput() == doctest::Approx(110.0 / 200));
  // A slot held down X s can have goodput at most 1 - X / (wall · slots), whatever else happened.
  CHECK(ledger.goodput() <= 1 - 30.0 / 200);
  for (const auto& p : ledger.slots) CHECK(p.sum() == doctest::Approx(100).epsilon(1e-12));
  CHECK(std::abs(ledger.seconds.sum() - ledger.allocated_s) < 1e-9);
  // Shares of the allocated time in JSON: goodput plus the badput parts is one.
  const auto j = to_json(ledger);
  double shares = j["goodput"].get<double>();
  for (const auto& [part, share] : j["badput"].items()) shares += share.get<double>();
  CHECK(std::abs(shares - 1) < 1e-9);
  // A slot nobody reported on is idle all the run.
  const auto empty = build_ledger(50, {SlotTimes{}});
  CHECK(empty.slots[0].idle == 50);
  CHECK(empty.goodput() == 0);
  // Ring all-reduce: 10 worker-steps of 4 workers (2.5 steps) × 2·3 model bytes of 40 B per step.
  CHECK(ddp_equivalent_bytes(1000, 100, 10, 4) == 10 * 2 * 3 * 10 * 4 / 4);
  CHECK(ddp_equivalent_bytes(1000, 100, 10, 1) == 0);  // one worker sends nothing
}

TEST_CASE("goodput ledger from actor status: a resumed run's earlier merges are not this run's") {
  // Partial statuses, as JSON crosses a mailbox: what is missing keeps its default.
  const auto monitor = decode_status<MonitorStatus>(
      {{"slots", {{"learner-0", {{"times", {{"lifetime_s", 10.0}, {"alive_s", 10.0}, {"compute_s", 8.0}}}}}}}}, "monitor");
  const auto syncer = decode_status<SyncerStatus>({{"learners", {{"learner-0", {{"compute_merged_s", 107.0}}}}}}, "syncer");
  const auto at_start =
      decode_status<SyncerAccounting>({{"learners", {{"learner-0", {{"compute_merged_s", 100.0}}}}}}, "accounting");
  REQUIRE(monitor);
  REQUIRE(syncer);
  REQUIRE(at_start);
  const auto ledger = ledger_from_status(10, {"learner-0", "learner-1"}, *monitor, *syncer, *at_start);
  CHECK(ledger.slots[0].merged == doctest::Approx(7));
  CHECK(ledger.slots[0].unmerged == doctest::Approx(1));
  CHECK(ledger.slots[1].idle == 10);
  CHECK(ledger.goodput() == doctest::Approx(7.0 / 20));
}

TEST_CASE("goodput ledger carry: a committed version's value round-trips, and a bad one is refused with its reason") {
  LedgerCarry carry;
  carry.run_started_unix_s = unix_seconds() - 100;
  SlotCarry slot;
  slot.total.lifetime_seconds = 90;
  slot.total.compute_seconds = 70;
  slot.raw.reporter = 0xfedcba9876543210ull;  // above 2^53: kept exactly
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
  auto no_reporter = j;
  no_reporter["slots"]["learner-0"]["raw"].erase("reporter");
  refused(no_reporter, "reporter");
}

TEST_CASE("policy: tokens per inner step come from the configuration; ddp's one learner averages every shard's batch") {
  archipelago::training::ReferenceSetup setup;
  setup.inner.batch_size = 8;
  setup.model.seq_len = 32;
  setup.run.learners = 4;
  setup.run.mode = archipelago::diloco::Mode::decoupled;
  CHECK(configured_tokens_per_step(setup) == 256);
  setup.run.mode = archipelago::diloco::Mode::ddp;  // one learner averaging the batches of every shard
  CHECK(configured_tokens_per_step(setup) == 1024);
}

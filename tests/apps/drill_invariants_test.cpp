// The drill's invariants (apps/drill/invariants.hpp) on observations built by hand: each one holds
// on a good observation and fails on one that violates it, and says why in its evidence.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/drill/invariants.hpp"
#include "apps/drill/observations.hpp"

namespace {

using namespace archipelago::apps::drill;
using nlohmann::json;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Recovery recovery(const std::string& kind, const std::string& target, double at_s, double from_s, double recovered_s,
                  double bound_s) {
  Recovery r;
  r.kind = kind;
  r.fault = kind;
  r.target = target;
  r.at_s = at_s;
  r.from_s = from_s;
  r.recovered_s = recovered_s;
  r.bound_s = bound_s;
  return r;
}

StoreObservation::Version version(uint64_t v, const json& manifest = json::object(), bool verified = true) {
  return {v, verified, verified ? "" : "blob hash mismatch", manifest.dump()};
}

// A manifest with one contributor's merged steps and the learner's received_until per fragment.
json manifest(const std::string& learner, int fragment, int64_t steps, std::vector<int64_t> received_until) {
  return {{"contributors", {{{"learner", learner}, {"fragment", fragment}, {"steps", steps}}}},
          {"accounting", {{"learners", {{learner, {{"received_until", received_until}}}}}}}};
}

// A commit log line as the syncer writes it (actors/syncer.cpp, log_commit).
std::string commit_line(uint64_t v, int64_t pid, int64_t started_ms = 1700000000000) {
  return json{{"version", v}, {"pid", pid}, {"syncer_started_unix_ms", started_ms}}.dump() + "\n";
}

// Incarnation `pid` committed `versions`, in this order.
std::string commits(int64_t pid, const std::vector<uint64_t>& versions) {
  std::string log;
  for (uint64_t v : versions) log += commit_line(v, pid);
  return log;
}

StoreObservation stored(const std::vector<uint64_t>& versions) {
  StoreObservation store;
  for (uint64_t v : versions) store.versions.push_back(version(v));
  return store;
}

// A coordinator log line as spdlog writes it.
std::string log_line(const std::string& at, const std::string& text) {
  return "[2026-12-06 " + at + "] [-] [syncer] [warning] " + text + "\n";
}

const std::string kCorruptRefusal = "rejected an update from learner-2: corrupt: checksum mismatch in chunk 0";

// A corrupt_update carried out on `target` when incarnation `incarnation`'s log was `offset` bytes long.
Recovery corruption(const std::string& target, int incarnation, int64_t offset, double at_s = 12) {
  Recovery r = recovery("corrupt", target, at_s, at_s, at_s + 5, 20);
  r.detail = {{"log_incarnation", incarnation}, {"log_offset", offset}};
  return r;
}

}  // namespace

TEST_CASE("a check that observed nothing fails, whatever it claims") {
  const Check empty("x", true, 0, "nothing seen");
  CHECK_FALSE(empty.passed);
  CHECK(empty.evidence == "no observation: nothing seen");
  CHECK(Check("x", true, 1, "seen").passed);
  CHECK_FALSE(Check("x", false, 3, "seen").passed);
}

TEST_CASE("the drill's variants keep the names result.json has always written, and map order ddp, diloco, fault_free") {
  CHECK(std::string(drill_variant_name(DrillVariant::ddp)) == "ddp");
  CHECK(std::string(drill_variant_name(DrillVariant::diloco)) == "diloco");
  CHECK(std::string(drill_variant_name(DrillVariant::fault_free)) == "fault_free");
  std::map<DrillVariant, int> runs{{DrillVariant::fault_free, 0}, {DrillVariant::diloco, 0}, {DrillVariant::ddp, 0}};
  std::string order;
  for (const auto& [v, _] : runs) order += std::string(drill_variant_name(v)) + " ";
  CHECK(order == "ddp diloco fault_free ");
}

TEST_CASE("snapshots compared with the store: same, changed, lost, and dropped by retention") {
  StoreMemory memory;
  memory.snapshots = {{2, {"a"}}, {5, {"b"}}, {6, {"c"}}, {7, {"d"}}};
  const Hashes now_stored = {{5, {"b"}}, {7, {"D"}}, {8, {"e"}}};  // 2 retired, 6 gone, 7 rewritten
  compare_snapshots(now_stored, memory);
  CHECK(memory.digests.same == 1);
  CHECK(memory.digests.changed == 1);
  CHECK(memory.digests.lost == 1);
  CHECK(memory.digests.dropped == 1);
  CHECK(memory.snapshots.count(2) == 0);  // compared no more
  CHECK(memory.snapshots.count(6) == 0);
  CHECK(memory.snapshots.count(7) == 1);
}

TEST_CASE("the commit log and the refusals are read as the coordinator writes them") {
  const auto lines = read_commit_log(commit_line(1, 10) + "\n" + commit_line(2, 10) + "{\"version\": 3}\n" + commit_line(3, 11, 5));
  REQUIRE(lines.size() == 4);  // v1, v2, the line without pid, v3: the empty line is skipped
  CHECK(lines[0].version == 1);
  CHECK(lines[0].incarnation == "10@1700000000000");
  CHECK(lines[1].line == 3);
  CHECK(lines[1].version == 2);
  CHECK(lines[2].error.rfind("is no commit: {\"version\": 3}", 0) == 0);
  CHECK(lines[3].version == 3);
  CHECK(lines[3].incarnation == "11@5");

  const std::string log = log_line("10:00:00.100", "coordinator listening on 127.0.0.1:5000") +
                          log_line("10:00:01.250", kCorruptRefusal) +
                          log_line("10:00:02.000", "rejected a fragment update from learner-1 (fragment 0): stale") +
                          log_line("10:00:03.000", "rejected an update from learner-3: non_finite: NaN in chunk 1") +
                          log_line("10:00:04.000", "rejected a message: truncated: 12 bytes");
  const auto refusals = read_refusals(log);
  REQUIRE(refusals.size() == 4);
  CHECK(refusals[0].learner == "learner-2");
  CHECK(refusals[0].reason == "malformed");
  CHECK(refusals[0].logged_at == "2026-12-06 10:00:01.250");
  CHECK(refusals[0].offset == static_cast<int64_t>(log.find("[2026-12-06 10:00:01.250]")));
  CHECK(refusals[1].learner == "learner-1");
  CHECK(refusals[1].reason == "stale");
  CHECK(refusals[2].reason == "non_finite");
  CHECK(refusals[3].learner.empty());
  CHECK(refusals[3].reason == "malformed");
}

TEST_CASE("versions_strictly_increasing_and_verified: the commit log against the store") {
  // Two incarnations: the restarted one goes on after the last version the killed one committed.
  const std::string log = commits(100, {1, 2, 3}) + commits(200, {4, 5});
  const Check ok = versions_strictly_increasing_and_verified(log, stored({1, 2, 3, 4, 5}), 5, "");
  CHECK(ok.passed);
  CHECK(ok.name == "versions_strictly_increasing_and_verified");
  CHECK(ok.observations == 5);
  CHECK(contains(ok.evidence, "5 commits in the commit log from 2 incarnation(s) (v1..v3, v4..v5)"));
  CHECK(contains(ok.evidence, "5 of 5 stored versions read back with every blob verified, 0 of them in no log line"));

  // The store lists 1..5 in key order whatever happened; the log shows the restart reusing v3.
  const Check reused = versions_strictly_increasing_and_verified(commits(100, {1, 2, 3}) + commits(200, {3, 4, 5}),
                                                                 stored({1, 2, 3, 4, 5}), 5, "");
  CHECK_FALSE(reused.passed);
  CHECK(contains(reused.evidence, "incarnation 2 (200@1700000000000) committed v3 after v3"));

  const Check backwards = versions_strictly_increasing_and_verified(commits(100, {1, 3, 2}), stored({1, 2, 3}), 3, "");
  CHECK_FALSE(backwards.passed);
  CHECK(contains(backwards.evidence, "incarnation 1 (100@1700000000000) committed v2 after v3"));

  const Check missing = versions_strictly_increasing_and_verified(commits(100, {1, 2, 3, 4}), stored({1, 2, 4}), 4, "");
  CHECK_FALSE(missing.passed);
  CHECK(contains(missing.evidence, "v3 logged as committed, not in the store"));

  // Recorded by the store just before a kill, its line never written: counted, not a failure.
  const Check unlogged = versions_strictly_increasing_and_verified(commits(100, {1, 2}) + commits(200, {4, 5}),
                                                                   stored({1, 2, 3, 4, 5}), 5, "");
  CHECK(unlogged.passed);
  CHECK(unlogged.observations == 4);
  CHECK(contains(unlogged.evidence, "1 of them in no log line"));

  const Check garbled = versions_strictly_increasing_and_verified(commits(100, {1}) + "{\"version\": 2\n", stored({1}), 1, "");
  CHECK_FALSE(garbled.passed);
  CHECK(contains(garbled.evidence, "line 2 is no commit"));

  // No log: the store alone proves nothing.
  const Check unlogged_run = versions_strictly_increasing_and_verified("", stored({1, 2, 3}), 3, "");
  CHECK_FALSE(unlogged_run.passed);
  CHECK(unlogged_run.observations == 0);

  StoreObservation corrupt = stored({1, 2, 3});
  corrupt.versions[1] = version(2, json::object(), false);
  const Check bad = versions_strictly_increasing_and_verified(commits(100, {1, 2, 3}), corrupt, 3, "shard_1_");
  CHECK_FALSE(bad.passed);
  CHECK(bad.name == "shard_1_versions_strictly_increasing_and_verified");
  CHECK(contains(bad.evidence, "v2: blob hash mismatch"));

  CHECK_FALSE(versions_strictly_increasing_and_verified(commits(100, {1, 2, 3}), stored({1, 2, 3}), 4, "").passed);

  StoreObservation unreadable;
  unreadable.error = "cannot open the store: locked";
  const Check none = versions_strictly_increasing_and_verified(commits(100, {1, 2, 3}), unreadable, 3, "");
  CHECK_FALSE(none.passed);
  CHECK(none.observations == 0);
  CHECK(none.evidence == "no observation: cannot open the store: locked");
}

TEST_CASE("digests_never_change") {
  const Check ok = digests_never_change({4, 0, 0, 2}, "");
  CHECK(ok.passed);
  CHECK(ok.observations == 4);
  CHECK(contains(ok.evidence, "2 dropped by retention"));
  CHECK_FALSE(digests_never_change({4, 1, 0, 0}, "").passed);
  CHECK_FALSE(digests_never_change({4, 0, 1, 0}, "").passed);
  CHECK_FALSE(digests_never_change({0, 0, 0, 3}, "").passed);  // only dropped ones: nothing compared
}

TEST_CASE("no_update_applied_twice") {
  StoreObservation good;
  good.versions = {version(1, manifest("learner-0", 0, 10, {10})), version(2, manifest("learner-0", 0, 10, {20}))};
  const json summary = {{"rejected_by_reason", {{"duplicate", 2}}}};
  const Check ok = no_update_applied_twice(good, summary, "");
  CHECK(ok.passed);
  CHECK(ok.observations == 2);
  CHECK(contains(ok.evidence, "duplicates refused by the syncer: 2"));

  StoreObservation twice = good;  // the second merge of the same 10 steps: 20 merged over a span of 10
  twice.versions[1] = version(2, manifest("learner-0", 0, 10, {10}));
  const Check bad = no_update_applied_twice(twice, summary, "");
  CHECK_FALSE(bad.passed);
  CHECK(contains(bad.evidence, "learner-0 fragment 0: 20 steps merged > 10"));

  StoreObservation backwards = good;  // received_until went back
  backwards.versions.push_back(version(3, manifest("learner-0", 0, 0, {15})));
  CHECK_FALSE(no_update_applied_twice(backwards, summary, "").passed);

  StoreObservation no_accounting;
  no_accounting.versions = {version(1, {{"contributors", {{{"learner", "learner-0"}, {"fragment", 0}, {"steps", 1}}}}})};
  CHECK_FALSE(no_update_applied_twice(no_accounting, summary, "").passed);
}

TEST_CASE("killed_learners_back_within_bound") {
  CHECK_FALSE(killed_learners_back_within_bound({}, 0).has_value());
  // Coordinator and shard kills are judged elsewhere.
  CHECK_FALSE(killed_learners_back_within_bound({recovery("coordinator", "coordinator", 10, 11, 11.5, 2)}, 0).has_value());

  const std::vector<Recovery> good = {recovery("learner", "learner-1", 10, 10, 25, 20), recovery("node", "node-0", 40, 41, 60, 30)};
  const auto ok = killed_learners_back_within_bound(good, 5);
  REQUIRE(ok.has_value());
  CHECK(ok->passed);
  CHECK(ok->observations == 2);

  auto late = good;
  late.push_back(recovery("freeze", "node-1", 70, 73, 110, 30));  // 37 s > 30 s
  const auto slow = killed_learners_back_within_bound(late, 5);
  REQUIRE(slow.has_value());
  CHECK_FALSE(slow->passed);
  CHECK(contains(slow->evidence, "freeze node-1 at 65.0 s: 37.00 s > 30 s"));

  auto lost = good;
  lost.push_back(recovery("learner", "learner-3", 70, 70, -1, 20));
  const auto never = killed_learners_back_within_bound(lost, 0);
  REQUIRE(never.has_value());
  CHECK_FALSE(never->passed);
  CHECK(contains(never->evidence, "learner learner-3 at 70.0 s: never"));
}

TEST_CASE("corrupted_updates_refused: each injection matched to its refusal, one to one") {
  const std::string before = log_line("10:00:00.100", "learner-2 joined at version 3");
  const std::string log = before + log_line("10:00:01.250", kCorruptRefusal);
  const int64_t injected_at = static_cast<int64_t>(before.size());

  // Neither an injection nor a malformed refusal: nothing to check.
  CHECK_FALSE(corrupted_updates_refused({recovery("learner", "learner-0", 1, 1, 2, 20)}, {before}, 0).has_value());
  const std::string stale = log_line("10:00:02.000", "rejected a fragment update from learner-1 (fragment 0): stale");
  CHECK_FALSE(corrupted_updates_refused({}, {before + stale}, 0).has_value());

  const auto ok = corrupted_updates_refused({corruption("learner-2", 0, injected_at)}, {log}, 2);
  REQUIRE(ok.has_value());
  CHECK(ok->passed);
  CHECK(ok->observations == 1);
  CHECK(contains(ok->evidence, "1 of 1 updates sent with a flipped payload bit matched"));
  CHECK(contains(ok->evidence, "learner-2 at 10.0 s: refused as malformed, coordinator.0's log at 2026-12-06 10:00:01.250"));

  // The same refusal logged before the injection cannot be its answer.
  const auto early = corrupted_updates_refused({corruption("learner-2", 0, static_cast<int64_t>(log.size()))}, {log}, 0);
  REQUIRE(early.has_value());
  CHECK_FALSE(early->passed);
  CHECK(contains(early->evidence, "no refusal of its update as malformed in coordinator.0's log"));
  CHECK(contains(early->evidence, "1 malformed refusals without an injection"));

  // Another learner's refusal, or this learner's for another reason, is no match.
  const auto other = corrupted_updates_refused({corruption("learner-5", 0, injected_at)}, {log}, 0);
  REQUIRE(other.has_value());
  CHECK_FALSE(other->passed);
  CHECK(other->observations == 2);
  const auto wrong_reason = corrupted_updates_refused(
      {corruption("learner-1", 0, 0)}, {before + stale}, 0);
  REQUIRE(wrong_reason.has_value());
  CHECK_FALSE(wrong_reason->passed);

  // Two corruptions of one learner and one refusal: one is unanswered.
  const auto twice = corrupted_updates_refused({corruption("learner-2", 0, injected_at), corruption("learner-2", 0, injected_at, 20)},
                                               {log}, 0);
  REQUIRE(twice.has_value());
  CHECK_FALSE(twice->passed);
  CHECK(contains(twice->evidence, "1 of 2 updates"));

  // The refusal is in the next incarnation's log, not the one the corruption was sent to.
  const auto elsewhere = corrupted_updates_refused({corruption("learner-2", 0, injected_at)}, {before, log}, 0);
  REQUIRE(elsewhere.has_value());
  CHECK_FALSE(elsewhere->passed);

  // A malformed refusal no injection explains fails the check, even with no corruption injected.
  const auto unexplained = corrupted_updates_refused({}, {log}, 0);
  REQUIRE(unexplained.has_value());
  CHECK_FALSE(unexplained->passed);
  CHECK(unexplained->observations == 1);
  CHECK(contains(unexplained->evidence, "a malformed refusal no injected corruption explains: coordinator.0 at 2026-12-06 "
                                        "10:00:01.250 (learner-2)"));

  // An injection recorded without the coordinator's log position cannot be matched.
  Recovery blind = recovery("corrupt", "learner-2", 12, 12, 20, 20);
  const auto unplaced = corrupted_updates_refused({blind}, {log}, 0);
  REQUIRE(unplaced.has_value());
  CHECK_FALSE(unplaced->passed);
  CHECK(contains(unplaced->evidence, "no coordinator log to look in"));
}

TEST_CASE("a restarted coordinator or shard resumed from its store's latest version") {
  CHECK_FALSE(coordinator_resumed_from_last_committed({}).has_value());
  const auto ok = coordinator_resumed_from_last_committed({{"coordinator", 7, 7}, {"coordinator", 12, 12}});
  REQUIRE(ok.has_value());
  CHECK(ok->passed);
  CHECK(ok->evidence == "store latest 7 -> resumed from 7; store latest 12 -> resumed from 12");

  const auto behind = coordinator_resumed_from_last_committed({{"coordinator", 7, 6}});
  REQUIRE(behind.has_value());
  CHECK_FALSE(behind->passed);
  const auto silent = coordinator_resumed_from_last_committed({{"coordinator", 7, -1}});  // it did not say
  REQUIRE(silent.has_value());
  CHECK_FALSE(silent->passed);

  const auto shard = shard_resumed_from_last_committed({{"shard-1", 4, 3}});
  REQUIRE(shard.has_value());
  CHECK_FALSE(shard->passed);
  CHECK(shard->name == "shard_resumed_from_last_committed");
  CHECK(shard->evidence == "shard-1: store latest 4 -> resumed from 3");
}

TEST_CASE("a restarted coordinator or shard committed within its bound") {
  const std::vector<Recovery> fast = {recovery("coordinator", "coordinator", 20, 22, 23.5, 2),
                                      recovery("shard", "shard-1", 30, 32, 33, 2)};
  const auto ok = coordinator_next_commit_within_bound(fast, 2, 0);
  REQUIRE(ok.has_value());
  CHECK(ok->passed);
  CHECK(ok->observations == 1);
  CHECK(contains(ok->evidence, "1 of 1 restarts committed a new version < 2.0 s after listening"));
  const auto shard_ok = shard_next_commit_within_bound(fast, 2, 0);
  REQUIRE(shard_ok.has_value());
  CHECK(shard_ok->passed);

  const std::vector<Recovery> late = {recovery("coordinator", "coordinator", 20, 22, 24, 2),  // exactly the bound: late
                                      recovery("shard", "shard-2", 30, 32, -1, 2)};
  const auto bad = coordinator_next_commit_within_bound(late, 2, 10);
  REQUIRE(bad.has_value());
  CHECK_FALSE(bad->passed);
  CHECK(contains(bad->evidence, " coordinator at 10.0 s: 2.00 s"));
  const auto shard_bad = shard_next_commit_within_bound(late, 2, 10);
  REQUIRE(shard_bad.has_value());
  CHECK_FALSE(shard_bad->passed);
  CHECK(contains(shard_bad->evidence, " shard-2 at 20.0 s: never"));
  CHECK_FALSE(shard_next_commit_within_bound({recovery("node", "node-0", 1, 2, 3, 30)}, 2, 0).has_value());
}

TEST_CASE("other_shards_committed_while_one_was_down") {
  CHECK_FALSE(other_shards_committed_while_one_was_down({}).has_value());
  const auto ok = other_shards_committed_while_one_was_down({{"shard-1", 3.25, 10, 13}});
  REQUIRE(ok.has_value());
  CHECK(ok->passed);
  CHECK(contains(ok->evidence, "shard-1 down 3.25 s: shard 0 10 -> 13"));
  const auto stalled = other_shards_committed_while_one_was_down({{"shard-1", 3, 10, 13}, {"shard-1", 3, 20, 20}});
  REQUIRE(stalled.has_value());
  CHECK_FALSE(stalled->passed);
  CHECK(contains(stalled->evidence, "1 of 2 shard outages"));
}

TEST_CASE("ledger_covers_the_run") {
  RunResult run;
  run.parts = {{"merged", 300}, {"waiting", 60}, {"restarting", 40}};
  run.allocated_s = 400;
  run.ledger_wall_s = 100;   // 4 slots
  run.cluster_wall_s = 106;  // the start-up the ledger does not count
  run.kills = 3;
  const Check ok = ledger_covers_the_run(run);
  CHECK(ok.passed);
  CHECK(ok.observations == 3);
  CHECK(contains(ok.evidence, "3 kills; smallest part restarting 40.00 s"));

  RunResult gap = run;
  gap.cluster_wall_s = 120;  // 20 s the ledger lost
  CHECK_FALSE(ledger_covers_the_run(gap).passed);
  RunResult over = run;
  over.cluster_wall_s = 98;  // the ledger counted more time than the cluster ran
  CHECK_FALSE(ledger_covers_the_run(over).passed);
  RunResult negative = run;
  negative.parts["unmerged"] = -10;  // merged work outran the measured compute
  const Check bad = ledger_covers_the_run(negative);
  CHECK_FALSE(bad.passed);
  CHECK(contains(bad.evidence, "smallest part unmerged -10.00 s"));
  RunResult none;
  CHECK_FALSE(ledger_covers_the_run(none).passed);
  CHECK(ledger_covers_the_run(none).observations == 0);
}

TEST_CASE("the loss checks") {
  const Check fell = loss_below_start(5.5, 4.25, "θ0 scored by this run's coordinator");
  CHECK(fell.passed);
  CHECK(fell.evidence == "held-out loss 5.5000 (θ0 scored by this run's coordinator) -> 4.2500");
  CHECK_FALSE(loss_below_start(5.5, 5.6, "s").passed);
  CHECK_FALSE(loss_below_start(NAN, 4.0, "s").passed);  // no start: nothing observed
  CHECK(loss_below_start(NAN, 4.0, "s").observations == 0);

  CHECK(loss_within_margin_of_fault_free(4.4, 4.0, 0.10).passed);
  const Check worse = loss_within_margin_of_fault_free(4.5, 4.0, 0.10);
  CHECK_FALSE(worse.passed);
  CHECK(contains(worse.evidence, "(margin 10 %: at most 4.4000)"));
  CHECK_FALSE(loss_within_margin_of_fault_free(NAN, 4.0, 0.10).passed);
}

TEST_CASE("no_scheduled_fault_skipped") {
  std::map<DrillVariant, RunResult> runs;
  runs[DrillVariant::fault_free].skipped = {{{"at_s", 1.0}, {"fault", "x"}, {"target", "y"}, {"why", "ignored"}}};
  runs[DrillVariant::diloco].recoveries = {recovery("learner", "learner-0", 1, 1, 2, 20)};
  runs[DrillVariant::ddp].recoveries = {recovery("learner", "learner-0", 1, 1, 2, 20)};
  const Check ok = no_scheduled_fault_skipped(runs, false);
  CHECK(ok.passed);
  CHECK(ok.evidence == "all 2 faults due in the ddp and diloco runs carried out");

  runs[DrillVariant::diloco].skipped = {{{"at_s", 12.34}, {"fault", "kill_node"}, {"target", "node-1"}, {"why", "node not running"}}};
  runs[DrillVariant::ddp].skipped = {{{"at_s", 12.5}, {"fault", "kill_node"}, {"target", "node-1"}, {"why", "no learners known on node-1"}}};
  const Check bad = no_scheduled_fault_skipped(runs, false);
  CHECK_FALSE(bad.passed);
  CHECK(bad.observations == 4);
  CHECK(bad.evidence ==
        "2 of 4 faults due skipped: ddp: kill_node node-1 at 12.5 s (no learners known on node-1); diloco: kill_node "
        "node-1 at 12.3 s (node not running)");
  const Check allowed = no_scheduled_fault_skipped(runs, true);
  CHECK(allowed.passed);
  CHECK(contains(allowed.evidence, "(allowed: drill.allow_skipped)"));
}

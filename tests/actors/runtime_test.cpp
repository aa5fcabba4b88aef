// The actor runtime in one process, on the tiny model: the reference engine's numbers in sync
// mode, learner and syncer crashes, the restart-intensity limit and every rejected-update class.
// Tests wait on conditions (status polling with deadlines), never on sleeps.
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include <caf/all.hpp>
#include <doctest/doctest.h>

#include "../training/test_corpus.hpp"
#include "run/cluster.hpp"
#include "actors/authorization.hpp"
#include "actors/directory.hpp"
#include "actors/wire.hpp"
#include "cluster_queries.hpp"
#include "test_support.hpp"
#include "training/reference_engine.hpp"
#include "training/replica.hpp"

using namespace archipelago;
using namespace archipelago::actors;
using namespace archipelago::run;
using nlohmann::json;
using namespace archipelago::actors::testing;


TEST_CASE("sync mode reproduces the reference engine's held-out loss") {
  auto options = testing::tiny_options("sync", "sync", 2, 0);
  auto& s = options.setup;
  s.run.inner_steps = 5;
  s.run.max_tokens = int64_t{2} * 8 * 64 * 5 * 4;  // M · B · T · H · 4 rounds
  training::set_compute_threads(1);                 // same summation order in both engines
  auto reference = training::run_reference(s, training::testing::kjv());
  REQUIRE_MESSAGE(reference.ok(), (reference.ok() ? "" : reference.error().to_string()));
  REQUIRE(reference->rounds == 4);

  options.setup.run.max_seconds = 120;  // a backstop only: the token budget ends the run
  auto cluster = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(cluster.ok(), (cluster.ok() ? "" : cluster.error().to_string()));
  auto result = (*cluster)->run();
  REQUIRE_MESSAGE(result.ok(), (result.ok() ? "" : result.error().to_string()));
  CHECK(result->tokens == reference->tokens);
  CHECK(result->initial_heldout_loss == doctest::Approx(reference->initial_heldout_loss).epsilon(1e-6));
  CHECK(result->heldout_loss == doctest::Approx(reference->heldout_loss).epsilon(1e-5));
  CHECK(result->heldout_loss < result->initial_heldout_loss);
  CHECK(result->versions_committed >= 4);
  CHECK(result->rejected_updates == 0);
  // Honest learners' claims are what the syncer credits (diloco/merge_rules.hpp, credit_work), so the
  // merge weights are the reference engine's exactly.
  CHECK(result->details["syncer"]["claims_corrected"] == 0);
  CHECK(result->restarts == 0);
  CHECK(result->goodput.goodput() > 0.3);
  CHECK(result->goodput.goodput() <= 1.0);
}

TEST_CASE("a decoupled run without faults has goodput of at least 0.95 by the ledger") {
  auto options = testing::tiny_options("no-faults", "decoupled", 2, 30);
  // tiny steps take ~20 ms: a learner checkpoint every 2 steps (the test default) would be ~5 % of
  // the slot time in `overhead` by itself; every 25 steps is every ~0.5 s, as in a real run.
  options.learner_checkpoint_every = 25;
  auto cluster = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(cluster.ok(), (cluster.ok() ? "" : cluster.error().to_string()));
  std::vector<ProgressSample> rows;
  auto result = (*cluster)->run([&](const ProgressSample& p) { rows.push_back(p); });
  REQUIRE_MESSAGE(result.ok(), (result.ok() ? "" : result.error().to_string()));
  const auto& ledger = result->goodput;
  CAPTURE(to_json(ledger).dump());
  CHECK(result->restarts == 0);
  CHECK(result->rejected_updates == 0);
  CHECK(result->details["syncer"]["claims_corrected"] == 0);  // no honest claim exceeds the schedule's bound
  CHECK(result->details["syncer"]["screening"]["clipped"] == 0);  // no honest update is clipped as an outlier
  // ... though a learner's first update of a fragment may be held to the median, once (2 learners x 2 fragments).
  CHECK(result->details["syncer"]["screening"]["probation_clipped"] <= 2 * 2);
  CHECK(result->details["syncer"]["screening"]["refused"] == 0);
  CHECK(result->details["syncer"]["screening"]["mode"] == "refuse");
  // Every part measured; the learners computed almost all the time and every update was merged.
  CHECK(ledger.goodput() >= 0.95);
  CHECK(ledger.seconds.restarting == 0);
  CHECK(ledger.seconds.rejected == 0);
  // What no clock saw is one part, and a small one in a clean run: it grows with every time that
  // goes unmeasured (it is allocated − the measured parts, so the parts add up by definition).
  CHECK(ledger.unaccounted_share() < 0.01);
  CHECK(ledger.unaccounted_share() > -0.01);
  CHECK(ledger.seconds.sum() == doctest::Approx(ledger.allocated_s).epsilon(1e-9));
  // After the drain nothing is in flight, and no learner left work behind.
  CHECK(std::abs(ledger.seconds.in_flight) < 1e-6 * ledger.allocated_s);
  CHECK(ledger.seconds.lost < 0.01 * ledger.allocated_s);
  // The compute's parts are the compute the learners measured, each learner's counters agreeing
  // with what the syncer merged.
  double compute_s = 0;
  for (const auto& [id, slot] : result->details["monitor"]["slots"].items()) compute_s += slot["times"]["compute_s"].get<double>();
  const auto& s = ledger.seconds;
  CHECK(s.merged + s.rejected + s.in_flight + s.lost == doctest::Approx(compute_s).epsilon(1e-6));
  // The table ends where the summary ends: its last row is taken after the drain and the final
  // evaluation, from the final ledger.
  REQUIRE(rows.size() >= 3);
  CHECK(rows.back().goodput == doctest::Approx(ledger.goodput()).epsilon(1e-12));
  CHECK(rows.back().heldout_loss == result->heldout_loss);
  CHECK(rows.back().version == result->final_version);
  // Live goodput: the last row taken while the run went on (from the same ledger) reads within
  // 0.05 of the summary's, merged alone and merged plus in flight.
  const auto& last_row = rows[rows.size() - 2];
  CAPTURE(last_row.elapsed_s);
  CAPTURE(last_row.in_flight);
  CHECK(last_row.version > result->start_version);  // the first round had merged
  CHECK(std::abs(last_row.goodput - ledger.goodput()) < 0.05);
  CHECK(std::abs(last_row.goodput + last_row.in_flight - ledger.goodput()) < 0.05);
  // In flight: the learners' unsent work and updates sent, not merged yet. The syncer's and the
  // monitor's replies are two moments (the syncer's first): at most a heartbeat's work apart.
  CHECK(last_row.in_flight > -0.005);
  CHECK(last_row.in_flight < 0.05);
}

TEST_CASE("progress rows show the learners' train loss before any update is merged") {
  // H far beyond the budget: nothing is merged until the drain, so a train loss can only come from
  // the learners' heartbeats.
  auto options = testing::tiny_options("train-loss-rows", "decoupled", 2, 4);
  options.setup.run.inner_steps = 100000;
  auto cluster = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(cluster.ok(), (cluster.ok() ? "" : cluster.error().to_string()));
  std::vector<ProgressSample> rows;
  auto result = (*cluster)->run([&](const ProgressSample& p) { rows.push_back(p); });
  REQUIRE_MESSAGE(result.ok(), (result.ok() ? "" : result.error().to_string()));
  double first_step_s = -1;
  int checked = 0;
  for (const auto& row : rows) {
    if (first_step_s < 0 && row.tokens > 0) first_step_s = row.elapsed_s;
    if (first_step_s < 0 || row.elapsed_s < first_step_s + 1.0 || row.version != result->start_version) continue;
    CAPTURE(row.elapsed_s);
    CHECK(std::isfinite(row.train_loss));
    CHECK(row.train_loss > 0);
    CHECK(row.train_loss < result->initial_heldout_loss + 0.5);
    checked += 1;
  }
  CHECK(checked >= 2);
}

TEST_CASE("a killed learner is restarted, rejoins at the latest committed version and is merged again") {
  auto options = testing::tiny_options("kill-learner", "decoupled", 3, 25);
  options.restart.backoff_initial_s = 0.5;  // a visible absence: the others must keep stepping
  // A corrupt checkpoint left for learner 2 is refused with its reason; it starts from the global model.
  std::filesystem::create_directories(options.run_dir + "/learners");
  std::ofstream(options.run_dir + "/learners/" + learner_id(2) + ".ckpt") << "not a checkpoint, 40 bytes long......";
  auto started = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().to_string()));
  auto& cluster = **started;
  const std::string victim = learner_id(1);

  REQUIRE(cluster.wait_for([&] { return merged(cluster, victim) >= 2; }, 20));
  const int64_t merged_before = merged(cluster, victim);
  const uint64_t committed_at_kill = status(cluster, syncer_name()).value("version", uint64_t{0});
  const int64_t others_before = monitor_step(cluster, learner_id(0)) + monitor_step(cluster, learner_id(2));
  REQUIRE(cluster.kill(learner_name(1)));

  // Restarted by its supervisor and joined again (a second Join).
  REQUIRE(cluster.wait_for([&] { return learner_record(cluster, victim).value("joins", 0) >= 2; }, 15));
  const int64_t others_at_rejoin = monitor_step(cluster, learner_id(0)) + monitor_step(cluster, learner_id(2));
  CHECK(others_at_rejoin > others_before);  // nobody waited for it
  CHECK(learner_record(cluster, victim).value("joined_version", uint64_t{0}) >= committed_at_kill);
  auto supervisor = status(cluster, learner_supervisor_name());
  CHECK(supervisor["children"][victim]["restarts"].get<int>() == 1);
  CHECK(supervisor["children"][victim]["incarnation"].get<int>() == 1);
  // Its new incarnation's work is merged again.
  const int64_t merged_at_rejoin = merged(cluster, victim);
  CHECK(merged_at_rejoin >= merged_before);
  CHECK(cluster.wait_for([&] {
    auto record = learner_record(cluster, victim);
    return record.value("first_merge_after_join_s", -1.0) > 0 &&
           record.value("contributions_merged", int64_t{0}) > merged_at_rejoin;
  }, 15));
  auto learner = cluster.query(learner_name(1));
  REQUIRE_MESSAGE(learner.ok(), (learner.ok() ? "" : learner.error().to_string()));
  CHECK((*learner)["incarnation"].get<int>() == 1);
  CHECK((*learner)["welcome_version"].get<uint64_t>() >= committed_at_kill);
  // It continued from its own checkpoint: unsent steps and AdamW state came back.
  CHECK((*learner)["restored_from_step"].get<int64_t>() > 0);
  CHECK((*learner)["restored_steps"].get<int64_t>() >= 1);
  CHECK((*learner)["checkpoint_error"].get<std::string>().empty());
  const double second_recovery_s = (*learner)["recovery_s"].get<double>();  // this incarnation's, closed at its first step
  CHECK(second_recovery_s > 0);
  // Its thread runs runtime.learner_nice (5) nicer than this one, as the kernel reports it.
  errno = 0;
  const int base_nice = getpriority(PRIO_PROCESS, 0);
  REQUIRE(errno == 0);
  CHECK((*learner)["thread_nice"].get<int>() == std::min(19, base_nice + options.learner_nice));
  auto other = cluster.query(learner_name(2));
  REQUIRE(other.ok());
  CHECK((*other)["restored_from_step"].get<int64_t>() == -1);
  CHECK((*other)["checkpoint_error"].get<std::string>().find("checksum") != std::string::npos);
  CHECK((*other)["checkpoints_written"].get<int64_t>() > 0);
  CHECK((*other)["thread_nice"].get<int>() == std::min(19, base_nice + options.learner_nice));

  auto result = cluster.run();
  REQUIRE(result.ok());
  CHECK(result->restarts == 1);
  CHECK(result->heldout_loss < result->initial_heldout_loss);
  // The ledger: the victim's slot was held down for the 0.5 s backoff at least, so goodput is at most
  // 1 - 0.5 / (wall · slots); the parts add up to the allocated time, each measured on its own.
  const auto& ledger = result->goodput;
  CHECK(ledger.slots[1].restarting >= 0.5);
  CHECK(ledger.slots[0].restarting == 0);
  CHECK(ledger.goodput() <= 1 - 0.5 / ledger.allocated_s);
  CHECK(ledger.goodput() > 0.2);
  // The kill's unseen time (its learner after its last heartbeat) is unaccounted: a small part.
  CAPTURE(to_json(ledger).dump());
  CHECK(ledger.unaccounted_share() < 0.03);
  CHECK(ledger.unaccounted_share() > -0.01);
  for (const auto& slot : ledger.slots) {
    CHECK(slot.merged > 0);
    CHECK(slot.overhead > 0);
    CHECK(slot.idle >= 0);  // measured by its supervisor: after it finished
  }
  // It started twice: its slot's recovering holds both incarnations' start-ups, more than the second's.
  CHECK(ledger.slots[1].recovering > second_recovery_s);
  const auto events = result->details["events"];
  bool death = false, rejoin = false;
  for (const auto& e : events) {
    death |= e["kind"] == "death" && e["subject"] == victim;
    rejoin |= e["kind"] == "rejoin" && e["subject"] == victim;
  }
  CHECK_MESSAGE(death, events.dump());
  CHECK_MESSAGE(rejoin, events.dump());
}

TEST_CASE("a killed syncer is restarted from RocksDB without losing or changing committed versions") {
  auto options = testing::tiny_options("kill-syncer", "decoupled", 2, 20);
  auto started = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().to_string()));
  auto& cluster = **started;
  REQUIRE(cluster.wait_for([&] { return status(cluster, syncer_name()).value("version", 0) >= 6; }, 20));
  const auto before = version_digests(cluster);
  const uint64_t version_before = status(cluster, syncer_name()).value("version", uint64_t{0});
  REQUIRE(before.size() >= 6);
  // θ0 went once version 1 was durable: the restarted syncer restores without it.
  CHECK(status(cluster, syncer_name()).value("initial_parameters", "") == "released");
  REQUIRE(cluster.kill(syncer_name()));

  // The root supervisor restarts it; it resumes from the latest committed version (no regression).
  REQUIRE(cluster.wait_for([&] {
    auto root = status(cluster, caf::atom("root"));
    auto s = status(cluster, syncer_name());
    return root.value("restarts", 0) >= 1 && s.value("phase", "") == "ready";
  }, 15));
  CHECK(status(cluster, syncer_name()).value("version", uint64_t{0}) >= version_before);
  // Learners rejoin and new versions are committed on top.
  REQUIRE(cluster.wait_for([&] { return status(cluster, syncer_name()).value("version", uint64_t{0}) >= version_before + 3; }, 15));
  const auto after = version_digests(cluster);
  for (const auto& [version, digest] : before) {
    CAPTURE(version);
    REQUIRE(after.count(version) == 1);
    CHECK(after.at(version) == digest);
  }
  uint64_t previous = 0;
  for (const auto& [version, _] : after) {
    CHECK(version > previous);
    previous = version;
  }
  auto result = cluster.run();
  REQUIRE(result.ok());
  CHECK(result->infrastructure_restarts == 1);
  CHECK(result->final_version >= version_before + 3);
  CHECK(result->restarts == 0);
}

TEST_CASE("a learner that crashes on every start is given up after R restarts and the run goes on") {
  auto options = testing::tiny_options("intensity", "decoupled", 2, 0);
  options.setup.run.max_tokens = int64_t{2} * 8 * 64 * 60;
  options.setup.run.max_seconds = 60;
  options.faults.crash_learner_on_start = 1;
  options.restart.max_restarts = 3;
  options.restart.window_s = 30;
  auto started = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().to_string()));
  auto result = (*started)->run();
  REQUIRE(result.ok());
  CHECK(result->restarts == 3);
  auto children = result->details["learner_supervisor"]["children"];
  CHECK(children[learner_id(1)]["state"] == "failed");
  CHECK(children[learner_id(0)]["state"] == "finished");
  CHECK(result->versions_committed > 0);
  CHECK(result->heldout_loss < result->initial_heldout_loss);
  // One slot of two had no learner nearly all the run: the ledger says so, and its parts add up.
  // (restarting: its backoffs; idle: after it was given up — a short run is mostly backoff)
  CHECK(result->goodput.slots[1].idle + result->goodput.slots[1].restarting > 0.9 * result->goodput.allocated_s / 2);
  CHECK(result->goodput.slots[1].idle > 0);
  CHECK(result->goodput.slots[1].merged == 0);
  CAPTURE(to_json(result->goodput).dump());
  CHECK(result->goodput.unaccounted_share() < 0.03);
}

TEST_CASE("async mode: a straggler runs fewer inner steps per period (dynamic local steps)") {
  auto options = testing::tiny_options("async-dylu", "async", 2, 25);
  options.setup.run.inner_steps = 12;
  options.faults.slowdowns = {{1, 4.0}};  // learner 1's steps take 4 times as long
  auto started = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().to_string()));
  auto& cluster = **started;
  auto learner = [&](int index) {
    auto answer = cluster.query(learner_name(index));
    return answer ? *answer : nlohmann::json::object();
  };
  auto periods = [&](const nlohmann::json& l) { return l.value("periods", std::vector<int>{}); };
  auto reported_rate = [](const nlohmann::json& syncer, int index) {
    const auto rate = syncer.value("learners", nlohmann::json::object()).value(learner_id(index), nlohmann::json::object()).value("tokens_per_s", nlohmann::json());
    return rate.is_number() ? rate.get<double>() : 0.0;
  };
  // A period is 0 until the learner holds its fragment, H until it has sent an update knowing the
  // fastest rate. Wait for the event itself: the syncer reported the fastest rate to the straggler,
  // which then set every period (all > 0) to about H / 4 (at most H / 2 allows for noise), and the
  // syncer knows both learners' rates.
  nlohmann::json syncer;
  REQUIRE(cluster.wait_for([&] {
    const auto slow = learner(1);
    const auto slow_periods = periods(slow);
    if (slow.value("fastest_tokens_per_s", 0.0) <= 0 || slow_periods.empty()) return false;
    if (*std::min_element(slow_periods.begin(), slow_periods.end()) <= 0) return false;
    if (*std::max_element(slow_periods.begin(), slow_periods.end()) > 6) return false;
    syncer = status(cluster, syncer_name());
    return reported_rate(syncer, 0) > 0 && reported_rate(syncer, 1) > 0;
  }, 30));
  const auto fast_periods = periods(learner(0));
  REQUIRE(!fast_periods.empty());
  for (int period : fast_periods) CHECK(period >= 10);
  const double fast = reported_rate(syncer, 0);
  const double slow = reported_rate(syncer, 1);
  CHECK(fast > 2 * slow);
  CHECK(slow > 0);
  auto result = cluster.run();
  REQUIRE(result.ok());
  CHECK(result->heldout_loss < result->initial_heldout_loss);
  // The straggler's sleep is its own part, not compute: about 3 s throttled per 1 s computed, and
  // its merged work carries only the compute.
  const auto& ledger = result->goodput;
  CAPTURE(to_json(ledger).dump());
  const auto& straggler = ledger.slots[1];
  const double straggler_compute = straggler.merged + straggler.rejected + straggler.in_flight + straggler.lost;
  CHECK(ledger.slots[0].throttled == 0);
  CHECK(straggler.throttled > 2 * straggler_compute);
  CHECK(straggler.throttled < 4 * straggler_compute);
  CHECK(ledger.unaccounted_share() < 0.01);
}

TEST_CASE("slow is not dead: a learner whose inner steps outlast the silence timeout is never declared dead") {
  // Its heartbeats come from its pulse (actors/learner_pulse.hpp), not from between its steps: a
  // learner throttled to 100x its step time, so that one step takes longer than the monitor waits
  // for a heartbeat, keeps beating, is never declared dead nor restarted, and its steps go on.
  auto options = testing::tiny_options("slow-not-dead", "decoupled", 1, 40);
  options.setup.inner.batch_size = 16;
  options.detector.min_timeout_s = 1.0;  // the pulse beats every 0.1 s: the timeout is this floor
  auto started = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().to_string()));
  auto& cluster = **started;
  auto watched = [&] {
    auto s = status(cluster, monitor_name());
    return s.value("learners", json::object()).value(learner_id(0), json::object());
  };
  REQUIRE(cluster.wait_for([&] { return watched().value("step", 0) >= 5; }, 30));
  auto learner = Directory::get(cluster.system(), learner_name(0));
  REQUIRE(learner);
  caf::anon_send(learner, throttle_atom::value, process_key(), 100.0);
  // The step under way when the throttle arrived is not throttled; count the two after it.
  int64_t from = 0;
  REQUIRE(cluster.wait_for([&] { return (from = watched().value("step", int64_t{0})) > 5; }, 30));
  REQUIRE(cluster.wait_for([&] { return watched().value("step", int64_t{0}) > from; }, 30));
  const double started_s = cluster.elapsed_s();
  from = watched().value("step", int64_t{0});
  int64_t deaths = 0;
  REQUIRE(cluster.wait_for([&] {
    auto l = watched();
    deaths = std::max(deaths, l.value("deaths", int64_t{0}));
    return l.value("step", int64_t{0}) >= from + 2;
  }, 60));
  const double per_step_s = (cluster.elapsed_s() - started_s) / 2;
  const auto seen = watched();
  CAPTURE(seen.dump());
  CAPTURE(per_step_s);
  // The case at hand: each throttled step outlasted the silence after which a learner is dead.
  REQUIRE(per_step_s > seen.value("timeout_s", 0.0));
  CHECK(deaths == 0);
  CHECK(seen.value("state", "") != "dead");
  CHECK(seen.value("incarnation", -1) == 0);
  caf::anon_send(learner, throttle_atom::value, process_key(), 1.0);
  auto result = cluster.run();
  REQUIRE(result.ok());
  CHECK(result->restarts == 0);
  CHECK(result->details["monitor"]["learners"][learner_id(0)].value("deaths", -1) == 0);
}

TEST_CASE("every class of bad update is rejected and counted, and the run completes") {
  auto options = testing::tiny_options("rejects", "decoupled", 1, 15);
  options.setup.outer.fragments = 1;
  options.syncer.max_staleness = 2;
  auto started = LocalCluster::start(options, training::testing::kjv());
  REQUIRE_MESSAGE(started.ok(), (started.ok() ? "" : started.error().to_string()));
  auto& cluster = **started;
  REQUIRE(cluster.wait_for([&] { return status(cluster, syncer_name()).value("version", 0) >= 6; }, 20));
  const int64_t numel = cluster.parameter_count();
  const uint64_t latest = status(cluster, syncer_name()).value("version", uint64_t{0});

  caf::scoped_actor intruder{cluster.system()};
  auto syncer = Directory::get(cluster.system(), syncer_name());
  REQUIRE(syncer);
  Outbox outbox("learner-7");
  auto send = [&](messages::Message body) {
    auto bytes = outbox.wrap(std::move(body));
    REQUIRE(bytes.ok());
    intruder->send(syncer, *bytes);
    return *bytes;
  };
  auto update = [&](uint64_t base, std::vector<float> values, messages::Codec codec = messages::Codec::fp32) {
    messages::FragmentUpdate u{"learner-7", 0, base, 1, 1, 1.0f, {}};
    std::vector<uint8_t> encoded(values.size() * 4);
    std::memcpy(encoded.data(), values.data(), encoded.size());
    u.chunk.codec = codec;
    u.chunk.element_count = values.size();
    u.chunk.total_bytes = encoded.size();
    u.chunk.checksum = messages::chunk_checksum(encoded.data(), encoded.size());
    auto owned = std::make_shared<std::vector<uint8_t>>(std::move(encoded));
    u.chunk.payload = {owned->data(), owned->size(), owned};
    return u;
  };
  // Join as learner-7 (and once with a wrong token).
  send(messages::Join{"learner-7", "n", "s", "cpu", 0, "not-the-token"});
  send(messages::Join{"learner-7", "n", "s", "cpu", 0, options.syncer.auth_token});
  std::vector<float> zeros(numel, 0.0f);
  auto valid = send(update(latest, zeros));                        // accepted
  intruder->send(syncer, valid);                                   // replayed: duplicate
  send(update(1, zeros));                                          // base 1, several commits behind: stale
  send(update(latest, std::vector<float>(numel + 1, 0.0f)));       // wrong shape
  auto poisoned = zeros;
  poisoned[numel / 2] = std::numeric_limits<float>::quiet_NaN();
  send(update(latest, poisoned));                                  // NaN
  messages::FragmentUpdate ghost = update(latest, zeros);
  ghost.learner_id = "ghost";
  Outbox ghost_box("ghost");
  auto ghost_bytes = ghost_box.wrap(ghost);
  REQUIRE(ghost_bytes.ok());
  intruder->send(syncer, *ghost_bytes);                            // unknown learner
  WireBytes garbage(64, '\x5a');
  intruder->send(syncer, garbage);                                 // malformed

  std::map<std::string, int64_t> expected{{"duplicate", 1}, {"stale", 1}, {"wrong_shape", 1}, {"non_finite", 1},
                                          {"unknown_learner", 1}, {"malformed", 1}, {"unauthenticated", 1}};
  json rejected;
  const bool counted = cluster.wait_for([&] {
    rejected = status(cluster, syncer_name()).value("rejected", json::object());
    for (const auto& [reason, n] : expected) {
      if (rejected.value(reason, int64_t{0}) < n) return false;
    }
    return true;
  }, 10);
  CAPTURE(rejected.dump());
  CHECK(counted);
  for (const auto& [reason, n] : expected) {
    CAPTURE(reason);
    CHECK(rejected.value(reason, int64_t{0}) == n);
  }
  send(messages::Leave{"learner-7", "finished"});

  auto result = cluster.run();
  REQUIRE(result.ok());
  CHECK(result->rejected_updates == 7);
  CHECK(result->details["learner_supervisor"]["children"][learner_id(0)]["state"] == "finished");
  CHECK(result->heldout_loss < result->initial_heldout_loss);
  CHECK(std::isfinite(result->heldout_loss));
}

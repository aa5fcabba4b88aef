// The goodput simulator against what is known without it: no interruptions, closed forms for one
// group under exponential interruptions, a drill's deterministic schedule, and the published shape.
#include "sim/simulator.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

using namespace archipelago::sim;

namespace {

SimConfig quiet(double chips) {
  SimConfig c;
  c.chips = chips;
  c.mtbi_hours = std::numeric_limits<double>::infinity();
  c.work_s = 500;
  c.runs = 3;
  return c;
}

// Expected wall time to commit c seconds of compute when interruptions arrive at rate lambda while
// computing and each costs a fixed pause r plus the work since the last commit:
// (1/lambda + r)(e^(lambda c) - 1); goodput = c / that.
double closed_form_goodput(double lambda, double r, double c) { return c / ((1 / lambda + r) * std::expm1(lambda * c)); }

}  // namespace

TEST_CASE("without interruptions every strategy keeps all the work") {
  SimConfig c = quiet(1000);
  for (Strategy s : {Strategy::ddp, Strategy::elastic_ddp, Strategy::decoupled}) {
    const SimResult r = simulate(c, s);
    CHECK(r.goodput == doctest::Approx(1.0).epsilon(1e-9));
    CHECK(r.interruptions == 0);
    CHECK(r.wall_s == doctest::Approx(500).epsilon(1e-9));
  }
}

TEST_CASE("checkpoint pauses and stragglers cost exactly their share") {
  SimConfig c = quiet(64);
  c.checkpoint_interval_s = 9;
  c.checkpoint_save_s = 1;
  c.work_s = 900;  // 100 checkpoints; the last one's pause ends the run... or not: the job ends at 900 s of compute
  const SimResult ddp = simulate(c, Strategy::ddp);
  // 99 pauses happen before the 900th second of compute ends the job (the 100th would follow it).
  CHECK(ddp.goodput == doctest::Approx(900.0 / 999.0).epsilon(1e-9));
  CHECK(simulate(c, Strategy::elastic_ddp).goodput == doctest::Approx(1.0).epsilon(1e-9));

  c = quiet(1024);
  c.straggler_cv = 0.05;
  c.learners = 16;
  const double whole = 1 + 0.05 * expected_max_normal(1024), learner = 1 + 0.05 * expected_max_normal(64);
  CHECK(simulate(c, Strategy::ddp).goodput == doctest::Approx(1 / whole).epsilon(1e-9));
  CHECK(simulate(c, Strategy::decoupled).goodput == doctest::Approx(1 / learner).epsilon(1e-9));
}

TEST_CASE("expected maximum of standard normals") {
  CHECK(expected_max_normal(1) == 0);
  CHECK(expected_max_normal(2) == doctest::Approx(1 / std::sqrt(M_PI)).epsilon(1e-4));
  CHECK(expected_max_normal(3) == doctest::Approx(1.5 / std::sqrt(M_PI)).epsilon(1e-4));
  CHECK(expected_max_normal(1e6) == doctest::Approx(4.857).epsilon(2e-3));  // tables of normal extremes
}

TEST_CASE("one group under exponential interruptions matches the closed form within 1.5%") {
  // Long jobs, many runs: the Monte Carlo error is a few tenths of a percent.
  SimConfig c;
  c.chips = 1;
  c.learner_mtbf_s = 100;
  c.work_s = 20000;
  c.runs = 40;
  SUBCASE("ddp: restart and the work since the last checkpoint") {
    c.restart_s = 30;
    c.checkpoint_interval_s = 20;
    CHECK(simulate(c, Strategy::ddp).goodput == doctest::Approx(closed_form_goodput(0.01, 30, 20)).epsilon(0.015));
  }
  SUBCASE("elastic_ddp: rescale and the step in flight") {
    c.rescale_s = 10;
    c.step_time_s = 5;
    CHECK(simulate(c, Strategy::elastic_ddp).goodput == doctest::Approx(closed_form_goodput(0.01, 10, 5)).epsilon(0.015));
  }
  SUBCASE("decoupled, one fragment: learner restart and the H steps since its last sync") {
    c.chips = 4;
    c.learners = 4;  // independent learners with quorum 1: each one behaves like the single group
    c.learner_restart_s = 10;
    c.step_time_s = 2;
    c.inner_steps = 10;
    c.fragments = 1;
    c.work_s = 5000;
    CHECK(simulate(c, Strategy::decoupled).goodput == doctest::Approx(closed_form_goodput(0.01, 10, 20)).epsilon(0.015));
  }
}

TEST_CASE("a learner that checkpoints its unsent work loses only the step in flight") {
  SimConfig c;
  c.chips = 8;
  c.learners = 8;
  c.learner_mtbf_s = 200;
  c.learner_restart_s = 5;
  c.inner_steps = 24;
  c.work_s = 20000;
  c.runs = 20;
  c.fragments = 24;
  const double staggered = simulate(c, Strategy::decoupled).goodput;
  // Each fragment's unsent steps at a random moment average about H / 2.
  CHECK(staggered == doctest::Approx(closed_form_goodput(1.0 / 200, 5, 24)).epsilon(0.02));
  c.learner_checkpoint_steps = 1;  // unsent work checkpointed every step: only the step in flight is lost
  const double checkpointed = simulate(c, Strategy::decoupled).goodput;
  CHECK(checkpointed > staggered + 0.01);
  CHECK(checkpointed == doctest::Approx(closed_form_goodput(1.0 / 200, 5, 1)).epsilon(0.015));
}

TEST_CASE("a drill's periodic kills: 4 learners, a kill every 20 s, 2 s restarts, 150 s") {
  SimConfig c;
  c.chips = 4;
  c.learners = 4;
  c.mtbi_hours = std::numeric_limits<double>::infinity();
  c.kill_every_s = 20;
  c.learner_restart_s = 2;
  c.restart_s = 2;
  c.rescale_s = 2;
  c.step_time_s = 0.5;
  c.inner_steps = 10;
  c.fragments = 2;
  c.learner_checkpoint_steps = 1;
  c.wall_s = 150;
  c.runs = 4;
  // Kills at 20, 40, ..., 140 s land on step boundaries, so only the restarts cost anything:
  // decoupled loses 7 x 2 s of one learner in 4 x 150 learner-seconds; ddp stops everything.
  const SimResult decoupled = simulate(c, Strategy::decoupled);
  CHECK(decoupled.interruptions == 7);
  CHECK(decoupled.uptime == doctest::Approx(1.0));                  // three learners always compute
  CHECK(simulate(c, Strategy::ddp).uptime == doctest::Approx(1 - 14.0 / 150));
  CHECK(decoupled.goodput == doctest::Approx(1 - 14.0 / 600).epsilon(1e-9));
  CHECK(simulate(c, Strategy::ddp).goodput == doctest::Approx(1 - 14.0 / 150).epsilon(1e-9));
  // Without its checkpoints of unsent work a learner also loses the steps since each fragment's sync.
  c.learner_checkpoint_steps = 0;
  CHECK(simulate(c, Strategy::decoupled).goodput < decoupled.goodput - 0.005);
  // Quorum 4: while a learner restarts nothing commits, and a second kill in that window would lose
  // sent work; kills 20 s apart with 2 s restarts never overlap, so quorum changes nothing here.
  c.learner_checkpoint_steps = 1;
  c.quorum = 4;
  CHECK(simulate(c, Strategy::decoupled).goodput == doctest::Approx(decoupled.goodput).epsilon(1e-9));
}

TEST_CASE("a drill's counted faults: node faults fail a node's learners together, outages stop all") {
  SimConfig c;
  c.chips = 6;
  c.learners = 6;
  c.learners_per_node = 3;
  c.mtbi_hours = std::numeric_limits<double>::infinity();
  c.learner_checkpoint_steps = 1;
  c.step_time_s = 1e-3;  // a failed learner loses at most the step in flight
  c.wall_s = 200;
  c.runs = 50;
  c.fault_free_efficiency = 0.8;
  const SimResult quiet_run = simulate(c, Strategy::decoupled);
  CHECK(quiet_run.goodput == doctest::Approx(0.8).epsilon(1e-9));
  CHECK(quiet_run.overhead_share == doctest::Approx(0.2).epsilon(1e-9));

  c.node_faults = 2;
  c.node_restart_s = 10;
  const SimResult nodes = simulate(c, Strategy::decoupled);
  CHECK(nodes.interruptions == 6);  // 2 nodes x 3 learners
  CHECK(nodes.node_down_share == doctest::Approx(2 * 3 * 10 / (6 * 200.0)).epsilon(1e-9));
  CHECK(nodes.goodput == doctest::Approx(0.8 * (1 - nodes.node_down_share)).epsilon(1e-4));

  c.node_faults = 0;
  c.coordinator_faults = 1;
  c.coordinator_restart_s = 20;
  const SimResult outage = simulate(c, Strategy::decoupled);
  CHECK(outage.interruptions == 0);
  CHECK(outage.coordinator_down_share == doctest::Approx(0.1).epsilon(1e-9));
  CHECK(outage.uptime == doctest::Approx(0.9).epsilon(1e-9));
  CHECK(outage.goodput == doctest::Approx(0.8 * 0.9).epsilon(1e-9));

  c.coordinator_faults = 0;
  c.node_stalls = 1;
  c.node_stall_s = 20;
  const SimResult stall = simulate(c, Strategy::decoupled);
  CHECK(stall.interruptions == 0);
  CHECK(stall.stall_share == doctest::Approx(3 * 20 / 1200.0).epsilon(1e-9));
  CHECK(stall.goodput == doctest::Approx(0.8 * (1 - 0.05)).epsilon(1e-9));
}

TEST_CASE("quorum: a learner that fails while the syncer has no quorum loses what it sent") {
  SimConfig c;
  c.chips = 2;
  c.learners = 2;
  c.learner_mtbf_s = 50;
  c.learner_restart_s = 40;
  c.learner_checkpoint_steps = 1;
  c.work_s = 20000;
  c.runs = 10;
  c.quorum = 1;
  const double one = simulate(c, Strategy::decoupled).goodput;
  c.quorum = 2;
  CHECK(simulate(c, Strategy::decoupled).goodput < one - 0.02);
}

TEST_CASE("the published shape: 5B model, 1T tokens, MTBI 1 year per chip") {
  // Reported (ALGORITHMS.md section 7): at 1.2M chips M=8 88%, elastic data-parallel 58%, M=16 93%,
  // M=2 70%, non-elastic data-parallel ~27%; at 2.4M chips 18% / 40% / M=8 80% / M=16 86%.
  // Defaults as documented in bench/sim/README.md ("Against the published shape").
  //
  // One tolerance for every cell: the simulated goodput within 0.03 (absolute) of the published one.
  // Three cells miss it, and bench/sim/README.md ("Where it does not match") says why; for those the
  // test pins the simulated value that README states (within 0.01), so that a change to the model
  // that moves them fails here until the README says what it does now.
  constexpr double kTolerance = 0.03;
  struct Cell {
    double chips;
    Strategy strategy;
    int learners;          // decoupled only
    double published;
    double known_gap_sim;  // > 0: a documented miss, at this simulated value
  };
  const Cell cells[] = {
      {1.2e6, Strategy::ddp, 0, 0.27, 0.319},        // non-elastic ddp: 32 %, not ~27 %
      {1.2e6, Strategy::elastic_ddp, 0, 0.58, 0},
      {1.2e6, Strategy::decoupled, 2, 0.70, 0.597},  // M = 2: 10 points low
      {1.2e6, Strategy::decoupled, 8, 0.88, 0},
      {1.2e6, Strategy::decoupled, 16, 0.93, 0},
      {2.4e6, Strategy::ddp, 0, 0.18, 0},
      {2.4e6, Strategy::elastic_ddp, 0, 0.40, 0},
      {2.4e6, Strategy::decoupled, 8, 0.80, 0.768},  // 0.77 against a low-confidence 0.80
      {2.4e6, Strategy::decoupled, 16, 0.86, 0},
  };
  for (const auto& cell : cells) {
    SimConfig c;  // the defaults are the assumptions
    c.chips = cell.chips;
    if (cell.strategy == Strategy::decoupled) c.learners = cell.learners;
    const double goodput = simulate(c, cell.strategy).goodput;
    CAPTURE(cell.chips);
    CAPTURE(strategy_name(cell.strategy));
    CAPTURE(cell.learners);
    CAPTURE(goodput);
    if (cell.known_gap_sim > 0) {
      CHECK(std::fabs(goodput - cell.published) > kTolerance);   // still a miss, as documented
      CHECK(std::fabs(goodput - cell.known_gap_sim) <= 0.01);     // at the value the README states
    } else {
      CHECK(std::fabs(goodput - cell.published) <= kTolerance);
    }
  }
  // Uptime (some learner computing, quorum 1) is reported as 100% for M >= 4 up to 2.4M chips.
  SimConfig c;
  c.chips = 2.4e6;
  c.learners = 4;
  CHECK(simulate(c, Strategy::decoupled).uptime > 0.99);
  c.learners = 8;
  CHECK(simulate(c, Strategy::decoupled).uptime > 0.999);
  c.learners = 2;
  CHECK(simulate(c, Strategy::decoupled).uptime < 0.9);
}

TEST_CASE("a job that can barely progress stops after a bounded number of events") {
  SimConfig c;
  c.chips = 1;
  c.learner_mtbf_s = 1;
  c.restart_s = 0.1;
  c.checkpoint_interval_s = 60;  // e^60 attempts to commit one checkpoint
  c.work_s = 120;
  c.runs = 1;
  const SimResult r = simulate(c, Strategy::ddp);
  CHECK(r.truncated_runs == 1);
  CHECK(r.goodput < 1e-6);
  CHECK(r.interruptions > 1e5);
}

TEST_CASE("invalid configurations are refused with a reason") {
  SimConfig c;
  CHECK(validate(c).empty());
  c.learners = 0;
  CHECK(validate(c).find("learners") != std::string::npos);
  c = SimConfig{};
  c.quorum = 9;
  CHECK(validate(c).find("quorum") != std::string::npos);
  c = SimConfig{};
  c.chips = 4;
  c.learners = 8;
  CHECK(validate(c).find("chips") != std::string::npos);
  c = SimConfig{};
  c.step_time_s = 0;
  CHECK(validate(c).find("step_time_s") != std::string::npos);
  c = SimConfig{};
  c.node_faults = 1;  // a count needs the window it falls in
  CHECK(validate(c).find("wall_s") != std::string::npos);
  c = SimConfig{};
  c.learners_per_node = 9;
  CHECK(validate(c).find("learners_per_node") != std::string::npos);
  c = SimConfig{};
  c.fault_free_efficiency = 0;
  CHECK(validate(c).find("fault_free_efficiency") != std::string::npos);
}

// One run of a drill: its cluster started, the schedule's faults carried out on it and followed
// until the cluster is back, the cluster stopped, and the invariants checked on what was observed.
//
// The run clock starts when the processes do; the schedule's zero (RunResult::origin_s) is the
// first commit every learner contributed to. A run ends at duration_s from there (or after
// kill_limit kills, a soak), once no fault is in progress, or that fault's bound past it. Its
// directory holds the run's logs, stores and progress.json. run_drill (apps/drill_command.cpp) makes
// one Runner per variant, one after the other, on the drill's one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/drill/cluster.hpp"
#include "apps/drill/faults.hpp"
#include "apps/drill/observations.hpp"
#include "apps/drill/observer.hpp"
#include "apps/drill/schedule.hpp"

namespace archipelago::apps::drill {

class SiteNetwork;

class Runner {
 public:
  // `dir`: the run's directory (emptied first); `binary`: this program, for every child; `net`:
  // the sites' namespaces, or null.
  Runner(const DrillConfig& c, DrillVariant variant, std::vector<Fault> schedule, std::filesystem::path dir,
         std::string binary, double duration_s, std::optional<int> kill_limit, uint64_t seed, const SiteNetwork* net);

  // Drives the run to its end and checks it. A run that could not be driven (the cluster did not
  // come up, a process exited, a restart failed) has driven = false and its error.
  void run();
  // The start of the loss comparison: θ0's loss from this run's first summary, else (its first
  // coordinator was killed) `theta0_loss` scored by another run of the same seed, else the first
  // version this run scored.
  void check_loss(double theta0_loss);
  RunResult take();

 private:
  bool drive();
  bool kills_done() const { return kill_limit_ && result_.kills >= *kill_limit_; }
  void finish();
  void score_assembled_model();
  void check_store(const std::filesystem::path& dir, const nlohmann::json& summary, StoreMemory& memory,
                   const std::string& prefix);
  void check_recoveries();
  void write_progress();

  const DrillConfig& c_;
  std::vector<Fault> schedule_;
  double duration_s_;
  std::optional<int> kill_limit_;
  RunClock clock_;
  RunResult result_;
  DrillCluster cluster_;
  ClusterObserver observer_;
  FaultInjector injector_;
  std::vector<nlohmann::json> shard_summaries_;  // [k]: shard k's final summary (k >= 1)
};

}  // namespace archipelago::apps::drill

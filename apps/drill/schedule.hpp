// The drill file (config/drills/NAME.toml) and the fault schedule a seed draws from it.
//
// load_drill reads and validates the file: every key known, every number in range, the faults it
// names possible with its topology (cut_site needs netns, kill_shard needs shards >= 2). A file
// that passes describes a drill that can run. make_schedule is a pure function of the file, the
// seed and the run's length: every run of a drill (the DiLoCo run and its ddp-like baseline) gets
// the same faults at the same times on the same targets. Called by `archipelago drill`
// (apps/drill_command.cpp) before any process starts.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace archipelago::apps::drill {

// The fault kinds: kill_learner, kill_node, kill_coordinator, freeze_node, slow_node, kill_site,
// slow_learner, corrupt_update, cut_site, kill_shard.
struct Fault {
  double at_s = 0;     // seconds after the first commit every learner contributed to
  std::string kind;    // one of the fault kinds
  std::string target;  // learner-N / node-N / site-N / shard-N / coordinator; empty: chosen by the seed
};

struct DrillConfig {
  std::string name, description;
  double duration_s = 60;      // per run, from the first commit
  double warmup_s = 6;         // no fault earlier (from the first commit)
  double quiet_tail_s = 8;     // no fault later than duration - this
  int nodes = 2, learners_per_node = 2;
  int sites = 1;               // node-i is in site-(i % sites); kill_site SIGKILLs all of a site's nodes
  int shards = 1;              // syncer shards, one coordinator process each; kill_shard SIGKILLs shard 1.. (not 0)
  bool netns = false;          // each site in its own network namespace (root); needed by cut_site
  std::vector<std::string> sets;  // the coordinator's --set overrides
  bool baseline = true;        // run the ddp-like stall baseline under the same schedule
  bool gloo_baseline = true;   // ... and, with baseline, a real data-parallel job on gloo (not in netns drills)
  bool reference = true;       // run a fault-free run of the same length
  bool allow_skipped = false;  // a scheduled fault that could not be carried out fails the drill unless true
  double loss_margin = 0.10;   // final loss <= fault-free final loss x (1 + margin)
  double learner_bound_s = 20, node_bound_s = 30, coordinator_bound_s = 2.0, freeze_bound_s = 30;
  double node_restart_after_s = 1.0, coordinator_restart_after_s = 1.0;
  double freeze_s = 3.0, slow_s = 8.0, slow_duty = 0.5;
  double slow_factor = 4.0;    // slow_learner: each inner step takes this many times its compute time
  double cut_s = 5.0;          // cut_site: how long the site's link stays down
  std::map<std::string, double> mtbf_s;  // kind -> mean time between faults per target (0: none)
  std::vector<Fault> timeline;
};

// The drill file at `path`; invalid_argument naming the file and the key when it is not valid.
Expected<DrillConfig> load_drill(const std::string& path);

// The seeded schedule, sorted by time: Poisson arrivals per kind (rate = targets / MTBF) in
// [warmup, duration - tail], plus the explicit timeline up to `duration_s`; targets the timeline
// left open are drawn now, so every run of the drill gets the same ones.
std::vector<Fault> make_schedule(const DrillConfig& c, uint64_t seed, double duration_s);

}  // namespace archipelago::apps::drill

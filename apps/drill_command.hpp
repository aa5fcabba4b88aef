// archipelago drill: a seeded recovery drill on real processes. A coordinator and nodes run on
// loopback as child processes of this binary; a chaos schedule (MTBF rates per target, or an
// explicit timeline, from config/drills/NAME.toml and --seed) kills learners through the admin
// console's commands, SIGKILLs nodes and the coordinator (and restarts them), freezes and slows
// nodes with SIGSTOP/SIGCONT. The same schedule runs against the DiLoCo run and a ddp-like stall
// baseline; invariants are checked on the processes' answers and the RocksDB store afterwards.
//
// run_drill is the command; its parts are in apps/drill/: schedule (the drill file and its seeded
// faults), cluster and site_network (the processes and their network), observer and faults (what
// the drill sees and does during a run), runner (one run), invariants (the checks, pure), report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace archipelago::apps {

struct DrillArguments {
  std::string config_file;           // config/drills/NAME.toml
  uint64_t seed = 1;
  bool json = false;                 // one JSON line last on stdout
  std::string report_dir;            // report.md, SVGs, run directories (default archipelago-runs/drill-NAME-SEED)
  std::optional<double> duration_s;  // overrides [drill] duration_s (soak)
  std::optional<int> kills;          // soak: stop after this many kills (DiLoCo run only)
};

// Exit codes: 0 every invariant held, 1 an invariant failed or a run could not be driven, 2 bad arguments.
int run_drill(const DrillArguments& arguments);

}  // namespace archipelago::apps

// `archipelago sim`: the goodput and bandwidth simulators behind one command line.
//
// Parameters come from the defaults of SimConfig / BandwidthModel, then a TOML file (--config:
// tables [sim] and [bandwidth]), then flags (--chips, --mtbi-hours, ... one per key, dashes for
// underscores; --bw-* for [bandwidth]). The key names are listed by sim_parameter_help() and in
// bench/sim/README.md. --from-drill RESULT.json predicts a drill's goodput from its inputs instead
// (sim/drill_prediction.hpp). run_sim is what the CLI runs; tests call it directly.
#pragma once

#include <iosfwd>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
}

namespace archipelago::sim {

struct SimArguments {
  std::string config_file;                                   // TOML, optional
  std::vector<std::pair<std::string, std::string>> settings;  // (key, value) from flags, in order; "bandwidth.x" for [bandwidth]
  bool json = false;                 // one JSON line on stdout instead of tables
  bool sweep = false;                // also the goodput over a sweep of chip counts
  std::string sweep_chips = "150000,300000,600000,1200000,2400000";
  std::string svg_file;              // write the sweep's plot here (implies sweep)
  bool bandwidth = false;            // the bandwidth model instead of goodput
  std::string from_drill;            // a drill's result.json: predicted vs measured goodput instead
  double fault_free_goodput = std::numeric_limits<double>::quiet_NaN();  // with from_drill: E, instead of the drill's
  bool outages_stop_learners = false;  // with from_drill: a coordinator outage stops every learner
};

// Adds the options above, and one flag per parameter key, to `command`.
void add_sim_options(CLI::App& command, SimArguments& arguments);

// Runs the command; prints to `out` (errors to `err`). Returns 0, or 2 on bad input.
int run_sim(const SimArguments& arguments, std::ostream& out, std::ostream& err);
int run_sim(const SimArguments& arguments);  // stdout, stderr

// One line per parameter: key, default, meaning.
std::string sim_parameter_help();

}  // namespace archipelago::sim

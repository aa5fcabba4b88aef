// A drill's report, once every run is over: result.json (one JSON object: the invariants, goodput,
// recovery times, the drill's shape for `archipelago sim --from-drill`), report.md and its plots
// (loss.svg, goodput.svg, recovery.svg) in the report directory.
//
// Everything here is a function of the runs' results and the drill's configuration: the same runs
// give the same files. Called by run_drill (apps/drill_command.cpp) after the last run and its
// cross-run checks.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/drill/observations.hpp"
#include "apps/drill/schedule.hpp"
#include "apps/drill_command.hpp"

namespace archipelago::apps {
struct Config;
}

namespace archipelago::apps::drill {

// What one drill did.
struct DrillOutcome {
  const DrillConfig& config;
  const DrillArguments& arguments;
  const Config& effective;                  // the runs' configuration (the drill's sets applied)
  std::optional<std::string> netns_prefix;  // of the sites' network namespaces, when there were any
  bool soak = false;                        // --kills: one DiLoCo run until the kills are done
  double duration_s = 0;                    // of each run
  std::vector<DrillVariant> variants;       // in the order they ran
  std::map<DrillVariant, RunResult> runs;   // the DiLoCo run's checks include the cross-run ones
  std::filesystem::path report_dir;
};

// n, median, mean, max, min of `v` (n 0, median and max null when empty).
nlohmann::json stats_of(std::vector<double> v);

// The bound of each recovery kind, as the drill file set it.
std::map<std::string, double> bounds_of(const DrillConfig& c);

// result.json's object (also the JSON line of --json).
nlohmann::json result_of(const DrillOutcome& outcome);

// Writes loss.svg, goodput.svg, recovery.svg, report.md and result.json (`result`) into the report
// directory.
void write_report(const DrillOutcome& outcome, const nlohmann::json& result);

}  // namespace archipelago::apps::drill

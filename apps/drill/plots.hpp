// The drill report's plots, as standalone SVG text: the held-out loss of each run against wall
// time with the faults marked, each run's goodput ledger as a stacked bar, and the recovery times
// per kind of fault against their bounds.
//
// Pure functions of their inputs: the same runs always give the same bytes. Called by the report
// (apps/drill/report.hpp) once every run of a drill is over.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace archipelago::apps::drill {

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;
};
struct Marker {
  double x;
  std::string label;  // "KIND TARGET": the legend lists each kind once
  int color;          // an index into the palette
};

// A line plot (x: seconds, y: held-out loss) with vertical fault markers.
std::string line_svg(const std::string& title, const std::string& ylabel, const std::vector<Series>& series,
                     const std::vector<Marker>& markers);

// Stacked horizontal bars: each run's ledger parts (seconds by part) as shares of its allocated time.
std::string ledger_svg(const std::vector<std::pair<std::string, std::map<std::string, double>>>& runs);

// Recovery times per kind: one dot per fault, the median as a bar, the bound dashed.
std::string recovery_svg(const std::map<std::string, std::vector<double>>& kinds, const std::map<std::string, double>& bounds);

}  // namespace archipelago::apps::drill

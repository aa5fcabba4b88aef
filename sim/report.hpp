// Output of `archipelago sim`: aligned text tables and an SVG line plot (no dependencies).
// Pure functions of their inputs; any thread.
#pragma once

#include <string>
#include <vector>

namespace archipelago::sim {

// Rows of cells, first row the header; columns padded to their widest cell.
std::string text_table(const std::vector<std::vector<std::string>>& rows);

struct PlotSeries {
  std::string label;
  std::vector<double> y;  // one value per x; values outside [0, 1] are drawn at the border
};

// A line plot of goodput (0..1) against x on a log axis, one coloured line per series, with a legend.
std::string svg_plot(const std::string& title, const std::string& x_label, const std::vector<double>& x,
                     const std::vector<PlotSeries>& series);

// "%.*f" without locale surprises.
std::string fixed(double value, int decimals);

}  // namespace archipelago::sim

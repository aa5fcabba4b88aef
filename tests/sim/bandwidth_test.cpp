// The bandwidth model against closed forms and against the papers' tables.
#include "sim/bandwidth.hpp"

#include <doctest/doctest.h>

#include <cmath>

using namespace archipelago::sim;

namespace {

const double kGridStep = std::pow(10.0, 4.0 / 49.0);  // 1.2068

// The grid index nearest to a value as the tables print it (one decimal).
int grid_index(double gbit_per_s) { return static_cast<int>(std::lround((std::log10(gbit_per_s) + 1) * 49 / 4)); }

}  // namespace

TEST_CASE("the grid holds every value the tables print") {
  const std::vector<double> grid = bandwidth_grid();
  REQUIRE(grid.size() == 50);
  CHECK(grid.front() == doctest::Approx(0.1));
  CHECK(grid.back() == doctest::Approx(1000));
  for (const PublishedRow& row : published_rows())
    for (double published : row.published_gbit_per_s) {
      bool found = false;
      // Printed with one decimal; a few small values (0.9, 1.1, 3.0 of the FP4 rows and 100B DiLoCo) are up
      // to 6% off the nearest grid point (0.954, 1.151, 2.947).
      for (double g : grid) found = found || std::fabs(g - published) <= std::max(0.051, 0.07 * published);
      CHECK_MESSAGE(found, row.label << ": " << published);
    }
}

TEST_CASE("a link-bound DiLoCo sync stalls for the whole reduction minus the top layer's backward") {
  // Reductions start after each layer's backward w.r.t. parameters, the top layer first; when the
  // link is the bottleneck it stays busy from the first one to the last, and the next step's forward
  // of the bottom layer waits for the last: period = (H - 1) steps + forward + 2 nodes + reduction.
  BandwidthModel m;
  m.parameters = 1e9;
  m.layers = 10;
  m.step_time_s = 0.3;
  m.method = SyncMethod::diloco;
  m.inner_steps = 20;
  m.bits_per_parameter = 16;
  const double gbit = 2.0;
  const double node = 0.3 / 30, step = 29 * node, reduction = 16e9 / (gbit * 1e9);
  const double period = 19 * step + 10 * node + 2 * node + reduction;
  CHECK(compute_utilisation(m, gbit) == doctest::Approx(20 * step / period).epsilon(1e-9));
}

TEST_CASE("utilisation grows with bandwidth and reaches 1 on a free link") {
  for (const PublishedRow& row : published_rows()) {
    double previous = 0;
    for (double g : bandwidth_grid()) {
      const double cu = compute_utilisation(row.model, g);
      CHECK(cu >= previous - 1e-12);
      previous = cu;
    }
    CHECK(compute_utilisation(row.model, 1e9) == doctest::Approx(1.0).epsilon(1e-4));
  }
}

TEST_CASE("overlap, streaming and FP4 each lower the bandwidth needed") {
  BandwidthModel m;  // 10B, 48 layers, 0.8 s
  m.method = SyncMethod::diloco;
  const double diloco = threshold_bandwidth(m, 0.95);
  m.method = SyncMethod::streaming;
  const double streaming = threshold_bandwidth(m, 0.95);
  m.overlap_steps = 1;
  const double overlap = threshold_bandwidth(m, 0.95);
  m.bits_per_parameter = 4;
  const double fp4 = threshold_bandwidth(m, 0.95);
  CHECK(streaming < diloco);
  CHECK(overlap < streaming);
  CHECK(fp4 == doctest::Approx(overlap / 4).epsilon(1e-6));  // utilisation depends on bits / bandwidth only
  m.method = SyncMethod::data_parallel;
  m.overlap_steps = 0;
  m.bits_per_parameter = 16;
  CHECK(threshold_bandwidth(m, 0.95) > 5 * diloco);
}

TEST_CASE("Streaming DiLoCo Table 4: the grid reading below the threshold reproduces the published values") {
  // 75 cells (1B, 10B, 100B x five methods x five targets). Counted as matching: the same grid point
  // (within 10%, since grid points are 20.7% apart). Every cell must be within one grid step.
  int matching = 0, cells = 0;
  for (const PublishedRow& row : published_rows()) {
    if (row.source != "Streaming DiLoCo Table 4") continue;
    for (size_t i = 0; i < table_targets().size(); ++i) {
      const double target = table_targets()[i], published = row.published_gbit_per_s[i];
      const double below = required_bandwidth(row.model, target, GridRule::last_below);
      const double reaching = required_bandwidth(row.model, target, GridRule::first_reaching);
      const double threshold = threshold_bandwidth(row.model, target);
      CHECK(below < threshold);
      CHECK(reaching >= threshold);
      CHECK(reaching == doctest::Approx(below * kGridStep).epsilon(1e-6));
      CHECK_MESSAGE(std::abs(grid_index(below) - grid_index(published)) <= 1,
                    row.label << " CU " << target << ": " << below << " vs " << published);
      ++cells;
      if (grid_index(below) == grid_index(published)) ++matching;
    }
  }
  CHECK(cells == 75);
  MESSAGE("Table 4 cells within 10%: " << matching << " / " << cells);
  CHECK(matching >= 64);  // 85%; measured 68
}

TEST_CASE("scaling-law Table 6 (10B): within two grid steps at the stated 0.8 s, its DiLoCo rows at 1.0 s") {
  // At the 0.8 s step the table states, our values are up to two grid steps above its DiLoCo rows;
  // at a 1.0 s step 9 of those 10 cells are the same grid point. bench/README.md shows both.
  int matching_at_1s = 0;
  for (PublishedRow row : published_rows()) {
    if (row.source != "scaling-law Table 6") continue;
    for (size_t i = 0; i < table_targets().size(); ++i) {
      const double below = required_bandwidth(row.model, table_targets()[i], GridRule::last_below);
      CHECK_MESSAGE(std::abs(grid_index(below) - grid_index(row.published_gbit_per_s[i])) <= 2,
                    row.label << " " << below << " vs " << row.published_gbit_per_s[i]);
    }
    if (row.model.method != SyncMethod::diloco) continue;
    row.model.step_time_s = 1.0;
    for (size_t i = 0; i < table_targets().size(); ++i)
      if (grid_index(required_bandwidth(row.model, table_targets()[i], GridRule::last_below)) ==
          grid_index(row.published_gbit_per_s[i]))
        ++matching_at_1s;
  }
  CHECK(matching_at_1s >= 9);
}

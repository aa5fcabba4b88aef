// Compute utilisation of data-parallel, DiLoCo and Streaming DiLoCo training across a cross-site
// link, and the bandwidth each needs to reach a target utilisation.
//
// The model is the one the Streaming DiLoCo paper (arXiv 2501.18512, §3.1) describes: a DAG whose
// nodes are one layer's forward, backward w.r.t. activations, backward w.r.t. parameters (4L - 1
// nodes per step: the first layer needs no backward w.r.t. activations) and, on a step where that
// layer synchronises, the reduction of its (outer) gradient. Compute nodes run one after another on
// the replica's chips; reductions run one after another on the one cross-site link, each starting
// when its layer's backward w.r.t. parameters is done (so a reduction overlaps the rest of the
// backward pass). The forward of a layer in step s + 1 + overlap_steps waits for a reduction of that
// layer issued in step s. Utilisation = time spent computing / makespan.
//
// Pure functions: no state, any thread.
#pragma once

#include <string>
#include <vector>

namespace archipelago::sim {

enum class SyncMethod { data_parallel, diloco, streaming };

struct BandwidthModel {
  double parameters = 10e9;     // N
  int layers = 48;              // L (parameters are spread evenly over the layers)
  double step_time_s = 0.8;     // pure compute time of one step (forward + backward)
  SyncMethod method = SyncMethod::data_parallel;
  int inner_steps = 100;        // H: steps between two syncs of the same layer (DiLoCo, streaming)
  int fragment_layers = 3;      // streaming: layers per fragment (strided: layer l is in fragment l mod P)
  int overlap_steps = 0;        // tau: steps a sync may take before its result is needed
  double bits_per_parameter = 16;  // payload: 16 = bf16, 4 = FP4 (E3M0)
  int replicas = 2;             // M workers in the all-reduce: each sends 2(1 - 1/M) x payload
  double latency_s = 0;         // added to every reduction
  int simulated_periods = 3;    // sync periods simulated (DP: 3 x 10 steps)
};

// The fraction of the makespan spent computing, at `gbit_per_s` on the cross-site link.
// Returns a value in (0, 1]; gbit_per_s <= 0 or an invalid model gives 0.
double compute_utilisation(const BandwidthModel& model, double gbit_per_s);

// The grid of bandwidths the papers' tables were read from: 50 points spaced evenly in log10
// from 0.1 to 1000 Gbit/s (numpy.logspace(-1, 3, 50)), which reproduces every value they print.
std::vector<double> bandwidth_grid();

// How a table value is read off the grid.
//  first_reaching: the smallest grid bandwidth whose utilisation reaches the target.
//  last_below:     the largest grid bandwidth whose utilisation is still below it (one grid step,
//                  x1.207, lower). The papers' tables match this reading at 16 bits per parameter
//                  (see bench/README.md, "Simulator"); we cannot tell from their text which it is.
enum class GridRule { first_reaching, last_below };

// The table value for `target` (0 < target <= 1) under `rule`; a negative value when no grid
// bandwidth reaches the target (first_reaching) or even the first one does (last_below).
double required_bandwidth(const BandwidthModel& model, double target, GridRule rule = GridRule::first_reaching);

// The bandwidth at which utilisation reaches `target`, by bisection on a log scale between 1e-3 and
// 1e5 Gbit/s (utilisation does not decrease with bandwidth); negative when 1e5 does not reach it.
double threshold_bandwidth(const BandwidthModel& model, double target);

// One table row: the model, its label, and the papers' values for CU = 50 / 80 / 90 / 95 / 99 %.
struct PublishedRow {
  std::string source;   // "scaling-law Table 6" or "Streaming DiLoCo Table 4"
  std::string label;    // e.g. "10B DiLoCo H=100"
  BandwidthModel model;
  std::vector<double> published_gbit_per_s;
};

// The utilisation targets of the tables: 0.5, 0.8, 0.9, 0.95, 0.99.
const std::vector<double>& table_targets();

// The rows of the scaling-law paper's Table 6 (10B) and Streaming DiLoCo's Table 4 (1B, 10B, 100B;
// data-parallel, DiLoCo, streaming, + overlap, + overlap + FP4), with the values they print.
std::vector<PublishedRow> published_rows();

}  // namespace archipelago::sim

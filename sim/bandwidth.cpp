// The layer-level DAG of bandwidth.hpp, walked in schedule order: the compute stream and the link
// are each a FIFO, so every node's start is the max of its stream's free time and its inputs.
#include "sim/bandwidth.hpp"

#include <algorithm>
#include <cmath>

namespace archipelago::sim {
namespace {

bool valid(const BandwidthModel& m) {
  return m.parameters > 0 && m.layers >= 1 && m.step_time_s > 0 && m.inner_steps >= 1 && m.fragment_layers >= 1 &&
         m.overlap_steps >= 0 && m.bits_per_parameter > 0 && m.replicas >= 2 && m.latency_s >= 0 &&
         m.simulated_periods >= 1;
}

int steps_per_period(const BandwidthModel& m) { return m.method == SyncMethod::data_parallel ? 10 : m.inner_steps; }

// Does `layer` send a reduction at the end of step `step`?
bool syncs(const BandwidthModel& m, int layer, int step) {
  switch (m.method) {
    case SyncMethod::data_parallel:
      return true;
    case SyncMethod::diloco:
      return step % m.inner_steps == m.inner_steps - 1;
    case SyncMethod::streaming: {
      const int fragments = (m.layers + m.fragment_layers - 1) / m.fragment_layers;
      const int fragment = layer % fragments;  // strided
      const int offset = static_cast<int>(static_cast<long long>(fragment) * m.inner_steps / fragments);
      const int phase = ((step - offset) % m.inner_steps + m.inner_steps) % m.inner_steps;
      return phase == m.inner_steps - 1;
    }
  }
  return false;
}

}  // namespace

double compute_utilisation(const BandwidthModel& m, double gbit_per_s) {
  if (!valid(m) || !(gbit_per_s > 0)) return 0;
  const int layers = m.layers;
  const double node_s = m.step_time_s / (3.0 * layers);
  const int period = steps_per_period(m);
  // Warm-up period, measured periods, and the steps an overlapped reduction may still land in.
  const int measured_from = period;
  const int measured_to = period * (1 + m.simulated_periods);
  const int steps = measured_to + m.overlap_steps + 2;
  const double ring_factor = 2.0 * (1.0 - 1.0 / m.replicas);
  const double link_s = m.bits_per_parameter * (m.parameters / layers) * ring_factor / (gbit_per_s * 1e9) + m.latency_s;

  // available[s * layers + l]: when layer l's parameters are ready for the forward of step s.
  std::vector<double> available(static_cast<size_t>(steps + m.overlap_steps + 2) * layers, 0.0);
  double compute_free = 0, link_free = 0, start_from = 0, start_to = 0;
  for (int step = 0; step < steps; ++step) {
    for (int l = 0; l < layers; ++l) {
      const double start = std::max(compute_free, available[static_cast<size_t>(step) * layers + l]);
      if (l == 0 && step == measured_from) start_from = start;
      if (l == 0 && step == measured_to) start_to = start;
      compute_free = start + node_s;
    }
    if (step >= measured_to) break;
    for (int l = layers - 1; l >= 0; --l) {
      compute_free += (l > 0 ? 2 : 1) * node_s;  // backward w.r.t. activations (not for layer 0), parameters
      if (!syncs(m, l, step)) continue;
      link_free = std::max(link_free, compute_free) + link_s;
      double& needed = available[static_cast<size_t>(step + 1 + m.overlap_steps) * layers + l];
      needed = std::max(needed, link_free);
    }
  }
  const double compute_s = static_cast<double>(measured_to - measured_from) * (3 * layers - 1) * node_s;
  return compute_s / (start_to - start_from);
}

std::vector<double> bandwidth_grid() {
  std::vector<double> grid;
  for (int k = 0; k < 50; ++k) grid.push_back(std::pow(10.0, -1.0 + 4.0 * k / 49.0));
  return grid;
}

double required_bandwidth(const BandwidthModel& model, double target, GridRule rule) {
  const std::vector<double> grid = bandwidth_grid();
  for (size_t k = 0; k < grid.size(); ++k) {
    if (compute_utilisation(model, grid[k]) < target) continue;
    if (rule == GridRule::first_reaching) return grid[k];
    return k == 0 ? -1 : grid[k - 1];
  }
  return -1;
}

double threshold_bandwidth(const BandwidthModel& model, double target) {
  double low = 1e-3, high = 1e5;
  if (compute_utilisation(model, high) < target) return -1;
  if (compute_utilisation(model, low) >= target) return low;
  for (int i = 0; i < 60; ++i) {
    const double mid = std::sqrt(low * high);
    (compute_utilisation(model, mid) >= target ? high : low) = mid;
  }
  return high;
}

const std::vector<double>& table_targets() {
  static const std::vector<double> targets{0.5, 0.8, 0.9, 0.95, 0.99};
  return targets;
}

std::vector<PublishedRow> published_rows() {
  auto make = [](double n, int layers, double step, SyncMethod method, int overlap, double bits) {
    BandwidthModel m;
    m.parameters = n;
    m.layers = layers;
    m.step_time_s = step;
    m.method = method;
    m.inner_steps = 100;
    m.fragment_layers = 3;
    m.overlap_steps = overlap;
    m.bits_per_parameter = bits;
    return m;
  };
  std::vector<PublishedRow> rows;
  const std::string t6 = "scaling-law Table 6", t4 = "Streaming DiLoCo Table 4";
  rows.push_back({t6, "10B DP", make(10e9, 48, 0.8, SyncMethod::data_parallel, 0, 16), {104.8, 184.2, 222.3, 222.3, 390.7}});
  auto h300 = make(10e9, 48, 0.8, SyncMethod::diloco, 0, 16);
  rows.push_back({t6, "10B DiLoCo H=100", make(10e9, 48, 0.8, SyncMethod::diloco, 0, 16), {1.4, 6.2, 13.3, 23.3, 86.8}});
  h300.inner_steps = 300;
  rows.push_back({t6, "10B DiLoCo H=300", h300, {0.5, 2.0, 4.3, 9.1, 41.0}});
  struct Scale {
    const char* name;
    double n;
    int layers;
    double step;
    std::vector<std::vector<double>> published;  // DP, DiLoCo, streaming, +overlap, +overlap+FP4
  };
  const std::vector<Scale> scales{
      {"1B", 1e9, 24, 0.1,
       {{86.8, 152.6, 184.2, 222.3, 569.0}, {1.4, 6.2, 13.3, 23.3, 86.8}, {1.4, 5.2, 9.1, 16.0, 28.1},
        {1.4, 4.3, 6.2, 9.1, 11.0}, {0.4, 0.9, 1.7, 2.0, 3.0}}},
      {"10B", 10e9, 48, 0.8,
       {{104.8, 222.3, 222.3, 268.3, 471.5}, {1.7, 7.5, 16.0, 33.9, 104.8}, {1.7, 5.2, 9.1, 13.3, 19.3},
        {1.7, 3.6, 5.2, 6.2, 7.5}, {0.4, 0.9, 1.4, 1.4, 1.7}}},
      {"100B", 100e9, 108, 4.9,
       {{184.2, 323.8, 390.7, 390.7, 471.5}, {3.0, 11.0, 23.3, 49.4, 184.2}, {2.4, 6.2, 9.1, 11.0, 19.3},
        {1.7, 3.6, 4.3, 5.2, 5.2}, {0.5, 0.9, 1.1, 1.1, 1.4}}},
  };
  for (const Scale& s : scales) {
    const std::string name = s.name;
    rows.push_back({t4, name + " DP", make(s.n, s.layers, s.step, SyncMethod::data_parallel, 0, 16), s.published[0]});
    rows.push_back({t4, name + " DiLoCo", make(s.n, s.layers, s.step, SyncMethod::diloco, 0, 16), s.published[1]});
    rows.push_back({t4, name + " streaming", make(s.n, s.layers, s.step, SyncMethod::streaming, 0, 16), s.published[2]});
    rows.push_back({t4, name + " +overlap", make(s.n, s.layers, s.step, SyncMethod::streaming, 1, 16), s.published[3]});
    rows.push_back({t4, name + " +overlap+FP4", make(s.n, s.layers, s.step, SyncMethod::streaming, 1, 4), s.published[4]});
  }
  return rows;
}

}  // namespace archipelago::sim

// bench_sim: the goodput simulator's table beside the published numbers, and its speed at 2.4M
// chips (one run, and the default Monte Carlo average); the bandwidth model's time per table.
// Usage: bench_sim [--quick]   (--quick: 1.2M and 2.4M chips only)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "sim/bandwidth.hpp"
#include "sim/simulator.hpp"

using namespace archipelago::sim;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Line {
  const char* name;
  Strategy strategy;
  int learners;
};

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const std::vector<double> chips = quick ? std::vector<double>{1.2e6, 2.4e6}
                                          : std::vector<double>{150e3, 300e3, 600e3, 1.2e6, 2.4e6};
  const Line lines[] = {{"ddp", Strategy::ddp, 1},           {"elastic_ddp", Strategy::elastic_ddp, 1},
                        {"M=2", Strategy::decoupled, 2},     {"M=8", Strategy::decoupled, 8},
                        {"M=16", Strategy::decoupled, 16}};
  std::printf("Goodput (defaults of SimConfig: 5B model, 1T tokens, MTBI 1 year per chip)\n");
  std::printf("%10s %10s", "chips", "MTBF s");
  for (const Line& l : lines) std::printf(" %12s", l.name);
  std::printf("\n");
  for (double n : chips) {
    SimConfig c;
    c.chips = n;
    std::printf("%10.0f %10.1f", n, c.mtbi_hours * 3600 / n);
    for (const Line& l : lines) {
      c.learners = l.learners;
      std::printf(" %12.3f", simulate(c, l.strategy).goodput);
    }
    std::printf("\n");
  }
  std::printf("%10s %10s %12s %12s %12s %12s %12s\n", "published", "1.2M", "~0.27", "0.58", "0.70", "0.88", "0.93");
  std::printf("%10s %10s %12s %12s %12s %12s %12s\n", "published", "2.4M", "0.18", "0.40", "-", "0.80", "0.86");

  std::printf("\nSpeed at 2.4M chips, one core (wall seconds; a run = the whole job once)\n");
  std::printf("%12s %10s %14s %8s %18s %14s\n", "strategy", "one run s", "Monte Carlo s", "runs", "interruptions/run",
              "goodput +- se");
  for (const Line& l : lines) {
    SimConfig c;
    c.chips = 2.4e6;
    c.learners = l.learners;
    c.runs = 1;
    auto start = std::chrono::steady_clock::now();
    simulate(c, l.strategy);
    const double one_s = seconds_since(start);
    c.runs = 0;
    start = std::chrono::steady_clock::now();
    const SimResult many = simulate(c, l.strategy);
    const double many_s = seconds_since(start);
    std::printf("%12s %10.6f %14.3f %8d %18.2f %8.4f +- %.4f\n", l.name, one_s, many_s, many.runs, many.interruptions,
                many.goodput, many.goodput_stderr);
  }

  std::printf("\nBandwidth model: all %zu published rows x 5 targets x 3 readings\n", published_rows().size());
  const auto start = std::chrono::steady_clock::now();
  int cells = 0, below_within = 0, reaching_within = 0, threshold_within = 0;
  auto within = [](double v, double p) { return v > 0 && v / p < 1.1 && p / v < 1.1; };
  for (const PublishedRow& row : published_rows())
    for (size_t i = 0; i < table_targets().size(); ++i) {
      const double p = row.published_gbit_per_s[i];
      below_within += within(required_bandwidth(row.model, table_targets()[i], GridRule::last_below), p);
      reaching_within += within(required_bandwidth(row.model, table_targets()[i], GridRule::first_reaching), p);
      threshold_within += within(threshold_bandwidth(row.model, table_targets()[i]), p);
      ++cells;
    }
  std::printf("%d cells within 10%% of the published value: grid last below %d, grid first reaching %d, threshold %d "
              "(%.2f s)\n",
              cells, below_within, reaching_within, threshold_within, seconds_since(start));
  return 0;
}

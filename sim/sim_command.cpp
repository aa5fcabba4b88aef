// `archipelago sim`: parameters (defaults < TOML < flags), then goodput tables, a sweep with its SVG
// plot, or the bandwidth model's tables; --json prints one line instead.
#include "sim/sim_command.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "sim/bandwidth.hpp"
#include "sim/drill_prediction.hpp"
#include "sim/report.hpp"
#include "sim/simulator.hpp"

namespace archipelago::sim {
namespace {

// One [sim] key: the field it sets and what it means.
struct SimKey {
  const char* name;
  double SimConfig::*real;
  int SimConfig::*integer;
  const char* help;
};

const std::vector<SimKey>& sim_keys() {
  static const std::vector<SimKey> keys{
      {"chips", &SimConfig::chips, nullptr, "chips allocated to the job"},
      {"mtbi_hours", &SimConfig::mtbi_hours, nullptr, "mean time between interruptions of one chip, hours (inf: none)"},
      {"learner_mtbf_s", &SimConfig::learner_mtbf_s, nullptr, "> 0: each learner (ddp: the job) fails this often instead, Poisson"},
      {"kill_every_s", &SimConfig::kill_every_s, nullptr, "> 0: also kill a random up learner this often (a drill's schedule)"},
      {"restart_s", &SimConfig::restart_s, nullptr, "ddp: time to restart the whole job after an interruption"},
      {"rescale_s", &SimConfig::rescale_s, nullptr, "elastic_ddp: pause of every chip to drop a failed slice"},
      {"learner_restart_s", &SimConfig::learner_restart_s, nullptr, "decoupled: time until an interrupted learner computes again"},
      {"checkpoint_interval_s", &SimConfig::checkpoint_interval_s, nullptr, "ddp: compute seconds between checkpoints"},
      {"checkpoint_save_s", &SimConfig::checkpoint_save_s, nullptr, "ddp: pause of every chip per checkpoint"},
      {"learners", nullptr, &SimConfig::learners, "M: decoupled learners (chips are split evenly)"},
      {"step_time_s", &SimConfig::step_time_s, nullptr, "compute time of one inner step"},
      {"inner_steps", nullptr, &SimConfig::inner_steps, "H: steps between two syncs of one fragment"},
      {"fragments", nullptr, &SimConfig::fragments, "P: fragments, staggered over the H steps"},
      {"quorum", nullptr, &SimConfig::quorum, "K: learners the syncer needs to commit"},
      {"grace_s", &SimConfig::grace_s, nullptr, "grace window after quorum (delays commits; no goodput effect)"},
      {"learner_checkpoint_steps", nullptr, &SimConfig::learner_checkpoint_steps,
       "> 0: a learner checkpoints its unsent work every N steps"},
      {"straggler_cv", &SimConfig::straggler_cv, nullptr, "coefficient of variation of one chip's step time"},
      {"fault_free_efficiency", &SimConfig::fault_free_efficiency, nullptr,
       "share of a computing group's time kept as work (a fault-free run's goodput)"},
      {"learners_per_node", nullptr, &SimConfig::learners_per_node, "decoupled: learners per node (a node fault's victims)"},
      {"learner_faults", nullptr, &SimConfig::learner_faults, "learner faults at seeded uniform times in the wall window"},
      {"node_faults", nullptr, &SimConfig::node_faults, "node faults (its learners fail together) in the wall window"},
      {"node_restart_s", &SimConfig::node_restart_s, nullptr, "decoupled: a node fault until its learners compute again"},
      {"coordinator_faults", nullptr, &SimConfig::coordinator_faults, "coordinator outages (every group stops) in the wall window"},
      {"coordinator_restart_s", &SimConfig::coordinator_restart_s, nullptr, "length of one coordinator outage"},
      {"node_stalls", nullptr, &SimConfig::node_stalls, "node stalls (its learners stop, losing nothing) in the wall window"},
      {"node_stall_s", &SimConfig::node_stall_s, nullptr, "length of one node stall"},
      {"wall_s", &SimConfig::wall_s, nullptr, "> 0: simulate this wall-clock window (else until the job's work is done)"},
      {"work_s", &SimConfig::work_s, nullptr, "> 0: compute seconds of the job on all chips (else 6ND / (chips flops mfu))"},
      {"parameters", &SimConfig::parameters, nullptr, "N: dense model parameters"},
      {"tokens", &SimConfig::tokens, nullptr, "D: training tokens"},
      {"chip_flops", &SimConfig::chip_flops, nullptr, "peak FLOP/s of one chip"},
      {"mfu", &SimConfig::mfu, nullptr, "model FLOP utilisation"},
      {"runs", nullptr, &SimConfig::runs, "Monte Carlo runs (0: until 20000 interruptions, 16..4096 runs)"},
  };
  return keys;
}

const char* const kBandwidthKeys[][2] = {
    {"parameters", "N: model parameters"},
    {"layers", "L: layers (parameters spread evenly)"},
    {"step_time_s", "pure compute time of one step"},
    {"method", "data_parallel | diloco | streaming"},
    {"inner_steps", "H: steps between two syncs of one layer"},
    {"fragment_layers", "streaming: layers per fragment (strided)"},
    {"overlap_steps", "tau: steps a sync may take before it is needed"},
    {"bits_per_parameter", "payload bits per parameter (16 bf16, 4 FP4)"},
    {"replicas", "M workers in the all-reduce (>= 2)"},
    {"latency_s", "latency added to every reduction"},
};

bool parse_double(const std::string& text, double& value) {
  const char* begin = text.c_str();
  char* end = nullptr;
  value = std::strtod(begin, &end);
  return end != begin && *end == '\0' && !std::isnan(value);
}

// Applies one [sim] setting; an error message, or "".
std::string apply_sim(SimConfig& config, const std::string& key, const std::string& raw) {
  if (key == "seed") {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(raw.c_str(), &end, 10);
    if (raw.empty() || *end != '\0') return "sim.seed: expected a non-negative integer, got '" + raw + "'";
    config.seed = v;
    return "";
  }
  for (const SimKey& k : sim_keys()) {
    if (key != k.name) continue;
    double v = 0;
    if (!parse_double(raw, v)) return "sim." + key + ": expected a number, got '" + raw + "'";
    if (k.real) {
      config.*k.real = v;
    } else {
      if (v != std::floor(v) || std::fabs(v) > 2e9) return "sim." + key + ": expected an integer, got '" + raw + "'";
      config.*k.integer = static_cast<int>(v);
    }
    return "";
  }
  return "unknown key sim." + key + " (see `archipelago sim --help`)";
}

std::string apply_bandwidth(BandwidthModel& m, const std::string& key, const std::string& raw) {
  if (key == "method") {
    if (raw == "data_parallel") m.method = SyncMethod::data_parallel;
    else if (raw == "diloco") m.method = SyncMethod::diloco;
    else if (raw == "streaming") m.method = SyncMethod::streaming;
    else return "bandwidth.method: expected data_parallel, diloco or streaming, got '" + raw + "'";
    return "";
  }
  double v = 0;
  if (!parse_double(raw, v)) return "bandwidth." + key + ": expected a number, got '" + raw + "'";
  auto integer = [&](int& field) -> std::string {
    if (v != std::floor(v) || std::fabs(v) > 2e9) return "bandwidth." + key + ": expected an integer, got '" + raw + "'";
    field = static_cast<int>(v);
    return "";
  };
  if (key == "parameters") m.parameters = v;
  else if (key == "layers") return integer(m.layers);
  else if (key == "step_time_s") m.step_time_s = v;
  else if (key == "inner_steps") return integer(m.inner_steps);
  else if (key == "fragment_layers") return integer(m.fragment_layers);
  else if (key == "overlap_steps") return integer(m.overlap_steps);
  else if (key == "bits_per_parameter") m.bits_per_parameter = v;
  else if (key == "replicas") return integer(m.replicas);
  else if (key == "latency_s") m.latency_s = v;
  else return "unknown key bandwidth." + key + " (see `archipelago sim --help`)";
  return "";
}

std::string toml_scalar(const toml::node& node, bool& ok) {
  ok = true;
  if (auto v = node.value_exact<int64_t>()) return std::to_string(*v);
  if (auto v = node.value_exact<double>()) {
    std::ostringstream s;
    s.precision(17);
    s << *v;
    return s.str();
  }
  if (auto v = node.value_exact<std::string>()) return *v;
  ok = false;
  return "";
}

struct Parsed {
  SimConfig sim;
  BandwidthModel bandwidth;
  bool custom_bandwidth = false;
  std::string error;
};

Parsed parse(const SimArguments& a) {
  Parsed p;
  std::vector<std::pair<std::string, std::string>> settings;
  if (!a.config_file.empty()) {
    toml::table table;
    try {
      table = toml::parse_file(a.config_file);
    } catch (const toml::parse_error& e) {
      p.error = a.config_file + ": " + std::string(e.description());
      return p;
    }
    for (const auto& [section, node] : table) {
      const std::string name(section.str());
      const toml::table* inner = node.as_table();
      if ((name != "sim" && name != "bandwidth") || inner == nullptr) {
        p.error = a.config_file + ": unknown table or key '" + name + "' (expected [sim] and [bandwidth])";
        return p;
      }
      for (const auto& [key, value] : *inner) {
        bool ok = false;
        const std::string raw = toml_scalar(value, ok);
        if (!ok) {
          p.error = a.config_file + ": " + name + "." + std::string(key.str()) + " must be a number or a string";
          return p;
        }
        settings.emplace_back(name == "sim" ? std::string(key.str()) : "bandwidth." + std::string(key.str()), raw);
      }
    }
  }
  settings.insert(settings.end(), a.settings.begin(), a.settings.end());
  for (const auto& [key, raw] : settings) {
    if (key.rfind("bandwidth.", 0) == 0) {
      p.error = apply_bandwidth(p.bandwidth, key.substr(10), raw);
      p.custom_bandwidth = true;
    } else {
      p.error = apply_sim(p.sim, key, raw);
    }
    if (!p.error.empty()) return p;
  }
  if (a.bandwidth || p.custom_bandwidth) {
    const BandwidthModel& m = p.bandwidth;
    if (!(m.parameters > 0) || m.layers < 1 || !(m.step_time_s > 0) || m.inner_steps < 1 || m.fragment_layers < 1 ||
        m.overlap_steps < 0 || !(m.bits_per_parameter > 0) || m.replicas < 2 || !(m.latency_s >= 0))
      p.error = "bandwidth: parameters, step_time_s, bits_per_parameter > 0; layers, inner_steps, fragment_layers >= 1; "
                "overlap_steps, latency_s >= 0; replicas >= 2";
  } else {
    p.error = validate(p.sim);
  }
  return p;
}

nlohmann::json config_json(const SimConfig& c) {
  nlohmann::json j;
  for (const SimKey& k : sim_keys()) {
    if (k.real) {
      const double v = c.*k.real;
      j[k.name] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json("inf");
    } else {
      j[k.name] = c.*k.integer;
    }
  }
  j["seed"] = c.seed;
  return j;
}

const Strategy kStrategies[] = {Strategy::decoupled, Strategy::elastic_ddp, Strategy::ddp};

int run_goodput(const SimArguments& a, const SimConfig& config, std::ostream& out, std::ostream& err) {
  nlohmann::json j;
  std::vector<std::vector<std::string>> rows{
      {"strategy", "goodput", "+-", "uptime", "interruptions/run", "wall_s/run", "lost work", "recovery", "straggling", "runs"}};
  for (Strategy s : kStrategies) {
    const SimResult r = simulate(config, s);
    const char* name = strategy_name(s);
    j["goodput"][name] = r.goodput;
    j["goodput_stderr"][name] = r.goodput_stderr;
    j["interruptions_per_run"][name] = r.interruptions;
    j["wall_s"][name] = r.wall_s;
    j["badput"][name] = {{"lost_work", r.lost_work_share}, {"recovery", r.recovery_share}, {"straggling", r.straggler_share}};
    j["uptime"][name] = r.uptime;
    j["runs"][name] = r.runs;
    j["truncated_runs"][name] = r.truncated_runs;
    if (r.truncated_runs > 0 && !a.json)
      err << "archipelago sim: " << name << ": " << r.truncated_runs << " of " << r.runs
          << " runs stopped after 2000000 events before the job was done; goodput is measured over the time simulated\n";
    const std::string label = s == Strategy::decoupled ? "decoupled M=" + std::to_string(config.learners) : name;
    rows.push_back({label, fixed(r.goodput, 4), fixed(r.goodput_stderr, 4), fixed(r.uptime, 4), fixed(r.interruptions, 2),
                    fixed(r.wall_s, 1),
                    fixed(r.lost_work_share, 4), fixed(r.recovery_share, 4), fixed(r.straggler_share, 4),
                    std::to_string(r.runs)});
  }
  const double mtbf_cluster_s = config.mtbi_hours * 3600 / config.chips;
  j["cluster_mtbf_s"] = std::isfinite(mtbf_cluster_s) ? nlohmann::json(mtbf_cluster_s) : nlohmann::json("inf");
  j["job_work_s"] = config.wall_s > 0 ? nlohmann::json(nullptr) : nlohmann::json(job_work_s(config));
  j["config"] = config_json(config);

  std::vector<double> sweep_x;
  std::vector<PlotSeries> sweep_series;
  if (a.sweep || !a.svg_file.empty()) {
    std::stringstream list(a.sweep_chips);
    for (std::string item; std::getline(list, item, ',');) {
      double v = 0;
      if (!parse_double(item, v) || v < 1) {
        err << "archipelago sim: --sweep-chips: '" << item << "' is not a chip count >= 1\n";
        return 2;
      }
      sweep_x.push_back(v);
    }
    if (sweep_x.empty()) {
      err << "archipelago sim: --sweep-chips is empty\n";
      return 2;
    }
    std::vector<int> ms{2, 8, 16};
    if (std::find(ms.begin(), ms.end(), config.learners) == ms.end()) ms.push_back(config.learners);
    std::vector<std::pair<std::string, std::pair<Strategy, int>>> lines{{"ddp", {Strategy::ddp, 1}},
                                                                         {"elastic_ddp", {Strategy::elastic_ddp, 1}}};
    for (int m : ms) lines.push_back({"decoupled M=" + std::to_string(m), {Strategy::decoupled, m}});
    std::vector<std::vector<std::string>> table{{"chips", "cluster MTBF s"}};
    for (const auto& line : lines) table[0].push_back(line.first);
    for (const auto& line : lines) sweep_series.push_back({line.first, {}});
    for (double chips : sweep_x) {
      SimConfig c = config;
      c.chips = chips;
      std::vector<std::string> row{fixed(chips, 0), fixed(c.mtbi_hours * 3600 / chips, 1)};
      nlohmann::json point{{"chips", chips}};
      for (size_t i = 0; i < lines.size(); ++i) {
        c.learners = lines[i].second.second;
        const std::string problem = validate(c);
        const double g = problem.empty() ? simulate(c, lines[i].second.first).goodput : std::nan("");
        sweep_series[i].y.push_back(g);
        row.push_back(problem.empty() ? fixed(g, 3) : "-");
        point[lines[i].first] = problem.empty() ? nlohmann::json(g) : nlohmann::json(nullptr);
      }
      table.push_back(row);
      j["sweep"].push_back(point);
    }
    if (!a.json) out << "\nGoodput over chip counts (MTBI " << config.mtbi_hours << " h per chip):\n" << text_table(table);
  }
  if (!a.svg_file.empty()) {
    std::ofstream svg(a.svg_file);
    svg << svg_plot("Goodput, MTBI " + fixed(config.mtbi_hours, 0) + " h per chip", "chips", sweep_x, sweep_series);
    if (!svg) {
      err << "archipelago sim: cannot write " << a.svg_file << "\n";
      return 2;
    }
    if (!a.json) out << "plot: " << a.svg_file << "\n";
  }
  if (a.json) {
    out << j.dump() << "\n";
  } else {
    out << "\nchips " << fixed(config.chips, 0) << ", MTBI " << config.mtbi_hours << " h per chip (cluster MTBF "
        << fixed(mtbf_cluster_s, 1) << " s), "
        << (config.wall_s > 0 ? "wall window " + fixed(config.wall_s, 1) + " s"
                              : "job of " + fixed(job_work_s(config), 1) + " compute seconds")
        << "\n"
        << text_table(rows);
  }
  return 0;
}

const char* method_name(SyncMethod m) {
  return m == SyncMethod::data_parallel ? "data_parallel" : m == SyncMethod::diloco ? "diloco" : "streaming";
}

int run_bandwidth(const SimArguments& a, const Parsed& p, std::ostream& out) {
  std::vector<PublishedRow> rows;
  if (p.custom_bandwidth) rows.push_back({"this configuration", method_name(p.bandwidth.method), p.bandwidth, {}});
  else rows = published_rows();
  nlohmann::json j = nlohmann::json::array();
  std::vector<std::vector<std::string>> table{{"source", "row", "rule"}};
  for (double t : table_targets()) table[0].push_back("CU " + fixed(100 * t, 0) + "%");
  for (const PublishedRow& row : rows) {
    nlohmann::json r{{"source", row.source}, {"label", row.label}, {"published", row.published_gbit_per_s}};
    std::vector<std::string> threshold{row.source, row.label, "threshold"}, below{"", "", "grid: last below"},
        reaching{"", "", "grid: first reaching"}, published{"", "", "published"};
    for (size_t i = 0; i < table_targets().size(); ++i) {
      const double target = table_targets()[i];
      const double t = threshold_bandwidth(row.model, target);
      const double b = required_bandwidth(row.model, target, GridRule::last_below);
      const double f = required_bandwidth(row.model, target, GridRule::first_reaching);
      r["threshold"].push_back(t);
      r["last_below"].push_back(b);
      r["first_reaching"].push_back(f);
      threshold.push_back(fixed(t, 2));
      below.push_back(b > 0 ? fixed(b, 1) : "-");
      reaching.push_back(f > 0 ? fixed(f, 1) : "-");
      if (i < row.published_gbit_per_s.size()) published.push_back(fixed(row.published_gbit_per_s[i], 1));
    }
    j.push_back(r);
    table.push_back(threshold);
    table.push_back(below);
    table.push_back(reaching);
    if (!row.published_gbit_per_s.empty()) table.push_back(published);
  }
  if (a.json) out << nlohmann::json{{"bandwidth", j}}.dump() << "\n";
  else out << "Gbit/s across the link for a compute utilisation (grid: 50 points, 0.1..1000 Gbit/s, log-spaced)\n"
           << text_table(table);
  return 0;
}

// --from-drill: only --runs and --seed apply; everything else comes from the result.
int run_from_drill(const SimArguments& a, std::ostream& out, std::ostream& err) {
  DrillOptions options;
  options.fault_free_goodput = a.fault_free_goodput;
  options.outages_stop_learners = a.outages_stop_learners;
  if (std::isfinite(a.fault_free_goodput) && !(a.fault_free_goodput > 0 && a.fault_free_goodput <= 1)) {
    err << "archipelago sim: --fault-free-goodput must be in (0, 1]\n";
    return 2;
  }
  for (const auto& [key, raw] : a.settings) {
    SimConfig scratch;
    std::string problem = key == "runs" || key == "seed" ? apply_sim(scratch, key, raw)
                                                         : "--from-drill takes the simulation from the drill result; only "
                                                           "--runs and --seed apply, not --" + key;
    if (problem.empty() && key == "runs" && scratch.runs < 1) problem = "sim.runs: at least 1 with --from-drill";
    if (!problem.empty()) {
      err << "archipelago sim: " << problem << "\n";
      return 2;
    }
    if (key == "runs") options.runs = scratch.runs;
    else options.seed = scratch.seed;
  }
  if (!a.config_file.empty() || a.sweep || !a.svg_file.empty() || a.bandwidth) {
    err << "archipelago sim: --from-drill does not combine with --config, --sweep, --svg or --bandwidth\n";
    return 2;
  }
  std::ifstream file(a.from_drill);
  nlohmann::json result = nlohmann::json::parse(file, nullptr, false);
  if (!file.is_open() || result.is_discarded()) {
    err << "archipelago sim: " << a.from_drill << ": " << (file.is_open() ? "not JSON" : "cannot read") << "\n";
    return 2;
  }
  const DrillPrediction p = predict_drill(result, options);
  if (!p.error.empty()) {
    err << "archipelago sim: " << a.from_drill << ": " << p.error << "\n";
    return 2;
  }
  if (a.json) out << to_json(p).dump() << "\n";
  else out << prediction_table(p);
  return 0;
}

}  // namespace

std::string sim_parameter_help() {
  std::string text = "[sim] keys (flags: --key-with-dashes):\n";
  const SimConfig defaults;
  for (const SimKey& k : sim_keys()) {
    const std::string value = k.real ? fixed(defaults.*k.real, 4) : std::to_string(defaults.*k.integer);
    text += "  " + std::string(k.name) + " = " + value + "  # " + k.help + "\n";
  }
  text += "  seed = 1  # Monte Carlo seed\n[bandwidth] keys (flags: --bw-key-with-dashes):\n";
  for (const auto& k : kBandwidthKeys) text += "  " + std::string(k[0]) + "  # " + k[1] + "\n";
  return text;
}

void add_sim_options(CLI::App& command, SimArguments& a) {
  command.footer(sim_parameter_help());
  command.add_option("--config", a.config_file, "TOML file with [sim] and [bandwidth] tables")->check(CLI::ExistingFile);
  command.add_flag("--json", a.json, "print one JSON line");
  command.add_flag("--sweep", a.sweep, "also simulate a sweep of chip counts");
  command.add_option("--sweep-chips", a.sweep_chips, "chip counts of the sweep, comma-separated");
  command.add_option("--svg", a.svg_file, "write the sweep's goodput plot to this SVG file");
  command.add_flag("--bandwidth", a.bandwidth, "the bandwidth model: the papers' tables, or the --bw-* configuration");
  command.add_option("--from-drill", a.from_drill, "a drill's result.json: its goodput predicted from its inputs vs measured")
      ->check(CLI::ExistingFile);
  command.add_option("--fault-free-goodput", a.fault_free_goodput,
                     "with --from-drill: the fault-free efficiency (else the drill's fault-free run)");
  command.add_flag("--outages-stop-learners", a.outages_stop_learners,
                   "with --from-drill: a coordinator outage stops every learner (default: they train on and the "
                   "next coordinator merges their work, as nodes do)");
  auto dashed = [](std::string name) {
    for (char& ch : name)
      if (ch == '_') ch = '-';
    return name;
  };
  std::vector<std::pair<std::string, std::string>> keys;
  for (const SimKey& k : sim_keys()) keys.push_back({k.name, k.help});
  keys.push_back({"seed", "Monte Carlo seed"});
  for (const auto& [key, help] : keys)
    command.add_option_function<std::string>("--" + dashed(key), [&a, key = key](const std::string& v) { a.settings.push_back({key, v}); },
                                             help);
  for (const auto& k : kBandwidthKeys) {
    const std::string key = k[0];
    command.add_option_function<std::string>("--bw-" + dashed(key),
                                             [&a, key](const std::string& v) { a.settings.push_back({"bandwidth." + key, v}); },
                                             std::string("[bandwidth] ") + k[1]);
  }
}

int run_sim(const SimArguments& arguments, std::ostream& out, std::ostream& err) {
  if (!arguments.from_drill.empty()) return run_from_drill(arguments, out, err);
  if (std::isfinite(arguments.fault_free_goodput)) {
    err << "archipelago sim: --fault-free-goodput needs --from-drill (else set fault_free_efficiency)\n";
    return 2;
  }
  const Parsed p = parse(arguments);
  if (!p.error.empty()) {
    err << "archipelago sim: " << p.error << "\n";
    return 2;
  }
  if (arguments.bandwidth || p.custom_bandwidth) return run_bandwidth(arguments, p, out);
  return run_goodput(arguments, p.sim, out, err);
}

int run_sim(const SimArguments& arguments) { return run_sim(arguments, std::cout, std::cerr); }

}  // namespace archipelago::sim

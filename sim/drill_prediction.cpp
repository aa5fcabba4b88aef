// A drill's result.json -> SimConfig -> simulate -> predicted vs measured (see drill_prediction.hpp).
#include "sim/drill_prediction.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/report.hpp"

namespace archipelago::sim {
namespace {

using nlohmann::json;

// `path` ("a.b.c") in `j`, or nullptr.
const json* find(const json& j, const std::string& path) {
  const json* at = &j;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
    if (dot == std::string::npos) return at;
    begin = dot + 1;
  }
}

// Reads numbers from a result, collecting the paths that are missing or not numbers.
struct Reader {
  const json& result;
  std::vector<std::string> missing;

  double number(const std::string& path) {
    const json* v = find(result, path);
    if (v == nullptr || !v->is_number()) {
      missing.push_back(path);
      return std::numeric_limits<double>::quiet_NaN();
    }
    return v->get<double>();
  }
  int integer(const std::string& path) {
    const double v = number(path);
    if (!std::isfinite(v)) return 0;
    if (v != std::floor(v) || v < 0 || v > 2e9) {
      missing.push_back(path + " (a non-negative integer)");
      return 0;
    }
    return static_cast<int>(v);
  }
  // An optional number: NaN when absent.
  double optional(const std::string& path) const {
    const json* v = find(result, path);
    return v != nullptr && v->is_number() ? v->get<double>() : std::numeric_limits<double>::quiet_NaN();
  }
};

std::string join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

// The fault-free run's goodput from its ledger parts: merged / their sum.
double ledger_goodput(const json& parts) {
  double merged = 0, allocated = 0;
  for (const auto& [part, seconds] : parts.items()) {
    if (!seconds.is_number()) continue;
    allocated += seconds.get<double>();
    if (part == "merged") merged = seconds.get<double>();
  }
  return allocated > 0 ? merged / allocated : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

DrillPrediction predict_drill(const json& result, const DrillOptions& options) {
  DrillPrediction p;
  if (!result.is_object()) {
    p.error = "a drill result must be a JSON object";
    return p;
  }
  Reader read{result, {}};
  const int slots = read.integer("slots");
  p.nodes = read.integer("nodes");
  const int learners_per_node = read.integer("learners_per_node");
  const int inner_steps = read.integer("inner_steps");
  const int fragments = read.integer("fragments");
  const int checkpoint_every = read.integer("learner_checkpoint_every");
  const double step_s = read.number("step_s");
  const double wall_s = read.number("wall_s");
  p.measured = read.number("goodput.diloco");
  if (find(result, "fault_counts") == nullptr || !find(result, "fault_counts")->is_object()) read.missing.push_back("fault_counts");
  if (find(result, "down_s") == nullptr || !find(result, "down_s")->is_object()) read.missing.push_back("down_s");
  auto count = [&](const char* kind) {
    return find(result, std::string("fault_counts.") + kind) ? read.integer(std::string("fault_counts.") + kind) : 0;
  };
  p.faults = {count("learner"), count("node"), count("site"), count("coordinator"), count("freeze"), count("slow")};
  // Down times only for the kinds that happened.
  // A kind's mean down time; a result written before drills recorded means gives its median instead,
  // and the notes say so.
  auto down = [&](const char* kind, int n) {
    if (n <= 0) return 0.0;
    const std::string base = std::string("down_s.") + kind;
    const double mean = read.optional(base + ".mean"), median = read.optional(base + ".median");
    if (!std::isfinite(mean) && std::isfinite(median)) {
      p.notes.push_back(base + ": the median (the result has no mean)");
      return median;
    }
    return read.number(base + ".mean");
  };
  const double learner_down = down("learner", p.faults.learner), node_down = down("node", p.faults.node),
               site_down = down("site", p.faults.site), coordinator_down = down("coordinator", p.faults.coordinator);
  const int sites = p.faults.site > 0 ? read.integer("sites") : 1;
  if (!read.missing.empty()) {
    p.error = "missing or null field" + std::string(read.missing.size() > 1 ? "s " : " ") + join(read.missing) +
              " (a drill result from before drills recorded the simulator's inputs, or a fault kind without its "
              "down times)";
    return p;
  }
  if (slots != p.nodes * learners_per_node) {
    p.error = "slots (" + std::to_string(slots) + ") is not nodes x learners_per_node (" + std::to_string(p.nodes) + " x " +
              std::to_string(learners_per_node) + ")";
    return p;
  }
  if (sites < 1 || sites > p.nodes) {
    p.error = "sites must be in [1, nodes]";
    return p;
  }
  p.drill = result.value("drill", std::string("?"));
  p.drill_seed = result.contains("seed") && result["seed"].is_number_unsigned() ? result["seed"].get<std::uint64_t>() : 0;

  // The fault-free efficiency E.
  if (std::isfinite(options.fault_free_goodput)) {
    p.efficiency = options.fault_free_goodput;
    p.efficiency_source = "given (--fault-free-goodput)";
  } else if (const double g = read.optional("goodput.fault_free"); std::isfinite(g)) {
    p.efficiency = g;
    p.efficiency_source = "measured: the drill's fault-free run (goodput.fault_free)";
  } else if (const json* parts = find(result, "ledger_s.fault_free"); parts && std::isfinite(ledger_goodput(*parts))) {
    p.efficiency = ledger_goodput(*parts);
    p.efficiency_source = "measured: the drill's fault-free run (ledger_s.fault_free)";
  } else {
    p.error = "the result has no fault-free run (goodput.fault_free, ledger_s.fault_free): give its efficiency with "
              "--fault-free-goodput X (the goodput of a fault-free drill of the same configuration)";
    return p;
  }

  SimConfig& c = p.config;
  c.chips = slots;
  c.learners = slots;
  c.learners_per_node = learners_per_node;
  c.mtbi_hours = std::numeric_limits<double>::infinity();
  c.learner_mtbf_s = 0;
  c.kill_every_s = 0;
  c.step_time_s = step_s;
  c.inner_steps = inner_steps;
  c.fragments = fragments;
  c.quorum = 1;
  c.learner_checkpoint_steps = checkpoint_every;
  c.wall_s = wall_s;
  c.fault_free_efficiency = p.efficiency;
  c.learner_faults = p.faults.learner;
  c.learner_restart_s = learner_down;
  c.coordinator_faults = p.faults.coordinator;
  c.coordinator_restart_s = coordinator_down;
  // A site fault strikes nodes / sites nodes at once; they are simulated as that many node faults.
  const double nodes_per_site = static_cast<double>(p.nodes) / sites;
  const double site_node_faults = std::round(p.faults.site * nodes_per_site);
  c.node_faults = p.faults.node + static_cast<int>(site_node_faults);
  c.node_restart_s = c.node_faults > 0 ? (p.faults.node * node_down + site_node_faults * site_down) / c.node_faults : 0;
  if (p.faults.site > 0)
    p.notes.push_back("site faults: " + std::to_string(p.faults.site) + " x " + fixed(nodes_per_site, 2) +
                      " nodes simulated as separate node faults, down " + fixed(site_down, 2) + " s");
  // Freezes stall a node for freeze_s; slowdowns are not charged (below).
  const double freeze_s = read.optional("freeze_s");
  double stall_seconds = 0;
  if (p.faults.freeze > 0) {
    if (std::isfinite(freeze_s)) {
      c.node_stalls += p.faults.freeze;
      stall_seconds += p.faults.freeze * freeze_s;
    } else {
      p.notes.push_back(std::to_string(p.faults.freeze) + " freezes not charged: the result has no freeze_s");
    }
  }
  // A slowed node's steps take longer and are merged: the ledger counts their time as compute, and
  // the run's throughput drops, not its goodput. A freeze past the staleness bound is lost instead:
  // the frozen time sits in the step it stopped, whose update is refused as stale (`rejected`).
  if (p.faults.slow > 0) {
    p.notes.push_back(std::to_string(p.faults.slow) + " slowdowns not charged: slower steps are merged compute");
  }
  c.node_stall_s = c.node_stalls > 0 ? stall_seconds / c.node_stalls : 0;
  for (const auto& [kind, n] : result["fault_counts"].items()) {
    static const std::vector<std::string> modelled{"learner", "node", "site", "coordinator", "freeze", "slow"};
    if (kind == "slow_learner" && n.is_number() && n.get<double>() > 0) {
      p.notes.push_back(n.dump() + " throttled learners not charged: slower steps are merged compute");
    } else if (std::find(modelled.begin(), modelled.end(), kind) == modelled.end() && n.is_number() &&
               n.get<double>() > 0) {
      p.notes.push_back(n.dump() + " " + kind + " faults not modelled (not charged)");
    }
  }
  c.runs = options.runs;
  c.seed = options.seed;
  if (const std::string problem = validate(c); !problem.empty()) {
    p.error = "the drill's inputs make no valid simulation: " + problem;
    return p;
  }

  // Both readings of a coordinator outage are simulated; `predicted` is the chosen one.
  SimConfig through = c;
  through.coordinator_faults = 0;  // the learners train on: an outage stops nobody
  const SimResult stopped = simulate(c, Strategy::decoupled), trained_on = simulate(through, Strategy::decoupled);
  const SimResult& r = options.outages_stop_learners ? stopped : trained_on;
  p.predicted = r.goodput;
  p.predicted_stderr = r.goodput_stderr;
  p.difference = p.predicted - p.measured;
  p.predicted_other_reading = (options.outages_stop_learners ? trained_on : stopped).goodput;
  p.outage_share = p.efficiency * stopped.coordinator_down_share;
  p.lost_to_learner_faults = p.efficiency * r.learner_down_share;
  p.lost_to_node_faults = p.efficiency * r.node_down_share;
  p.lost_to_coordinator_outages = p.efficiency * r.coordinator_down_share;
  p.lost_to_stalls = p.efficiency * r.stall_share;
  p.lost_unsent_work = r.lost_work_share;
  p.outages_stop_learners = options.outages_stop_learners;
  return p;
}

json to_json(const DrillPrediction& p) {
  const SimConfig& c = p.config;
  return {{"drill", p.drill},
          {"seed", p.drill_seed},
          {"predicted", p.predicted},
          {"predicted_stderr", p.predicted_stderr},
          {"measured", p.measured},
          {"difference", p.difference},
          {"outages_stop_learners", p.outages_stop_learners},
          {"predicted_other_reading", p.predicted_other_reading},
          {"outage_share", p.outage_share},
          {"fault_free_efficiency", p.efficiency},
          {"fault_free_source", p.efficiency_source},
          {"lost",
           {{"learner_faults", p.lost_to_learner_faults},
            {"node_faults", p.lost_to_node_faults},
            {"coordinator_outages", p.lost_to_coordinator_outages},
            {"stalls", p.lost_to_stalls},
            {"unsent_work", p.lost_unsent_work}}},
          {"inputs",
           {{"learners", c.learners},
            {"learners_per_node", c.learners_per_node},
            {"inner_steps", c.inner_steps},
            {"fragments", c.fragments},
            {"learner_checkpoint_steps", c.learner_checkpoint_steps},
            {"step_time_s", c.step_time_s},
            {"wall_s", c.wall_s},
            {"learner_faults", c.learner_faults},
            {"learner_restart_s", c.learner_restart_s},
            {"node_faults", c.node_faults},
            {"node_restart_s", c.node_restart_s},
            {"coordinator_faults", c.coordinator_faults},
            {"coordinator_restart_s", c.coordinator_restart_s},
            {"node_stalls", c.node_stalls},
            {"node_stall_s", c.node_stall_s},
            {"runs", c.runs}}},
          {"notes", p.notes}};
}

std::string prediction_table(const DrillPrediction& p) {
  const SimConfig& c = p.config;
  std::string text = "drill " + p.drill + " (seed " + std::to_string(p.drill_seed) + "): " + std::to_string(c.learners) +
                     " slots (" + std::to_string(p.nodes) + " nodes x " + std::to_string(c.learners_per_node) +
                     "), wall " + fixed(c.wall_s, 1) + " s, H " + std::to_string(c.inner_steps) + ", P " +
                     std::to_string(c.fragments) + ", step " + fixed(c.step_time_s, 3) + " s, learner checkpoint every " +
                     std::to_string(c.learner_checkpoint_steps) + " steps\n" + "fault-free efficiency E " +
                     fixed(p.efficiency, 4) + ": " + p.efficiency_source + "\n\n";
  const std::string points = "goodput lost";
  text += text_table({{"fault", "applied", "simulated", "mean down s", points},
                      {"learner", std::to_string(p.faults.learner), std::to_string(c.learner_faults),
                       fixed(c.learner_restart_s, 2), fixed(p.lost_to_learner_faults, 4)},
                      {"node + site", std::to_string(p.faults.node) + " + " + std::to_string(p.faults.site),
                       std::to_string(c.node_faults), fixed(c.node_restart_s, 2), fixed(p.lost_to_node_faults, 4)},
                      {"coordinator", std::to_string(p.faults.coordinator), std::to_string(c.coordinator_faults),
                       fixed(c.coordinator_restart_s, 2), fixed(p.lost_to_coordinator_outages, 4)},
                      {"freeze + slow", std::to_string(p.faults.freeze) + " + " + std::to_string(p.faults.slow),
                       std::to_string(c.node_stalls), fixed(c.node_stall_s, 2), fixed(p.lost_to_stalls, 4)},
                      {"unsent work", "", "", "", fixed(p.lost_unsent_work, 4)}});
  text += "\n" + text_table({{"goodput", "predicted", "+-", "measured", "difference"},
                             {"diloco", fixed(p.predicted, 4), fixed(p.predicted_stderr, 4), fixed(p.measured, 4),
                              (p.difference >= 0 ? "+" : "") + fixed(p.difference, 4)},
                             {p.outages_stop_learners ? "diloco, learners train on in outages"
                                                      : "diloco, outages stop learners",
                              fixed(p.predicted_other_reading, 4), "", fixed(p.measured, 4),
                              (p.predicted_other_reading >= p.measured ? "+" : "") +
                                  fixed(p.predicted_other_reading - p.measured, 4)}});
  for (const std::string& note : p.notes) text += "note: " + note + "\n";
  return text;
}

}  // namespace archipelago::sim

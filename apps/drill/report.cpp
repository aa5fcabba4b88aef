#include "apps/drill/report.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <utility>

#include "apps/config.hpp"
#include "apps/drill/plots.hpp"

namespace archipelago::apps::drill {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const RunResult& diloco_of(const DrillOutcome& o) { return o.runs.at(DrillVariant::diloco); }

int passed_of(const RunResult& r) {
  int passed = 0;
  for (const auto& check : r.checks) passed += check.passed;
  return passed;
}

// The recovery times of the DiLoCo run's recovered faults, by kind.
std::map<std::string, std::vector<double>> recovery_times(const RunResult& diloco) {
  std::map<std::string, std::vector<double>> recovery;
  for (const auto& r : diloco.recoveries) {
    if (r.recovered()) recovery[r.kind].push_back(r.recovery_s());
  }
  return recovery;
}

// A node restart in two parts: its spawn -> its learners rejoined (LibTorch, the join, the state
// fetch: down_s), rejoined -> merged again, against one fragment round (H inner steps, step_s).
std::vector<double> rejoin_to_merged(const RunResult& diloco) {
  std::vector<double> out;
  for (const auto& r : diloco.recoveries) {
    if (r.detail.contains("rejoin_to_merged_s")) out.push_back(r.detail["rejoin_to_merged_s"].get<double>());
  }
  return out;
}

std::string series_label(DrillVariant variant) {
  switch (variant) {
    case DrillVariant::diloco: return "DiLoCo (faults)";
    case DrillVariant::ddp: return "ddp-like stall (faults)";
    case DrillVariant::fault_free: return "fault-free";
    case DrillVariant::gloo: return "data-parallel on gloo (faults)";
  }
  return "";
}

std::string report_markdown(const DrillOutcome& o, const json& line) {
  const DrillConfig& c = o.config;
  const DrillArguments& arguments = o.arguments;
  const RunResult& diloco = diloco_of(o);
  const int passed = line["invariants_passed"].get<int>(), total = line["invariants_total"].get<int>();
  const int freezes = line["freezes_and_slowdowns"].get<int>();
  const auto recovery = recovery_times(diloco);
  const auto rejoins = rejoin_to_merged(diloco);
  std::ostringstream md;
  md << "# Drill `" << c.name << "`, seed " << arguments.seed << "\n\n";
  if (!c.description.empty()) md << c.description << "\n\n";
  md << "Command: `archipelago drill --config " << arguments.config_file << " --seed " << arguments.seed;
  if (arguments.duration_s) md << " --duration " << *arguments.duration_s;
  if (arguments.kills) md << " --kills " << *arguments.kills;
  md << "`. " << c.nodes << " node processes × " << c.learners_per_node
     << " learners and a coordinator " << (c.netns ? "in network namespaces (" + std::to_string(c.sites) + " sites joined to a hub by veth pairs)" : std::string("on loopback"))
     << ", children of this binary; every run lasts "
     << (o.soak ? "until the kills are done" : fixed(o.duration_s, 0) + " s") << " from the first commit every learner contributed to.\n\n";
  md << "Result: **" << passed << " of " << total << " invariants held**, " << diloco.kills << " kills";
  if (freezes) md << ", " << freezes << " freezes/slowdowns";
  md << ".\n\n## Goodput (the coordinator's ledger)\n\n| run | goodput | merged s | allocated s | final held-out loss |\n|---|---|---|---|---|\n";
  for (const auto variant : o.variants) {
    const auto& r = o.runs.at(variant);
    md << "| " << drill_variant_name(variant) << " | " << fixed(r.goodput, 3) << " | "
       << fixed(r.parts.count("merged") ? r.parts.at("merged") : 0, 1) << " | " << fixed(r.allocated_s, 1) << " | "
       << fixed(r.final_loss, 4) << " |\n";
  }
  md << "\nGoodput is merged compute ÷ allocated slot time, from the last coordinator's summary: its ledger goes on "
        "from the carry of the committed version it resumed, so it covers the whole run, every earlier incarnation and "
        "the time no coordinator ran (kill → the next one listening: "
     << fixed(diloco.coordinator_down_s, 2)
     << " s in the DiLoCo run), when the learners trained on and the next coordinator merged their work. The `ddp` run is the same DiLoCo cluster under the same schedule where every fault also "
        "stalls every other learner (console `pause`) until the victim has merged a contribution again, which is what a "
        "data-parallel job's barrier does. `ddp_gloo` is a real data-parallel job (`train.mode = \"ddp\"`: one gloo worker "
        "process per learner slot, ring all-reduce every step) under the same schedule: a killed learner, node or site "
        "SIGKILLs those workers, a coordinator kill SIGKILLs rank 0 (which holds the checkpoint), a freeze or slowdown "
        "SIGSTOPs them; any worker's death restarts every worker from the last checkpoint, as a non-elastic job does. "
        "Its goodput is the job's own measurement: the time of the steps in its final parameters ÷ the time since its "
        "first step (`merged` in the bar; `lost` is the rest: work after the last checkpoint, restarts, checkpoints, "
        "evaluations).\n\n"
        "![goodput](goodput.svg)\n\n![loss](loss.svg)\n\n## Invariants (DiLoCo run)\n\n"
        "Two checks read what the coordinators wrote themselves, not the drill's view of them. "
        "`versions_strictly_increasing_and_verified` compares each coordinator's commit log (`run/commits.jsonl`: one "
        "line per version, written once its store said the version is durable, by every incarnation in turn) with the "
        "store: the versions strictly increase within and across incarnations and every logged one is in the store, "
        "read back verified; the store's own key order would list them increasing whatever was committed. "
        "`corrupted_updates_refused` matches each injected corruption, one to one, to the syncer's refusal of that "
        "learner's update as `malformed` in the coordinator's log (`coordinator.N.err`) after the console sent it; a "
        "malformed refusal no corruption explains fails it too.\n\n"
        "| invariant | | observations | evidence |\n|---|---|---:|---|\n";
  for (const auto& check : diloco.checks) {
    md << "| " << check.name << " | " << (check.passed ? "pass" : "**FAIL**") << " | " << check.observations << " | "
       << check.evidence << " |\n";
  }
  if (o.runs.count(DrillVariant::gloo)) {
    const json& g = o.runs.at(DrillVariant::gloo).final_summary;
    md << "\n## The data-parallel job on gloo\n\n" << g.value("restarts", int64_t{0})
       << " whole-job restarts; measured all-reduce bytes " << fixed(g.value("bytes_sent", int64_t{0}) / 1e6, 1)
       << " MB sent; " << g.value("steps", int64_t{0}) << " steps.\n\n| at s | fault | target | signal | recovered after s |\n|---|---|---|---|---|\n";
    for (const auto& f : g.value("faults", json::array())) {
      md << "| " << fixed(f.value("at_s", 0.0), 1) << " | " << f.value("fault", "") << " | " << f.value("target", "")
         << " | " << f.value("signal", f.value("missed", "")) << " | "
         << (f.contains("recovered_after_s") && f["recovered_after_s"].is_number() ? fixed(f["recovered_after_s"].get<double>(), 1)
                                                                                 : std::string("—"))
         << " |\n";
    }
    for (const auto& f : g.value("not_applicable", json::array())) {
      md << "| " << fixed(f.value("at_s", 0.0), 1) << " | " << f.value("fault", "") << " | " << f.value("target", "")
         << " | not applicable to a data-parallel job | — |\n";
    }
  }
  if (o.runs.count(DrillVariant::ddp)) {
    md << "\nThe same checks on the ddp-like run (information; its coordinator restarts include waiting for paused learners):\n\n";
    for (const auto& check : o.runs.at(DrillVariant::ddp).checks) {
      md << "- " << check.name << ": " << (check.passed ? "pass" : "fail") << " — " << check.evidence << "\n";
    }
  }
  md << "\n## Recovery times (DiLoCo run)\n\n| kind | n | median s | max s | bound s | measured from → to |\n|---|---|---|---|---|---|\n";
  const std::map<std::string, std::string> definitions = {
      {"learner", "console `kill learner` answered → its restarted incarnation merged a contribution"},
      {"node", "the node process restarted → every learner of it rejoined and merged a contribution"},
      {"site", "the site's node processes restarted → every learner of them rejoined and merged a contribution"},
      {"coordinator", "the restarted coordinator listening → its next committed version (status polled at 50 ms)"},
      {"shard", "the restarted syncer shard listening → its next committed version (status polled at 50 ms)"},
      {"freeze", "SIGCONT → every learner of the node merged a contribution"},
      {"slow", "the end of the slowdown → every learner of the node merged a contribution"},
      {"slow_learner", "the end of its throttle (console `throttle ID 1`) → the learner merged a contribution"},
      {"corrupt", "console `corrupt ID` → the syncer refused the update (malformed) and the learner merged another"},
      {"cut", "the site's link up again → every learner of the site merged a contribution"}};
  for (const auto& [kind, v] : recovery) {
    auto st = stats_of(v);
    if (v.empty()) continue;
    md << "| " << kind << " | " << v.size() << " | " << fixed(st["median"].get<double>()) << " | " << fixed(st["max"].get<double>())
       << " | " << fixed(bounds_of(c)[kind], 1) << " | " << (definitions.count(kind) ? definitions.at(kind) : "") << " |\n";
  }
  if (!rejoins.empty() && line["fragment_round_s"].is_number()) {
    const auto st = stats_of(rejoins);
    md << "\nA node's learners, from their rejoin (seen by the drill's 0.1 s polls) to each merged again: median "
       << fixed(st["median"].get<double>()) << " s, max " << fixed(st["max"].get<double>()) << " s over " << rejoins.size()
       << " node faults, against one fragment round of " << fixed(line["fragment_round_s"].get<double>())
       << " s (H × the mean step). The rest of a node's recovery is the process start, LibTorch and the join.\n";
  }
  md << "\n![recovery](recovery.svg)\n\n## Faults (DiLoCo run)\n\n| at s | fault | target | recovery s | evidence |\n|---|---|---|---|---|\n";
  for (const auto& r : diloco.recoveries) {
    md << "| " << fixed(r.at_s - diloco.origin_s, 1) << " | " << r.fault << " | " << r.target << " | "
       << (r.recovered() ? fixed(r.recovery_s()) : "never") << " | " << r.evidence << " |\n";
  }
  md << "\nRun directories (logs, stores, summaries): `" << o.report_dir.string() << "/<run>/`.\n";
  return md.str();
}

}  // namespace

json stats_of(std::vector<double> v) {
  if (v.empty()) return {{"n", 0}, {"median", nullptr}, {"max", nullptr}};
  std::sort(v.begin(), v.end());
  const double median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  double sum = 0;
  for (double x : v) sum += x;
  return {{"n", v.size()}, {"median", median}, {"mean", sum / v.size()}, {"max", v.back()}, {"min", v.front()}};
}

std::map<std::string, double> bounds_of(const DrillConfig& c) {
  return {{"learner", c.learner_bound_s}, {"node", c.node_bound_s}, {"site", c.node_bound_s}, {"coordinator", c.coordinator_bound_s},
          {"freeze", c.freeze_bound_s}, {"slow", c.freeze_bound_s}, {"slow_learner", c.freeze_bound_s},
          {"corrupt", c.learner_bound_s}, {"cut", c.node_bound_s}, {"shard", c.coordinator_bound_s}};
}

json result_of(const DrillOutcome& o) {
  const DrillConfig& c = o.config;
  const RunResult& diloco = diloco_of(o);
  const auto recovery = recovery_times(diloco);
  json recovery_json = json::object();
  for (const char* kind : {"learner", "node", "coordinator"}) {
    recovery_json[kind] = stats_of(recovery.count(kind) ? recovery.at(kind) : std::vector<double>{});
  }
  for (const auto& [kind, v] : recovery) recovery_json[kind] = stats_of(v);
  json goodput = json::object();
  for (const auto& [variant, r] : o.runs) {
    goodput[drill_variant_name(variant)] = std::isfinite(r.goodput) ? json(r.goodput) : json(nullptr);
  }
  if (!goodput.contains("ddp")) goodput["ddp"] = nullptr;
  json invariants = json::array();
  for (const auto& check : diloco.checks) {
    invariants.push_back({{"name", check.name}, {"passed", check.passed}, {"observations", check.observations},
                          {"evidence", check.evidence}});
  }
  int freezes = 0;
  for (const auto& r : diloco.recoveries) freezes += r.kind == "freeze" || r.kind == "slow";
  json line = {{"drill", c.name}, {"seed", o.arguments.seed}, {"goodput", goodput},
               {"invariants_passed", passed_of(diloco)}, {"invariants_total", static_cast<int>(diloco.checks.size())},
               {"kills", diloco.kills}, {"freezes_and_slowdowns", freezes},
               {"recovery_s", recovery_json}, {"invariants", invariants},
               {"heldout_loss", {{"initial", diloco.initial_loss}, {"diloco", diloco.final_loss}}},
               {"wall_s", diloco.wall_s}, {"coordinator_down_s", diloco.coordinator_down_s},
               {"report", (o.report_dir / "report.md").string()}};
  if (o.runs.count(DrillVariant::gloo)) {
    const RunResult& g = o.runs.at(DrillVariant::gloo);
    const json& s = g.final_summary;
    line["ddp_gloo_job"] = {{"kills", g.kills}, {"restarts", s.value("restarts", int64_t{0})},
                            {"steps", s.value("steps", int64_t{0})}, {"bytes_sent", s.value("bytes_sent", int64_t{0})},
                            {"kept_step_s", s.value("kept_step_s", 0.0)}, {"allocated_s", s.value("allocated_s", 0.0)},
                            {"faults", s.value("faults", json::array())},
                            {"not_applicable", s.value("not_applicable", json::array())}};
  }
  line["skipped_faults"] = json::object();
  for (const auto& [variant, r] : o.runs) line["skipped_faults"][drill_variant_name(variant)] = r.skipped;
  // Faults delivered to another victim than scheduled, or later: which, and why.
  line["redirected_faults"] = json::object();
  for (const auto& [variant, r] : o.runs) {
    json redirected = json::array();
    for (const auto& recovery : r.recoveries) {
      if (!recovery.detail.contains("retargeted_from") && !recovery.detail.contains("deferred_s")) continue;
      json entry = {{"at_s", recovery.at_s - r.origin_s}, {"fault", recovery.fault}, {"target", recovery.target}};
      for (const char* key : {"retargeted_from", "retarget_why", "deferred_s", "deferred_why"}) {
        if (recovery.detail.contains(key)) entry[key] = recovery.detail[key];
      }
      redirected.push_back(entry);
    }
    line["redirected_faults"][drill_variant_name(variant)] = redirected;
  }
  for (const auto& [variant, r] : o.runs) {
    if (variant != DrillVariant::diloco && std::isfinite(r.final_loss)) line["heldout_loss"][drill_variant_name(variant)] = r.final_loss;
  }
  // A coordinator restart in two parts: process start -> listening (LibTorch, store, scoring the
  // resumed version), listening -> next commit (the nodes' rejoin and a round: recovery_s).
  std::vector<double> start_to_listening;
  for (const auto& r : diloco.recoveries) {
    if (r.kind == "coordinator" && r.detail.contains("process_start_to_listening_s")) {
      start_to_listening.push_back(r.detail["process_start_to_listening_s"].get<double>());
    }
  }
  line["coordinator_start_to_listening_s"] = stats_of(start_to_listening);
  line["node_rejoin_to_merged_s"] = stats_of(rejoin_to_merged(diloco));

  // What a model of this drill needs (archipelago sim --from-drill): its shape, its faults by kind,
  // how long each kept its victims down, the mean compute time of a step, and the ledgers' parts.
  json fault_counts = json::object(), down = json::object();
  std::map<std::string, std::vector<double>> down_by_kind;
  for (const auto& r : diloco.recoveries) {
    fault_counts[r.kind] = fault_counts.value(r.kind, 0) + 1;
    if (r.detail.contains("down_s")) down_by_kind[r.kind].push_back(r.detail["down_s"].get<double>());
  }
  for (const auto& [kind, v] : down_by_kind) down[kind] = stats_of(v);
  const Config& config = o.effective;
  line["slots"] = c.nodes * c.learners_per_node;
  line["nodes"] = c.nodes;
  line["learners_per_node"] = c.learners_per_node;
  line["sites"] = c.sites;
  line["netns"] = c.netns;
  if (o.netns_prefix) line["netns_prefix"] = *o.netns_prefix;
  line["inner_steps"] = config.run.inner_steps;
  line["fragments"] = config.outer.fragments;
  line["learner_checkpoint_every"] = config.learner_checkpoint_every;
  line["fault_counts"] = fault_counts;
  for (const auto& [key, value] : std::vector<std::pair<const char*, double>>{
           {"freeze_s", c.freeze_s}, {"slow_s", c.slow_s}, {"slow_duty", c.slow_duty}, {"slow_factor", c.slow_factor},
           {"cut_s", c.cut_s}, {"node_restart_after_s", c.node_restart_after_s},
           {"coordinator_restart_after_s", c.coordinator_restart_after_s}}) {
    line[key] = value;  // the drill's fault lengths, as its file gave them
  }
  line["down_s"] = down;
  json ledgers_s = json::object();
  for (const auto& [variant, r] : o.runs) ledgers_s[drill_variant_name(variant)] = r.parts;
  line["ledger_s"] = ledgers_s;
  // Merged compute seconds per merged step, in the fault-free run (one coordinator incarnation), or
  // in the DiLoCo run's last incarnation: its summary's merged seconds and tokens.
  const bool has_fault_free = o.runs.count(DrillVariant::fault_free) > 0;
  const RunResult& timed = has_fault_free ? o.runs.at(DrillVariant::fault_free) : diloco;
  const json seconds = timed.final_summary.value("goodput_seconds", json::object());
  const double merged_s = seconds.is_object() ? seconds.value("merged", 0.0) : 0.0;
  const double steps = timed.final_summary.value("tokens", 0.0) / (double(config.inner.batch_size) * config.model.seq_len);
  line["step_s"] = steps > 0 && merged_s > 0 ? json(merged_s / steps) : json(nullptr);
  line["step_s_from"] = drill_variant_name(has_fault_free ? DrillVariant::fault_free : DrillVariant::diloco);
  line["fragment_round_s"] = line["step_s"].is_number() ? json(config.run.inner_steps * line["step_s"].get<double>())
                                                         : json(nullptr);
  return line;
}

void write_report(const DrillOutcome& o, const json& result) {
  const DrillConfig& c = o.config;
  const RunResult& diloco = diloco_of(o);
  std::vector<Series> series;
  for (const auto variant : o.variants) {
    const RunResult& r = o.runs.at(variant);
    Series s{series_label(variant), {}};
    for (const auto& p : r.loss) s.points.push_back({p.t_s - r.origin_s, p.loss});
    series.push_back(s);
  }
  const std::map<std::string, int> kind_color = {{"learner", 3}, {"node", 4},         {"coordinator", 1},
                                                 {"freeze", 5},  {"slow", 6},         {"site", 8},
                                                 {"cut", 2},     {"slow_learner", 9}, {"corrupt", 0},
                                                 {"shard", 7}};
  std::vector<Marker> markers;
  for (const auto& r : diloco.recoveries) {
    markers.push_back({r.at_s - diloco.origin_s, r.kind + " " + r.target, kind_color.count(r.kind) ? kind_color.at(r.kind) : 7});
  }
  const fs::path& report = o.report_dir;
  std::ofstream(report / "loss.svg") << line_svg("held-out loss against wall time, " + c.name + " seed " +
                                                     std::to_string(o.arguments.seed) + " (dashed: faults in the DiLoCo run)",
                                                 "held-out loss", series, markers);
  std::vector<std::pair<std::string, std::map<std::string, double>>> ledgers;
  for (const auto variant : o.variants) ledgers.push_back({drill_variant_name(variant), o.runs.at(variant).parts});
  std::ofstream(report / "goodput.svg") << ledger_svg(ledgers);
  std::ofstream(report / "recovery.svg") << recovery_svg(recovery_times(diloco), bounds_of(c));
  std::ofstream(report / "report.md") << report_markdown(o, result);
  std::ofstream(report / "result.json") << result.dump(2) << "\n";
}

}  // namespace archipelago::apps::drill

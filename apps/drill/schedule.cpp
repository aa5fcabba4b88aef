#include "apps/drill/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <tuple>

#include <toml++/toml.h>

#include "apps/drill/random.hpp"
#include "messages/message_types.hpp"

namespace archipelago::apps::drill {
namespace {

const std::vector<std::string> kFaultKinds = {"kill_learner", "kill_node", "kill_coordinator", "freeze_node",
                                              "slow_node", "kill_site", "slow_learner", "corrupt_update", "cut_site",
                                              "kill_shard"};

std::string fault_kind_list() {
  std::string out;
  for (const auto& k : kFaultKinds) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// The faults aimed at one learner, and at one site.
bool learner_fault(const std::string& kind) {
  return kind == "kill_learner" || kind == "slow_learner" || kind == "corrupt_update";
}
bool site_fault(const std::string& kind) { return kind == "kill_site" || kind == "cut_site"; }

}  // namespace

Expected<DrillConfig> load_drill(const std::string& path) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::invalid_argument, path + ": " + std::string(e.description()));
  }
  DrillConfig c;
  c.name = std::filesystem::path(path).stem().string();
  auto bad = [&](const std::string& key, const std::string& why) {
    return make_error(ErrorCode::invalid_argument, path + ": " + key + ": " + why);
  };
  static const std::set<std::string> kDrillKeys = {
      "name", "description", "duration_s", "warmup_s", "quiet_tail_s", "nodes", "learners_per_node", "sites", "sets",
      "baseline", "reference", "loss_margin", "learner_bound_s", "node_bound_s", "coordinator_bound_s",
      "freeze_bound_s", "node_restart_after_s", "coordinator_restart_after_s", "freeze_s", "slow_s", "slow_duty",
      "slow_factor", "cut_s", "netns", "allow_skipped", "shards", "gloo_baseline"};
  for (const auto& [key, value] : table) {
    if (key != "drill" && key != "mtbf_s" && key != "timeline") return bad(std::string(key.str()), "unknown table");
  }
  if (auto* drill = table["drill"].as_table()) {
    for (const auto& [key, value] : *drill) {
      if (!kDrillKeys.count(std::string(key.str()))) return bad("drill." + std::string(key.str()), "unknown key");
    }
    auto number = [&](const char* key, double& out, double min) -> Status {
      auto node = (*drill)[key];
      if (!node) return Status::success();
      auto v = node.value<double>();
      if (!v || !(*v >= min)) return bad(std::string("drill.") + key, "a number >= " + std::to_string(min));
      out = *v;
      return Status::success();
    };
    for (auto [key, out, min] : std::vector<std::tuple<const char*, double*, double>>{
             {"duration_s", &c.duration_s, 1}, {"warmup_s", &c.warmup_s, 0}, {"quiet_tail_s", &c.quiet_tail_s, 0},
             {"loss_margin", &c.loss_margin, 0}, {"learner_bound_s", &c.learner_bound_s, 0.1},
             {"node_bound_s", &c.node_bound_s, 0.1}, {"coordinator_bound_s", &c.coordinator_bound_s, 0.1},
             {"freeze_bound_s", &c.freeze_bound_s, 0.1}, {"node_restart_after_s", &c.node_restart_after_s, 0},
             {"coordinator_restart_after_s", &c.coordinator_restart_after_s, 0}, {"freeze_s", &c.freeze_s, 0.1},
             {"slow_s", &c.slow_s, 0.1}, {"slow_duty", &c.slow_duty, 0.05}, {"slow_factor", &c.slow_factor, 1},
             {"cut_s", &c.cut_s, 0.1}}) {
      if (auto s = number(key, *out, min); !s) return s.error();
    }
    if (c.slow_duty > 0.95) return bad("drill.slow_duty", "at most 0.95 (the share of time a slowed node is stopped)");
    if (c.slow_factor > messages::kMaxThrottle) return bad("drill.slow_factor", "at most 100 (the console's throttle)");
    if (auto node = (*drill)["netns"]) {
      auto v = node.value<bool>();
      if (!v) return bad("drill.netns", "true or false");
      c.netns = *v;
    }
    if (auto v = (*drill)["name"].value<std::string>()) c.name = *v;
    if (auto v = (*drill)["description"].value<std::string>()) c.description = *v;
    if (auto v = (*drill)["nodes"].value<int64_t>()) c.nodes = static_cast<int>(*v);
    if (auto v = (*drill)["learners_per_node"].value<int64_t>()) c.learners_per_node = static_cast<int>(*v);
    if (c.nodes < 1 || c.nodes > 16) return bad("drill.nodes", "1..16");
    if (c.learners_per_node < 1 || c.learners_per_node > 8) return bad("drill.learners_per_node", "1..8");
    if (auto v = (*drill)["sites"].value<int64_t>()) c.sites = static_cast<int>(*v);
    if (c.sites < 1 || c.sites > c.nodes) return bad("drill.sites", "1..nodes");
    if (auto v = (*drill)["shards"].value<int64_t>()) c.shards = static_cast<int>(*v);
    if (c.shards < 1 || c.shards > 4) return bad("drill.shards", "1..4");
    if (auto v = (*drill)["baseline"].value<bool>()) c.baseline = *v;
    if (auto v = (*drill)["gloo_baseline"].value<bool>()) c.gloo_baseline = *v;
    if (auto v = (*drill)["reference"].value<bool>()) c.reference = *v;
    if (auto v = (*drill)["allow_skipped"].value<bool>()) c.allow_skipped = *v;
    if (auto* sets = (*drill)["sets"].as_array()) {
      for (const auto& s : *sets) {
        auto v = s.value<std::string>();
        if (!v || v->find('=') == std::string::npos) return bad("drill.sets", "strings of the form section.key=value");
        c.sets.push_back(*v);
      }
    }
  }
  if (auto* rates = table["mtbf_s"].as_table()) {
    for (const auto& [key, value] : *rates) {
      const std::string kind(key.str());
      if (std::find(kFaultKinds.begin(), kFaultKinds.end(), kind) == kFaultKinds.end()) return bad("mtbf_s." + kind, "unknown fault");
      auto v = value.value<double>();
      if (!v || *v < 0) return bad("mtbf_s." + kind, "a number >= 0 (0: none)");
      c.mtbf_s[kind] = *v;
    }
  }
  if (auto* timeline = table["timeline"].as_array()) {
    for (const auto& entry : *timeline) {
      auto* t = entry.as_table();
      if (!t) return bad("timeline", "an array of tables [[timeline]]");
      Fault f;
      auto at = (*t)["at_s"].value<double>();
      auto kind = (*t)["fault"].value<std::string>();
      if (!at || *at < 0) return bad("timeline.at_s", "a number >= 0 (seconds after the first commit)");
      if (!kind || std::find(kFaultKinds.begin(), kFaultKinds.end(), *kind) == kFaultKinds.end()) {
        return bad("timeline.fault", "one of " + fault_kind_list());
      }
      f.at_s = *at;
      f.kind = *kind;
      f.target = (*t)["target"].value_or(std::string{});
      c.timeline.push_back(f);
    }
  }
  auto cuts = [&] {
    if (c.mtbf_s.count("cut_site") && c.mtbf_s.at("cut_site") > 0) return true;
    for (const auto& f : c.timeline) {
      if (f.kind == "cut_site") return true;
    }
    return false;
  };
  if (cuts() && !c.netns) return bad("drill.netns", "cut_site needs netns = true (a site's link is a veth between namespaces)");
  auto kills_shards = [&] {
    if (c.mtbf_s.count("kill_shard") && c.mtbf_s.at("kill_shard") > 0) return true;
    for (const auto& f : c.timeline) {
      if (f.kind == "kill_shard") return true;
    }
    return false;
  };
  if (kills_shards() && c.shards < 2) return bad("drill.shards", "kill_shard needs shards >= 2 (shard 0 is the coordinator)");
  if (c.shards > 1 && (c.baseline || c.reference)) {
    return bad("drill.shards", "a sharded drill runs no baseline or reference run: set baseline = false and reference = false");
  }
  return c;
}

std::vector<Fault> make_schedule(const DrillConfig& c, uint64_t seed, double duration_s) {
  std::vector<Fault> out;
  const int learners = c.nodes * c.learners_per_node;
  auto target_of = [&](const std::string& kind, Random& r) -> std::string {
    if (kind == "kill_coordinator") return "coordinator";
    if (kind == "kill_shard") return "shard-" + std::to_string(1 + r.below(static_cast<size_t>(c.shards - 1)));
    if (learner_fault(kind)) return "learner-" + std::to_string(r.below(learners));
    if (site_fault(kind)) return "site-" + std::to_string(r.below(c.sites));
    return "node-" + std::to_string(r.below(c.nodes));
  };
  for (size_t k = 0; k < kFaultKinds.size(); ++k) {
    const auto& kind = kFaultKinds[k];
    auto it = c.mtbf_s.find(kind);
    if (it == c.mtbf_s.end() || it->second <= 0) continue;
    const int targets = kind == "kill_coordinator" ? 1
                        : kind == "kill_shard"     ? c.shards - 1
                        : learner_fault(kind)      ? learners
                        : site_fault(kind)         ? c.sites
                                                   : c.nodes;
    const double rate = targets / it->second;
    Random r(seed * 0x100000001b3ULL + k + 1);
    for (double t = c.warmup_s;;) {
      t += -std::log(1.0 - r.unit()) / rate;
      if (t > duration_s - c.quiet_tail_s) break;
      out.push_back({t, kind, target_of(kind, r)});
    }
  }
  Random r(seed ^ 0x5eedULL);
  for (auto f : c.timeline) {
    if (f.at_s > duration_s) continue;
    if (f.target.empty()) f.target = target_of(f.kind, r);
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const Fault& a, const Fault& b) { return a.at_s < b.at_s; });
  return out;
}

}  // namespace archipelago::apps::drill

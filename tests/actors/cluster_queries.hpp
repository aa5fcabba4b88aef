// Queries of a running LocalCluster shared by the actor runtime tests (status polling, per-learner
// records, stored version digests). Thread of the test only.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "run/cluster.hpp"
#include "actors/wire.hpp"

namespace archipelago::actors::testing {

using nlohmann::json;
using run::LocalCluster;

inline json status(LocalCluster& cluster, caf::atom_value name) {
  auto reply = cluster.query(name, "status", {}, 5);
  return reply ? *reply : json::object();
}

inline json learner_record(LocalCluster& cluster, const std::string& id) {
  auto s = status(cluster, syncer_name());
  if (!s.contains("learners") || !s["learners"].contains(id)) return json::object();
  return s["learners"][id];
}

inline int64_t merged(LocalCluster& cluster, const std::string& id) {
  return learner_record(cluster, id).value("contributions_merged", int64_t{0});
}

inline int64_t monitor_step(LocalCluster& cluster, const std::string& id) {
  auto s = status(cluster, monitor_name());
  if (!s.contains("learners") || !s["learners"].contains(id)) return 0;
  return s["learners"][id].value("step", int64_t{0});
}

inline std::map<uint64_t, uint64_t> version_digests(LocalCluster& cluster) {
  std::map<uint64_t, uint64_t> out;
  auto reply = cluster.query(store_name(), "versions", {}, 10);
  if (!reply) return out;
  for (const auto& v : (*reply)["versions"]) out[v["version"].get<uint64_t>()] = v["digest"].get<uint64_t>();
  return out;
}


}  // namespace archipelago::actors::testing

#include "apps/drill/observer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>

namespace archipelago::apps::drill {

using nlohmann::json;

std::optional<double> progress_field(const std::string& line, const std::string& key) {
  auto at = line.find(" " + key + "=");
  if (at == std::string::npos) return std::nullopt;
  const char* begin = line.c_str() + at + key.size() + 2;
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return v;
}

ClusterObserver::ClusterObserver(const RunClock& clock, DrillCluster& cluster, std::vector<LossPoint>& loss)
    : clock_(clock), cluster_(cluster), loss_(loss), console_(cluster.host(), cluster.admin_token().string()) {}

void ClusterObserver::follow_coordinator() {
  tail_.reset(cluster_.coordinator().out_path());
  console_.forget();
}

void ClusterObserver::read_progress() {
  for (const auto& line : tail_.lines()) {
    if (line.rfind("progress ", 0) != 0) continue;
    auto version = progress_field(line, "version");
    if (!version) continue;
    last_version_ = std::max<int64_t>(last_version_, static_cast<int64_t>(*version));
    auto loss = progress_field(line, "heldout_loss");
    if (loss && std::isfinite(*loss) && (loss_.empty() || loss_.back().loss != *loss || loss_.back().version != *version)) {
      loss_.push_back({clock_.now(), *version, *loss});
    }
  }
}

void ClusterObserver::poll_learners() {
  auto rows = ask(messages::AdminVerb::learners);
  if (!rows) return;
  for (const auto& row : (*rows)["learners"]) learners_[row.value("id", "")] = row;
}

void ClusterObserver::poll_status() {
  auto status = ask(messages::AdminVerb::status);
  if (!status) return;
  if (status->contains("committed_version") && (*status)["committed_version"].is_number()) {
    last_version_ = std::max<int64_t>(last_version_, (*status)["committed_version"].get<int64_t>());
  }
}

Expected<json> ClusterObserver::ask(messages::AdminVerb verb, const std::string& target, double timeout_s,
                                    const std::string& value) {
  return console_.call(cluster_.port(), verb, target, timeout_s, value);
}

json ClusterObserver::learner(const std::string& id) const {
  auto it = learners_.find(id);
  return it == learners_.end() ? json::object() : it->second;
}

std::vector<std::string> ClusterObserver::learners_on(const std::string& node) const {
  std::vector<std::string> out;
  for (const auto& [id, row] : learners_) {
    if (row.value("node", "") == node) out.push_back(id);
  }
  return out;
}

std::vector<std::string> ClusterObserver::all_learners() const {
  std::vector<std::string> out;
  for (const auto& [id, row] : learners_) out.push_back(id);
  return out;
}

int ClusterObserver::contributing() const {
  int n = 0;
  for (const auto& [id, row] : learners_) n += row.value("contributions_merged", 0) > 0;
  return n;
}

}  // namespace archipelago::apps::drill

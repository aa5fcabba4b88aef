// The drill's line to the coordinator (shard 0) of one run: what it sees (the committed versions
// and held-out losses of the coordinator's progress lines, the learner table and the status,
// polled through the admin console) and the console commands it sends.
//
// The learner table is the last one polled: a fault is aimed and its recovery judged on it. After
// a coordinator restart, follow_coordinator() reads the new process's output and opens a new
// console session. Owned by the runner (apps/drill/runner.hpp), used by it and its fault injector
// from the drill's one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/drill/cluster.hpp"
#include "apps/drill/console_client.hpp"
#include "apps/drill/observations.hpp"
#include "common/files.hpp"

namespace archipelago::apps::drill {

// `key=value` of a progress line of `archipelago train` or of a coordinator ("progress k=v k=v ..."
// when its output is not a terminal), or nullopt.
std::optional<double> progress_field(const std::string& line, const std::string& key);

class ClusterObserver {
 public:
  // Held-out losses go to `loss` as the progress lines report them.
  ClusterObserver(const RunClock& clock, DrillCluster& cluster, std::vector<LossPoint>& loss);

  // The coordinator was (re)started: its progress lines from the start, a new console session.
  void follow_coordinator();
  // Progress lines of the coordinator: committed version and held-out loss against the run clock.
  void read_progress();
  void poll_learners();
  void poll_status();
  // A console command to the coordinator.
  Expected<nlohmann::json> ask(messages::AdminVerb verb, const std::string& target = {}, double timeout_s = 5,
                               const std::string& value = {});
  // Ends the console session (before the coordinator is stopped).
  void close_console() { console_.forget(); }

  // The learner's row of the last poll (empty: not known).
  nlohmann::json learner(const std::string& id) const;
  std::vector<std::string> learners_on(const std::string& node) const;
  std::vector<std::string> all_learners() const;
  // How many learners have had a contribution merged.
  int contributing() const;
  // The newest committed version seen, in a progress line or the status.
  int64_t last_version() const { return last_version_; }

 private:
  const RunClock& clock_;
  DrillCluster& cluster_;
  std::vector<LossPoint>& loss_;
  LineTail tail_;
  ConsoleClient console_;
  std::map<std::string, nlohmann::json> learners_;
  int64_t last_version_ = 0;
};

}  // namespace archipelago::apps::drill

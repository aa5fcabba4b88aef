// Recent events of a run, for operators (console `events`, the status page): learner deaths,
// restarts and rejoins, slots given up, rejected updates, operator commands. A bounded ring of the
// newest 256; an event is also a log line where it happens. Any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace archipelago::actors {

class EventLog {
 public:
  // kind: "death", "restart", "rejoin", "given_up", "finished", "rejected", "command", ...
  void add(const std::string& kind, const std::string& subject, const std::string& detail);
  // The newest `count`, oldest first: [{sequence, unix_ms, kind, subject, detail}].
  nlohmann::json recent(size_t count) const;
  uint64_t total() const;

 private:
  static constexpr size_t kCapacity = 256;
  mutable std::mutex mutex_;
  std::deque<nlohmann::json> entries_;
  uint64_t sequence_ = 0;
};

}  // namespace archipelago::actors

#include "actors/events.hpp"

#include <chrono>

namespace archipelago::actors {

void EventLog::add(const std::string& kind, const std::string& subject, const std::string& detail) {
  const int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  entries_.push_back({{"sequence", ++sequence_}, {"unix_ms", unix_ms}, {"kind", kind}, {"subject", subject},
                      {"detail", detail}});
  if (entries_.size() > kCapacity) entries_.pop_front();
}

nlohmann::json EventLog::recent(size_t count) const {
  std::lock_guard lock(mutex_);
  nlohmann::json out = nlohmann::json::array();
  const size_t first = entries_.size() > count ? entries_.size() - count : 0;
  for (size_t i = first; i < entries_.size(); ++i) out.push_back(entries_[i]);
  return out;
}

uint64_t EventLog::total() const {
  std::lock_guard lock(mutex_);
  return sequence_;
}

}  // namespace archipelago::actors

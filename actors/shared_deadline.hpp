// A deadline its owner may move while others read it: a node that takes a restarted coordinator's
// new train.max_seconds moves its learners' end without restarting them. One atomic; any thread.
#pragma once

#include <atomic>
#include <chrono>

namespace archipelago::actors {

class SharedDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SharedDeadline(Clock::time_point at = Clock::time_point::max()) : at_(at.time_since_epoch().count()) {}
  void move_to(Clock::time_point at) { at_.store(at.time_since_epoch().count(), std::memory_order_relaxed); }
  Clock::time_point at() const { return Clock::time_point(Clock::duration(at_.load(std::memory_order_relaxed))); }

 private:
  std::atomic<Clock::rep> at_;
};

}  // namespace archipelago::actors

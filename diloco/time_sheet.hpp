// A learner incarnation's time sheet: from its start, every moment on its clock is charged to the
// one activity it was doing, or to none when the learner itself was not running (its thread idle
// between two messages in the middle of training, descheduled, or the process frozen: time only the
// goodput ledger's `unaccounted` can show). Activities are disjoint by construction: switching to
// one closes the previous one at the same instant, so the sums never overlap.
//
//   recovering ── first inner step ──> computing ⇄ throttled ⇄ overhead ⇄ (unseen between messages)
//                                        waiting (round barrier, drain), paused (operator): intervals
//
// Pure (times are the caller's seconds on one monotonic clock); one owner (the learner actor).
#pragma once

#include <array>

namespace archipelago::diloco {

enum class Activity { unseen, recovering, computing, throttled, waiting, paused, overhead };
inline constexpr int kActivities = 7;

class TimeSheet {
 public:
  // The incarnation starts at `now`, doing `first`.
  explicit TimeSheet(double now, Activity first = Activity::recovering) : current_(first), since_(now) {}

  // From `now` on it does `next`: the time since the last switch is charged to what it did.
  void switch_to(Activity next, double now);
  Activity current() const { return current_; }
  // Seconds charged to `activity` up to `now`, the one in progress counted to `now`.
  double seconds(Activity activity, double now) const;

 private:
  std::array<double, kActivities> sums_{};
  Activity current_;
  double since_;
};

}  // namespace archipelago::diloco

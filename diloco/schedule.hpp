// When a learner sends each fragment: the staggered schedule of Streaming DiLoCo (fragment p is
// due every H steps from offset p·H/P), its changes of H during a run, and async mode's dynamic
// local steps. Every learner evaluates the same functions of its own step count, and the syncer
// the same ones of the steps an update reports, so their slots agree. Pure; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.hpp"

namespace archipelago::diloco {

// ---- Fragment schedule (Streaming DiLoCo) -------------------------------------------------------
// Offset of fragment p among P with period H: p·H/P (all zero in sync mode).
int fragment_offset(int fragment, int fragments, int inner_steps, bool staggered);
// True when fragment p is due after the learner completed `step` inner steps (step >= 1):
// step >= offset_p and (step − offset_p) mod H == 0 (so fragment p > 0 first syncs after offset_p steps).
bool fragment_due(int64_t step, int fragment, int fragments, int inner_steps, bool staggered);

// Smallest step > `step` at which fragment p is due (where a restarted learner's schedule resumes).
int64_t next_due_step(int64_t step, int fragment, int fragments, int inner_steps, bool staggered);

// The schedule of a run as it changes: H from step 0, and the H an operator set from a later step on
// (`set train.inner_steps`). Every learner evaluates the same function of its own step count, so
// their schedule slots stay comparable across a change. Epoch e owns the steps S_e < step <= S_e+1
// (epoch 0 from step 1); within it fragment p is due at local steps t = step − S_e with t >= 1,
// t >= p·H_e/P and (t − p·H_e/P) mod H_e == 0, and its slots continue one past the last slot of
// the epoch before (strictly increasing per fragment). With one epoch this is fragment_due and
// (step − offset_p) / H, exactly.
struct ScheduleEpoch {
  int64_t from_step = 0;  // S_e
  int inner_steps = 0;    // H_e
  bool operator==(const ScheduleEpoch& o) const { return from_step == o.from_step && inner_steps == o.inner_steps; }
};

class FragmentSchedule {
 public:
  FragmentSchedule() = default;
  FragmentSchedule(int inner_steps, int fragments, bool staggered);
  // Epochs as the syncer broadcasts them: the first from step 0, from_step strictly increasing, H >= 1.
  static Expected<FragmentSchedule> from_epochs(std::vector<ScheduleEpoch> epochs, int fragments, bool staggered);

  bool due(int64_t step, int fragment) const;
  uint64_t slot(int64_t step, int fragment) const;     // the schedule slot of an update sent after `step` steps
  int64_t next_due(int64_t step, int fragment) const;  // smallest step > `step` at which it is due
  int period_at(int64_t step) const;                   // H of the epoch that owns step + 1
  // Appends H from `from_step` on (after the last epoch's start); errors: H < 1, from_step too early.
  Status change(int64_t from_step, int inner_steps);
  const std::vector<ScheduleEpoch>& epochs() const { return epochs_; }
  int largest_period() const;                          // the largest H of any epoch

 private:
  size_t epoch_of(int64_t step) const;
  std::vector<ScheduleEpoch> epochs_;
  int fragments_ = 1;
  bool staggered_ = false;
};

// ---- Dynamic local updates (async mode; Liu et al.'s DyLU) ----------------------------------------
// Inner steps per fragment period for a learner at `own` tokens/s when the fastest active learner
// runs at `fastest`: max(1, round(H · own / fastest)), so slow and fast learners finish their periods
// together (rounded, not floored: the fastest learner's own rate drifts a little below the rate it
// last reported); H when either rate is unknown (<= 0) or the learner is the fastest.
int dynamic_inner_steps(int inner_steps, double own_tokens_per_s, double fastest_tokens_per_s);

}  // namespace archipelago::diloco

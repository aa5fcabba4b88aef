// The syncer's configuration during a run: the options it was started with, the rules its
// fragments' merges follow (FragmentRules), the codec learners encode their updates with, the
// screening rule and the fragment schedule; and an operator's changes to the runtime-tunable keys
// (diloco/tunables.hpp), in effect from the next merge.
//
// Invariant: every value set is within the tunables table's bounds; the schedule only grows by
// epochs that start past every learner's accepted work. Not persisted, except the schedule, which
// every committed version's accounting carries (schedule_json → restore_schedule): a restarted
// syncer starts from the run's configuration again, with the schedule an operator gave it.
// Owned by SyncerCore; one thread.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/fragment_state.hpp"
#include "actors/runtime_options.hpp"
#include "common/error.hpp"
#include "diloco/schedule.hpp"
#include "diloco/screening.hpp"
#include "messages/message_types.hpp"

namespace archipelago::actors {

class SyncerSettings {
 public:
  SyncerSettings(RuntimeOptions options, int fragment_count);

  const RuntimeOptions& options() const { return options_; }
  diloco::Mode mode() const { return mode_; }
  const FragmentRules& rules() const { return rules_; }
  // outer.codec until an operator sets another; every broadcast names it.
  messages::Codec uplink_codec() const { return uplink_; }
  const diloco::Screening& screening() const { return screening_; }
  // train.inner_steps, then each `set train.inner_steps` from its step on.
  const diloco::FragmentSchedule& schedule() const { return schedule_; }
  // configured_tokens_per_step: what one credited inner step is worth.
  int64_t tokens_per_step() const { return tokens_per_step_; }
  // The schedule's epochs for broadcasts: empty until an operator changed H.
  std::vector<messages::InnerStepsFrom> schedule_to_broadcast() const;

  // Applies an operator's `set key value`; returns (old, new) as text, or the error naming the key
  // and why (an old name: the one name). train.inner_steps changes from one period past
  // `leading_step` (the furthest to_step of any learner's accepted work), and is refused in sync
  // and ddp runs.
  Expected<std::pair<std::string, std::string>> set(const std::string& key, const std::string& value,
                                                    uint64_t leading_step);

  // The schedule as a committed version's accounting carries it, and back (a schedule that does
  // not make sense for this run is ignored: the configuration's stays).
  nlohmann::json schedule_json() const;
  void restore_schedule(const nlohmann::json& epochs);

 private:
  RuntimeOptions options_;
  diloco::Mode mode_ = diloco::Mode::sync;
  int fragment_count_ = 0;
  FragmentRules rules_;
  messages::Codec uplink_ = messages::Codec::fp32;
  diloco::Screening screening_;
  diloco::FragmentSchedule schedule_;
  int64_t tokens_per_step_ = 0;
};

}  // namespace archipelago::actors

#include "actors/status.hpp"

#include <stdexcept>

namespace archipelago::actors {
namespace {

// A key that holds the wrong type, with the path to it (outermost key first).
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads j[key] into `out` when j holds the key; a missing key keeps the default.
template <class T>
void read(const nlohmann::json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  try {
    it->get_to(out);
  } catch (const FieldError& e) {
    throw FieldError(std::string(key) + "." + e.what());
  } catch (const nlohmann::json::exception&) {
    throw FieldError(std::string(key) + " holds the wrong type (" + it->type_name() + ")");
  }
}

}  // namespace

// One list of fields per status: both directions of its JSON are made from it, so the two can
// never name a field differently.
#define ARCHIPELAGO_TO_JSON(field) j[#field] = s.field;
#define ARCHIPELAGO_FROM_JSON(field) read(j, #field, s.field);
#define ARCHIPELAGO_STATUS_JSON(Type, FIELDS)                                      \
  void to_json(nlohmann::json& j, const Type& s) {                                 \
    j = nlohmann::json::object();                                                  \
    FIELDS(ARCHIPELAGO_TO_JSON)                                                    \
  }                                                                                \
  void from_json(const nlohmann::json& j, Type& s) {                               \
    if (!j.is_object()) throw FieldError(std::string("not an object: ") + #Type); \
    FIELDS(ARCHIPELAGO_FROM_JSON)                                                  \
  }

#define STORE_FIELDS(F) \
  F(commits) F(failed_commits) F(bytes_received) F(bytes_served) F(bytes_served_learners) F(fragments_held) F(serves) \
  F(latest_version)
ARCHIPELAGO_STATUS_JSON(StoreStatus, STORE_FIELDS)

#define EVALUATION_POINT_FIELDS(F) F(version) F(heldout_loss) F(heldout_bits_per_byte) F(elapsed_s) F(eval_s)
ARCHIPELAGO_STATUS_JSON(EvaluationPoint, EVALUATION_POINT_FIELDS)

#define EVALUATOR_FIELDS(F) \
  F(scored_version) F(heldout_loss) F(heldout_bits_per_byte) F(heldout_bytes_per_token) F(held_version) F(curve) \
  F(best_version) F(best_heldout_loss)
ARCHIPELAGO_STATUS_JSON(EvaluatorStatus, EVALUATOR_FIELDS)

#define SLOT_TIMES_FIELDS(F) \
  F(lifetime_s) F(alive_s) F(recovery_s) F(compute_s) F(wait_s) F(paused_s) F(restarting_s) F(throttled_s) \
  F(overhead_s) F(sent_compute_s) F(held_compute_s) F(left_compute_s) F(idle_s)
ARCHIPELAGO_STATUS_JSON(SlotTimesStatus, SLOT_TIMES_FIELDS)

#define MONITOR_LEARNER_FIELDS(F)                                                                              \
  F(state) F(liveness) F(incarnation) F(step) F(tokens_per_s) F(deaths) F(deaths_silence) F(deaths_exit) \
  F(suspicions_withdrawn) F(stalled) F(mean_interval_s) F(timeout_s) F(last_reason) F(heartbeat_age_s)  \
  F(nonfinite_recoveries) F(train_loss)
ARCHIPELAGO_STATUS_JSON(MonitorLearnerStatus, MONITOR_LEARNER_FIELDS)

#define MONITOR_SLOT_FIELDS(F) F(state) F(incarnation) F(restarts) F(report_age_s) F(times)
ARCHIPELAGO_STATUS_JSON(MonitorSlotStatus, MONITOR_SLOT_FIELDS)

#define MONITOR_FIELDS(F) \
  F(alive) F(learners) F(slots) F(heartbeats) F(learner_nonfinite_recoveries) F(heartbeat_bytes) F(train_loss)
ARCHIPELAGO_STATUS_JSON(MonitorStatus, MONITOR_FIELDS)

#define SUPERVISOR_CHILD_FIELDS(F) \
  F(state) F(incarnation) F(restarts) F(last_step) F(steps_computed) F(downtime_s) F(recovery_s) F(last_reason)
void to_json(nlohmann::json& j, const SupervisorChildStatus& s) {
  j = nlohmann::json::object();
  SUPERVISOR_CHILD_FIELDS(ARCHIPELAGO_TO_JSON)
  if (s.times) j["times"] = *s.times;  // absent, not null, where a supervisor has no slots
}
void from_json(const nlohmann::json& j, SupervisorChildStatus& s) {
  SUPERVISOR_CHILD_FIELDS(ARCHIPELAGO_FROM_JSON)
  read(j, "times", s.times);
}

#define SUPERVISOR_FIELDS(F)                                                                                 \
  F(name) F(children) F(restarts) F(running) F(finished) F(failed) F(restarting) F(downtime_s) F(recovery_s) \
  F(failed_idle_s) F(steps_computed)
ARCHIPELAGO_STATUS_JSON(SupervisorStatus, SUPERVISOR_FIELDS)

#define LEARNER_ACCOUNTING_FIELDS(F)                                                                    \
  F(contributions_merged) F(contributions_rejected) F(step_equivalents_merged) F(step_equivalents_rejected) \
  F(compute_merged_s) F(compute_rejected_s) F(steps_merged_fragment0) F(tokens_merged) F(joins) F(received_until)
ARCHIPELAGO_STATUS_JSON(LearnerAccounting, LEARNER_ACCOUNTING_FIELDS)

#define SYNCER_ACCOUNTING_FIELDS(F) \
  F(learners) F(rejected) F(claims_corrected) F(bytes_from_learners) F(bytes_to_learners) F(schedule)
ARCHIPELAGO_STATUS_JSON(SyncerAccounting, SYNCER_ACCOUNTING_FIELDS)

#define SYNCER_LEARNER_FIELDS(F)                                                                                 \
  LEARNER_ACCOUNTING_FIELDS(F) F(active) F(finished) F(joined_version) F(joined_s) F(first_merge_after_join_s) \
  F(tokens_per_s) F(staleness) F(rounds_missed)
ARCHIPELAGO_STATUS_JSON(SyncerLearnerStatus, SYNCER_LEARNER_FIELDS)

#define SHARD_FIELDS(F) F(index) F(count) F(fragments) F(share)
ARCHIPELAGO_STATUS_JSON(ShardStatus, SHARD_FIELDS)

#define SYNCER_TIMINGS_FIELDS(F) F(step_s) F(quorum_s) F(sync_s)
ARCHIPELAGO_STATUS_JSON(SyncerTimings, SYNCER_TIMINGS_FIELDS)

#define SCREENING_FIELDS(F) \
  F(mode) F(clip) F(refuse) F(clipped) F(refused) F(held) F(unscreened) F(median_norm_per_lr) F(largest_passed_ratio) \
  F(max_ratio) F(bounded) F(probation_clipped) F(largest_delta_ratio) F(largest_norm_growth)
ARCHIPELAGO_STATUS_JSON(ScreeningStatus, SCREENING_FIELDS)

#define SYNCER_FIELDS(F)                                                                                            \
  F(mode) F(shard) F(outer_lr) F(outer_momentum) F(quorum) F(version) F(commits) F(failed_commits)                \
  F(merged_contributions) F(commit_in_flight) F(fragments_in_flight) F(pending) F(active_learners)               \
  F(fragment_versions) F(fragment_commits) F(open_rounds) F(downlink_codec) F(uplink_codec) F(updates_by_codec) \
  F(updates_by_period) F(inner_steps) F(outer_optimizer) F(train_loss) F(grace_s) F(timings) F(rejected)         \
  F(rejected_total) F(claims_corrected) F(bytes_from_learners) F(bytes_to_learners) F(screening) F(pending_bytes) \
  F(fold_s) F(learners) F(accounting) F(phase) F(bytes_to_store) F(deferred) F(initial_parameters)
ARCHIPELAGO_STATUS_JSON(SyncerStatus, SYNCER_FIELDS)

int64_t SyncerStatus::tokens_merged() const {
  int64_t total = 0;
  for (const auto& [id, learner] : learners) total += learner.tokens_merged;
  return total;
}

}  // namespace archipelago::actors

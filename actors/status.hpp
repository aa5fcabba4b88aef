// What each actor answers to "status", as typed values.
//
// An actor fills its status struct and sends it inside an AdminReply as JSON (the wire form of a
// status, as the encoding of any value that crosses a mailbox or a link); whoever reads it decodes
// it once with decode_status<T> and then reads fields. The console, the metrics endpoint and
// `--json` show the JSON; no other code looks a status field up by name.
//
// The JSON keys are the field names below. Decoding is lenient about what is missing (a field an
// older peer did not send keeps its default) and strict about what is there: a key holding the
// wrong type is a clear error naming it. A value that may be unknown (a loss before the first
// evaluation, a heartbeat age before the first heartbeat) is a std::optional, null in JSON.
// No CAF, no torch: a header any folder above actors/ may read.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace nlohmann {
template <class T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& v) { j = v ? json(*v) : json(nullptr); }
  static void from_json(const json& j, std::optional<T>& v) {
    if (j.is_null()) v.reset();
    else v = j.get<T>();
  }
};
}  // namespace nlohmann

namespace archipelago::actors {

// A measured value, or none where it is NaN or infinite (null in JSON).
inline std::optional<double> if_finite(double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; }

// ---- the checkpoint store (store_actor.hpp) ---------------------------------------------------
struct StoreStatus {
  int64_t commits = 0;
  int64_t failed_commits = 0;
  int64_t bytes_received = 0;         // from the syncer
  int64_t bytes_served = 0;           // to joining learners, the evaluator and restoring syncers
  int64_t bytes_served_learners = 0;  // of which to learners
  int64_t fragments_held = 0;         // fragments a requester already held: not sent
  int64_t serves = 0;
  uint64_t latest_version = 0;
};

// ---- the evaluator (evaluator.hpp) ------------------------------------------------------------
struct EvaluationPoint {
  uint64_t version = 0;
  std::optional<double> heldout_loss;
  std::optional<double> heldout_bits_per_byte;
  double elapsed_s = 0;  // since the evaluator started
  double eval_s = 0;     // how long scoring took
};
struct EvaluatorStatus {
  uint64_t scored_version = 0;  // 0: nothing scored yet
  std::optional<double> heldout_loss;
  std::optional<double> heldout_bits_per_byte;
  double heldout_bytes_per_token = 0;
  uint64_t held_version = 0;
  std::vector<EvaluationPoint> curve;
  // The best version scored so far (lowest held-out loss; 0: none) and its loss: a run's result is
  // its last committed version, and final − best says what the last rounds cost.
  uint64_t best_version = 0;
  std::optional<double> best_heldout_loss;

  bool scored() const { return scored_version > 0 && heldout_loss.has_value(); }
};

// ---- slots, as supervisors report them and the failure monitor banks them ---------------------
// A learner slot's times (messages::SlotReport's), the inputs of the goodput ledger.
struct SlotTimesStatus {
  double lifetime_s = 0;
  double alive_s = 0;
  double recovery_s = 0;
  double compute_s = 0;
  double wait_s = 0;
  double paused_s = 0;
  double restarting_s = 0;
  double throttled_s = 0;
  double overhead_s = 0;
  double sent_compute_s = 0;
  double held_compute_s = 0;
  double left_compute_s = 0;
  double idle_s = 0;
};

// ---- the failure monitor (failure_monitor.hpp) ------------------------------------------------
struct MonitorLearnerStatus {
  std::string state;     // as shown: alive, suspect, dead, paused, finished, ...
  std::string liveness;  // the detector's
  uint32_t incarnation = 0;
  uint64_t step = 0;
  double tokens_per_s = 0;
  int64_t deaths = 0;              // declared deaths: deaths_silence + deaths_exit
  int64_t deaths_silence = 0;      // ... for silence (a frozen process, a cut link)
  int64_t deaths_exit = 0;         // ... for an exit (a crash, a kill): one per incarnation, whatever else was seen
  int64_t suspicions_withdrawn = 0;  // declared dead for silence, then heard again: not a death
  bool stalled = false;            // beating, but no inner step for runtime.stall_factor x its step time
  double mean_interval_s = 0;
  double timeout_s = 0;
  std::string last_reason;
  std::optional<double> heartbeat_age_s;  // none before the first heartbeat
  std::optional<double> train_loss;       // its recent inner steps' cross-entropy (heartbeats); none before
  int64_t nonfinite_recoveries = 0;
};
struct MonitorSlotStatus {
  std::string state;  // slot_state_name
  uint32_t incarnation = 0;
  uint32_t restarts = 0;
  double report_age_s = 0;
  SlotTimesStatus times;
};
struct MonitorStatus {
  int alive = 0;
  std::map<std::string, MonitorLearnerStatus> learners;
  std::map<std::string, MonitorSlotStatus> slots;
  int64_t heartbeats = 0;
  int64_t learner_nonfinite_recoveries = 0;
  int64_t heartbeat_bytes = 0;
  // The mean of the learners' recent train losses (alive or finished; none before a first step).
  std::optional<double> train_loss;
};

// ---- a supervisor (supervisor.hpp) ------------------------------------------------------------
struct SupervisorChildStatus {
  std::string state;  // running, restarting, finished, failed
  uint32_t incarnation = 0;
  int64_t restarts = 0;
  int64_t last_step = 0;
  int64_t steps_computed = 0;
  double downtime_s = 0;
  double recovery_s = 0;
  std::string last_reason;
  std::optional<SlotTimesStatus> times;  // a supervisor of learner slots only
};
struct SupervisorStatus {
  std::string name;
  std::map<std::string, SupervisorChildStatus> children;
  int64_t restarts = 0;
  int running = 0;
  int finished = 0;
  int failed = 0;
  int restarting = 0;
  double downtime_s = 0;
  double recovery_s = 0;
  double failed_idle_s = 0;
  int64_t steps_computed = 0;

  bool all_ended() const { return running == 0 && restarting == 0; }
};

// ---- the syncer (syncer.hpp) ------------------------------------------------------------------
// What the syncer has counted of one learner's work: persisted with every version (the manifest's
// accounting.learners) so a restarted syncer goes on counting.
struct LearnerAccounting {
  int64_t contributions_merged = 0;
  int64_t contributions_rejected = 0;
  double step_equivalents_merged = 0;
  double step_equivalents_rejected = 0;
  double compute_merged_s = 0;
  double compute_rejected_s = 0;
  int64_t steps_merged_fragment0 = 0;
  int64_t tokens_merged = 0;
  int64_t joins = 0;
  std::vector<uint64_t> received_until;  // per fragment: the last inner step received
};
// What every committed version's manifest carries of the syncer's counting (its `accounting`): a
// restarted syncer, a resumed run and a restarted coordinator go on from it.
struct SyncerAccounting {
  std::map<std::string, LearnerAccounting> learners;
  std::map<std::string, int64_t> rejected;  // by reason
  int64_t claims_corrected = 0;
  int64_t bytes_from_learners = 0;
  int64_t bytes_to_learners = 0;
  nlohmann::json schedule = nlohmann::json::array();  // the schedule's epochs (SyncerSettings::schedule_json)
};
// A learner as the syncer sees it now: its accounting and its membership.
struct SyncerLearnerStatus : LearnerAccounting {
  bool active = false;
  bool finished = false;
  uint64_t joined_version = 0;
  double joined_s = -1;
  double first_merge_after_join_s = -1;  // -1: nothing merged since it (re)joined
  double tokens_per_s = 0;
  int64_t staleness = -1;  // of its last merged update; -1: none merged yet
  int64_t rounds_missed = 0;  // sync rounds merged at their deadline without it
};
struct ShardStatus {
  int index = 0;
  int count = 1;
  std::vector<int> fragments;
  double share = 1;  // of the model's parameters (unsharded: exactly 1)
};
struct SyncerTimings {
  double step_s = 0;
  double quorum_s = 0;
  double sync_s = 0;
};
struct ScreeningStatus {
  std::string mode;
  double clip = 0;
  double refuse = 0;
  int64_t clipped = 0;  // outliers: past outer.screen_clip medians (a newcomer's first update is probation_clipped)
  int64_t refused = 0;
  int64_t held = 0;
  int64_t unscreened = 0;
  std::vector<double> median_norm_per_lr;
  std::vector<double> largest_passed_ratio;  // per fragment
  double max_ratio = 0;                       // outer.screen_max_ratio
  int64_t bounded = 0;                        // updates brought down to it
  int64_t probation_clipped = 0;              // a learner's first update of a fragment clipped to outer.screen_probation medians (not in clipped)
  std::vector<double> largest_delta_ratio;    // per fragment: the largest ‖Δ_p‖ / ‖θ_p‖ received
  std::vector<double> largest_norm_growth;    // per fragment: the largest ‖θ_p‖ growth of a merge committed
};
struct SyncerStatus {
  std::string mode;
  ShardStatus shard;
  double outer_lr = 0;
  double outer_momentum = 0;
  int quorum = 0;
  uint64_t version = 0;
  int64_t commits = 0;
  int64_t failed_commits = 0;
  int64_t merged_contributions = 0;
  bool commit_in_flight = false;
  std::vector<int> fragments_in_flight;
  int64_t pending = 0;
  int active_learners = 0;
  std::vector<uint64_t> fragment_versions;
  std::vector<int64_t> fragment_commits;
  std::vector<uint64_t> open_rounds;
  std::string downlink_codec;
  std::string uplink_codec;
  std::map<std::string, int64_t> updates_by_codec;
  std::map<std::string, int64_t> updates_by_period;
  int inner_steps = 0;
  std::string outer_optimizer;
  double train_loss = 0;
  double grace_s = 0;
  SyncerTimings timings;
  std::map<std::string, int64_t> rejected;  // by reason
  int64_t rejected_total = 0;
  int64_t claims_corrected = 0;
  int64_t bytes_from_learners = 0;
  int64_t bytes_to_learners = 0;
  ScreeningStatus screening;
  int64_t pending_bytes = 0;
  double fold_s = 0;
  std::map<std::string, SyncerLearnerStatus> learners;
  SyncerAccounting accounting;  // what the next manifest persists
  // The actor's, around its core's:
  std::string phase;  // initializing, restoring, ready
  int64_t bytes_to_store = 0;
  int64_t deferred = 0;
  std::string initial_parameters;  // held, released

  bool settled() const { return pending == 0 && !commit_in_flight && phase == "ready"; }
  int64_t tokens_merged() const;  // every learner's
};

void to_json(nlohmann::json& j, const StoreStatus& s);
void from_json(const nlohmann::json& j, StoreStatus& s);
void to_json(nlohmann::json& j, const EvaluationPoint& s);
void from_json(const nlohmann::json& j, EvaluationPoint& s);
void to_json(nlohmann::json& j, const EvaluatorStatus& s);
void from_json(const nlohmann::json& j, EvaluatorStatus& s);
void to_json(nlohmann::json& j, const SlotTimesStatus& s);
void from_json(const nlohmann::json& j, SlotTimesStatus& s);
void to_json(nlohmann::json& j, const MonitorLearnerStatus& s);
void from_json(const nlohmann::json& j, MonitorLearnerStatus& s);
void to_json(nlohmann::json& j, const MonitorSlotStatus& s);
void from_json(const nlohmann::json& j, MonitorSlotStatus& s);
void to_json(nlohmann::json& j, const MonitorStatus& s);
void from_json(const nlohmann::json& j, MonitorStatus& s);
void to_json(nlohmann::json& j, const SupervisorChildStatus& s);
void from_json(const nlohmann::json& j, SupervisorChildStatus& s);
void to_json(nlohmann::json& j, const SupervisorStatus& s);
void from_json(const nlohmann::json& j, SupervisorStatus& s);
void to_json(nlohmann::json& j, const LearnerAccounting& s);
void from_json(const nlohmann::json& j, LearnerAccounting& s);
void to_json(nlohmann::json& j, const SyncerAccounting& s);
void from_json(const nlohmann::json& j, SyncerAccounting& s);
void to_json(nlohmann::json& j, const SyncerLearnerStatus& s);
void from_json(const nlohmann::json& j, SyncerLearnerStatus& s);
void to_json(nlohmann::json& j, const ShardStatus& s);
void from_json(const nlohmann::json& j, ShardStatus& s);
void to_json(nlohmann::json& j, const SyncerTimings& s);
void from_json(const nlohmann::json& j, SyncerTimings& s);
void to_json(nlohmann::json& j, const ScreeningStatus& s);
void from_json(const nlohmann::json& j, ScreeningStatus& s);
void to_json(nlohmann::json& j, const SyncerStatus& s);
void from_json(const nlohmann::json& j, SyncerStatus& s);

// A status as its actor sent it, or why it cannot be one (not an object; a key of the wrong type,
// named). `what` names the actor in the error.
template <class T>
Expected<T> decode_status(const nlohmann::json& j, const std::string& what) {
  if (!j.is_object()) return make_error(ErrorCode::invalid_argument, what + " status: not an object");
  try {
    return j.get<T>();
  } catch (const std::exception& e) {  // a key of the wrong type (its path), or nlohmann's own
    return make_error(ErrorCode::invalid_argument, what + " status: " + e.what());
  }
}

}  // namespace archipelago::actors

// Decisions of the actor runtime as pure functions of (now, state, options) -> decision + reason.
//
// Actors only gather the inputs and act on the answer; every rule lives here so that it is tested
// without actors (tests/actors/policy_test.cpp): the staggered fragment schedule, the work an
// update is credited with (merge weights), the staleness bound, the quorum + adaptive grace
// window, the restart policy (backoff, intensity) and the failure detector's timeout. Times are
// seconds on a monotonic clock. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/runtime_options.hpp"
#include "common/error.hpp"

namespace archipelago::actors {

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

// ---- Credited work: merge weights from what the syncer knows, not from claims ---------------------
// A learner re-sends an update left unanswered for this many of its periods (actors/learner.cpp);
// until then a due fragment waits, so one update can carry that many periods of steps.
inline constexpr int kResendAfterPeriods = 3;
// The most periods one update of a connected learner carries: kResendAfterPeriods, plus one for a
// send off the schedule's beat (a restored learner sends after its first step, a draining one when
// its budget ends).
inline constexpr int kMaxPeriodsPerUpdate = kResendAfterPeriods + 1;

// Tokens a learner trains on per inner step, from the run's configuration (a node runs from the
// coordinator's): batch × seq_len; ddp: × learners, as its one learner averages every shard's batch.
int64_t configured_tokens_per_step(const training::ReferenceSetup& setup);

struct CreditedWork {
  bool accept = false;
  int64_t steps = 0;     // what merge weights, step estimates and the ledger count
  int64_t tokens = 0;
  bool corrected = false;  // accepted, but the claim differed from these figures
  std::string reason;      // why it was refused or corrected
};
// The work an update is credited with, from its claimed inner steps and tokens:
//   steps  = min(claimed steps, kMaxPeriodsPerUpdate · largest_period)
//   tokens = steps · tokens_per_step            (the claimed tokens only decide `corrected`)
// so that no claim outweighs other learners by more than kMaxPeriodsPerUpdate periods of work (a
// claim of 2^40 tokens counts as its steps' worth). A claim of 0 steps is refused: no learner sends
// one, and an update of weight 0 alone would fail its merge. An honest learner's claims equal these
// figures, so its merge weight is unchanged; one that kept training while cut off from the syncer
// sends more periods than the bound and is merged as if it had made kMaxPeriodsPerUpdate.
CreditedWork credit_work(uint64_t claimed_steps, uint64_t claimed_tokens, int largest_period,
                         int64_t tokens_per_step);

// ---- Staleness ------------------------------------------------------------------------------------
struct StalenessDecision {
  bool accept = false;
  int64_t staleness = 0;  // updates of this fragment committed after the base version
  std::string reason;
};
// `commit_versions`: ascending versions at which this fragment changed (the newest is the current
// one). A base above the newest known version is rejected (it cannot come from this syncer).
StalenessDecision check_staleness(uint64_t base_version, const std::vector<uint64_t>& commit_versions,
                                  uint64_t latest_version, int max_staleness);

// ---- Quorum and grace window ----------------------------------------------------------------------
// Exponential moving averages the syncer measures (seconds).
struct SyncTimings {
  double step_s = 0;    // one inner step of a learner
  double quorum_s = 0;  // first arrival of a fragment's round -> quorum reached
  double sync_s = 0;    // merge + commit + broadcast
};
// grace = clamp(γ·(τ·step − quorum − sync), 0, grace_max): how long to wait for more contributors
// after the quorum without making any learner's overlap window (τ steps) run out.
double grace_window(const SyncTimings& timings, const SyncerOptions& options);

enum class MergeAction { wait, wait_until, merge_now };
struct MergeDecision {
  MergeAction action = MergeAction::wait;
  double deadline_s = 0;  // for wait_until
  std::string reason;
};
struct PendingFragment {
  int contributors = 0;        // distinct learners with a pending contribution that counts for the quorum
                               // (decoupled: not behind the fragment's open round; other modes: all)
  int active_learners = 0;     // learners joined and not dead, failed or finished
  int contributors_active = 0; // distinct active learners with any pending contribution (late ones too)
  double quorum_reached_s = -1;  // when `contributors` first reached the quorum; < 0: not yet
  int late = 0;                // distinct learners whose only pending updates are behind the open round:
                               // merged with the round, never counted towards its quorum
};
// mode "sync": merge once every active learner contributed (or none are left and some pending).
// "decoupled" (one merge closes the fragment's round): quorum K' = min(K, active) (at least 1) of
// learners on time for the round; merge at once when every active learner contributed (late ones
// included), else wait `grace_s` after the quorum was reached. "async"/"ddp": every arrival.
MergeDecision decide_merge(const std::string& mode, double now_s, const PendingFragment& pending, int quorum,
                           double grace_s);

// ---- Installing a received global fragment on a learner --------------------------------------------
// `local`: the learner's θ_p; `ref`: the point its unsent work is measured from (its update is
// Δ_p = θ_ref − θ_local, and sending one sets θ_ref ← θ_local); `global`: the new θ_G,p.
//   replace  θ ← θ_G                       (α = 0; the steps taken since the last send are lost)
//   mix      θ ← α·θ + (1−α)·θ_G
//   carry    θ ← θ_G + (θ − θ_ref)          (the unsent steps are kept and go out with the next update)
// Then θ_ref ← θ_G in every mode, so the next update carries exactly what the global does not hold.
enum class InstallMode { replace, mix, carry };
InstallMode install_mode(bool carry_unsent, double alpha);
void install_global(InstallMode mode, double alpha, float* local, float* ref, const float* global, int64_t n);

// ---- Restart policy (one-for-one supervision) -----------------------------------------------------
struct RestartDecision {
  bool restart = false;
  double delay_s = 0;
  std::string reason;
};
// `recent_restarts`: times of earlier restarts of this child. Gives up when R restarts already
// happened within the window T; otherwise restarts after backoff_initial · 2^(restarts in window),
// capped at backoff_max.
RestartDecision decide_restart(double now_s, const std::vector<double>& recent_restarts, const RestartOptions& options);

// ---- Failure detector -----------------------------------------------------------------------------
struct HeartbeatHistory {
  int samples = 0;            // intervals observed
  double mean_interval_s = 0; // EMA of intervals
  double deviation_s = 0;     // EMA of |interval − mean|
  double last_s = -1;         // time of the last heartbeat (< 0: none yet)
  int64_t last_step = -1;     // inner step reported by the last heartbeat
  double last_step_s = -1;    // when `last_step` was first reported
  double step_s = 0;          // EMA of seconds per inner step (0: no step seen yet)
};
// Records a heartbeat arriving at `now_s` that reports inner step `step`.
void observe_heartbeat(HeartbeatHistory& history, double now_s, int64_t step = -1);
// Silence after which the learner is suspected. A learner beats between inner steps, so one step
// must always fit: factor · max(mean + 4·deviation, seconds per step), within [min, max]. Before
// the first inner step (model build, join, state fetch, first step) the maximum applies.
double suspect_timeout(const HeartbeatHistory& history, const DetectorOptions& options);
struct LivenessDecision {
  bool suspected = false;
  std::string reason;
};
LivenessDecision check_liveness(const HeartbeatHistory& history, double now_s, const DetectorOptions& options);

}  // namespace archipelago::actors

// The rules of a merge, as pure functions of (now, state, options) -> decision + reason: the
// work an update is credited with (its merge weight), the staleness bound, the adaptive grace
// window, and when a fragment's pending updates are merged (the quorum, per mode). The syncer only
// gathers the inputs and acts on the answer (actors/syncer_core). Times are seconds on a monotonic
// clock. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diloco/mode.hpp"
#include "diloco/options.hpp"

namespace archipelago::diloco {

// ---- Credited work: merge weights from what the syncer knows, not from claims ---------------------
// A learner re-sends an update left unanswered for this many of its periods (actors/learner.cpp);
// until then a due fragment waits, so one update can carry that many periods of steps.
inline constexpr int kResendAfterPeriods = 3;
// The most periods one update of a connected learner carries: kResendAfterPeriods, plus one for a
// send off the schedule's beat (a restored learner sends after its first step, a draining one when
// its budget ends).
inline constexpr int kMaxPeriodsPerUpdate = kResendAfterPeriods + 1;

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
  double first_arrival_s = -1; // the earliest pending contribution's arrival (< 0: none)
};
// mode "sync": merge once every active learner contributed (or none are left and some pending), or
// once `sync_wait_s` (> 0; sync_round_wait) has passed since the round's first arrival.
// "decoupled" (one merge closes the fragment's round): quorum K' = min(K, active) (at least 1) of
// learners on time for the round; merge at once when every active learner contributed (late ones
// included), else wait `grace_s` after the quorum was reached. "async"/"ddp": every arrival.
MergeDecision decide_merge(diloco::Mode mode, double now_s, const PendingFragment& pending, int quorum,
                           double grace_s, double sync_wait_s = 0);

// How long a sync round may wait after its first arrival: max(min_wait_s, factor × the median of
// `spreads`, the first-to-last arrival spans of recent rounds); min_wait_s when none is known.
double sync_round_wait(const std::vector<double>& spreads, const SyncerOptions& options);

}  // namespace archipelago::diloco

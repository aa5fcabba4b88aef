// The outer optimizer's state and rules, without actors: what the syncer actor (actors/syncer.hpp)
// wraps with messaging. A façade over the parts that each do one job:
//   syncer_settings.hpp   configuration, rules, schedule, an operator's `set`
//   syncer_roster.hpp     learners' records: joins, leaves, activity, credits and charges
//   syncer_admission.hpp  envelope checks and the admission of whole updates (claims, duplicates, staleness)
//   syncer_screen.hpp     screening by norm: pass, clip, hold or refuse
//   syncer_merge.hpp      the streaming merge of a fragment's round: fold, quorum, tally, share
//   syncer_commits.hpp    staged commits, versions, lent values, manifests, digests
//   syncer_restore.hpp    θ0 or a committed version as the fragments' values
//   syncer_rejects.hpp    reject reasons and their counters
// This class owns one FragmentState per fragment (fragment_state.hpp: θ_p, B_p, the outer state,
// versions, the open round, the pending contributions and their running sum) and passes each part
// what it needs; the order of the steps (admit → measure → screen → fold → quorum; settle → stage →
// seal → land) and the counting of every refusal are here.
//
// Fragments commit independently: each has at most one commit in flight, and commits of different
// fragments are under way at once, so a slow commit of one never holds back another's rounds.
// Decoupled mode runs rounds per fragment: an update sent in a schedule slot behind the fragment's
// open round is late; it merges with that round but does not count towards its quorum, so one
// round is at most one outer step, one version and one broadcast of p; a merge of k of the n
// expected learners (active ∪ contributors) is scaled by k/n (diloco/rounds.hpp). Merge weights
// come from the syncer's figures, not the learner's claims (diloco/merge_rules.hpp, credit_work).
//
// Invariants: a fragment's θ_p, B_p and outer state only change through stage() → commit_succeeded(),
// which swaps in the staged value (lent meanwhile: syncer_commits.hpp); a merge that would make any
// value NaN/Inf is dropped in stage() (with the contributions it held, counted as non_finite_merge)
// before anything is lent, and the committed value stays; committed versions are strictly
// increasing; a rejected update changes nothing but counters. A syncer shard (RuntimeOptions::shard)
// merges only its own fragments. Not thread-safe: owned by one syncer actor.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/fragment_state.hpp"
#include "actors/runtime_options.hpp"
#include "actors/status.hpp"
#include "actors/syncer_admission.hpp"
#include "actors/syncer_commits.hpp"
#include "actors/syncer_merge.hpp"
#include "actors/syncer_rejects.hpp"
#include "actors/syncer_roster.hpp"
#include "actors/syncer_screen.hpp"
#include "actors/syncer_settings.hpp"
#include "common/error.hpp"
#include "diloco/merge_rules.hpp"
#include "diloco/schedule.hpp"
#include "diloco/version_manifest.hpp"
#include "messages/message_types.hpp"

namespace archipelago::actors {

class SyncerCore {
 public:
  // With θ of every fragment (the state of version 1 in a fresh run): as hold_initial(initial).
  SyncerCore(RuntimeOptions options, std::vector<std::vector<float>> initial);
  // Without values: `numels` per fragment. A restore (a store holding a version) or hold_initial
  // (an empty store) gives it its values; until then it stages nothing.
  static SyncerCore without_values(RuntimeOptions options, std::vector<int64_t> numels);

  diloco::Mode mode() const { return settings_.mode(); }
  int fragment_count() const { return static_cast<int>(fragments_.size()); }
  int64_t fragment_numel(int p) const { return fragments_[p].numel; }
  uint64_t latest_version() const { return commits_.latest_version(); }
  // Some fragment's commit is under way (staged, not yet committed or failed).
  bool commit_in_flight() const { return commits_.in_flight(); }
  bool fragment_in_flight(int p) const { return commits_.in_flight(p); }
  // Fragments holding contributions not yet merged (an operator's `checkpoint` commits them now).
  std::vector<int> fragments_with_pending() const;
  const FragmentState& fragment(int p) const { return fragments_[p]; }
  const FragmentRules& rules() const { return settings_.rules(); }
  // The codec learners encode their updates with: outer.codec, until an operator sets another; every
  // broadcast names it (GlobalFragment.uplinkCodec). Updates are decoded by the codec they name.
  messages::Codec uplink_codec() const { return settings_.uplink_codec(); }
  // The fragment schedule (diloco/schedule.hpp): train.inner_steps, then each `set train.inner_steps`
  // from a step one period past the leading learner's. Broadcasts carry it once it has changed
  // (empty before), and every committed version's accounting keeps it.
  const diloco::FragmentSchedule& schedule() const { return settings_.schedule(); }
  std::vector<messages::InnerStepsFrom> schedule_to_broadcast() const { return settings_.schedule_to_broadcast(); }

  // ---- restoring -------------------------------------------------------------------------------
  // Gives every fragment θ = B = `initial` and zero outer state. invalid_argument when the sizes
  // are not the fragments'.
  Status hold_initial(std::vector<std::vector<float>> initial);
  // It was given values (hold_initial, or a restore): a stage or a commit may follow.
  bool has_values() const { return has_values_; }
  // Version 1 of a fresh run: the initial parameters, zero momentum. Needs has_values().
  StagedCommit stage_initial(double now_s);
  // An operator's change of a runtime-tunable key (diloco/tunables.hpp: the keys under their
  // configuration names, their bounds; outer.quorum's is the run's learners): validated by that
  // table, then in effect from the next merge (train.inner_steps: from one period past the leading
  // learner, refused in sync and ddp runs). Returns (old, new) as text; the error names the key and
  // why, an old name (syncer.grace_max_s) the one name. Not persisted: a restarted syncer starts
  // from the run's configuration again (the fragment schedule excepted).
  Expected<std::pair<std::string, std::string>> set(const std::string& key, const std::string& value);

  // Loads a committed version (from the checkpoint store): per fragment B_p and the outer-state blob
  // (fragment_state.hpp, to_stored). `manifest` restores the rest of each value and the counters.
  Status restore(uint64_t version, std::vector<std::vector<float>> broadcast,
                 std::vector<std::vector<float>> outer, const diloco::VersionManifest& manifest);

  // ---- learners --------------------------------------------------------------------------------
  messages::Welcome join(const messages::Join& join, double now_s);
  void leave(const std::string& learner_id, bool finished, const std::string& reason, double now_s);
  // Envelope-level checks before a chunk is reassembled: known learner, fresh sequence, shape.
  // Returns the reject reason or nothing.
  std::optional<RejectReason> screen(const std::string& sender_id, uint64_t sequence,
                                     const messages::FragmentUpdate& update);
  // A whole update. Rejects implausible claims (0 steps), stale and duplicate (same learner and base
  // already pending) updates; an accepted one is credited with the syncer's figures (credit_work)
  // and a claim that differed is counted in claims_corrected() and logged once per learner.
  std::optional<RejectReason> accept(const UpdateHeader& header, std::vector<float> delta, double now_s);
  // The same for an update as it came: a quantized one (int8, int4) is normed from its codes and
  // folded while it is decoded, never held decoded unless screening holds it (non_finite or
  // malformed when its scales or size are bad, counted); other codecs arrive decoded in `values`.
  using Payload = UpdatePayload;
  std::optional<RejectReason> accept(const UpdateHeader& header, Payload payload, double now_s);
  // Counts a rejection (from screen, accept or decoding) for `learner_id` (may be unknown).
  void count_reject(RejectReason reason, const std::string& learner_id, double step_equivalents = 0,
                    double compute_s = 0);

  // ---- merging ---------------------------------------------------------------------------------
  // Fragments whose merge is due now (none with a commit in flight); `next_deadline_s` (< 0: none)
  // says when to look again.
  std::vector<int> ready_fragments(double now_s, double* next_deadline_s);
  // Stages new values of the fragments (merge, outer step, downlink) and returns the commit to
  // persist, with a ticket and no version yet; the current values do not change. conflict when one
  // of them has a commit in flight. A fragment whose merge
  // comes out non-finite is left out: its pending contributions are discarded (each counted as
  // non_finite_merge and as rejected work of its learner), logged once, and its committed value
  // stays; non_finite when that leaves nothing to commit.
  Expected<StagedCommit> stage(const std::vector<int>& fragments, double now_s);
  // Chooses the version of a staged commit whose blobs are durable (the next number) and makes its
  // manifest from the state now: the other fragments as committed, the learners' accounting with
  // this commit's credits, the byte counters on the learner links. One sealed commit at a time: the
  // next is sealed once this one landed or failed, so each record carries what the one before it
  // committed.
  void seal(StagedCommit& commit, double now_s);
  // Swaps the staged values in (the commit's broadcasts may go out now). Empties `commit.fragments`' values.
  void commit_succeeded(StagedCommit& commit, double now_s);
  // A failed commit stays staged and in flight under a new ticket, for the caller to send again
  // (its version is chosen again at its next seal); a failed initial commit hands its values back.
  void commit_failed(StagedCommit& commit, const std::string& reason);

  // ---- reporting -------------------------------------------------------------------------------
  SyncerStatus status(double now_s) const;  // the core's part (the actor adds its phase and queues)
  // Per fragment: version and digest of B_p (receivers' copies must match), digest of the stored
  // outer-state blob (the store's copy of that version must match) and Delayed Nesterov's count.
  nlohmann::json broadcast_digests() const { return commits_.broadcast_digests(fragments_); }
  const std::map<std::string, LearnerRecord>& learners() const { return roster_.records(); }
  const RejectCounters& rejects() const { return rejects_; }
  // Accepted updates whose claimed steps or tokens differed from what they were credited with.
  int64_t claims_corrected() const { return admission_.claims_corrected(); }
  const diloco::SyncTimings& timings() const { return timings_; }
  // Screening's figures: mode, bounds, counts, and per fragment the median and the largest ratio
  // an update passed with (how close honest updates come to being clipped).
  ScreeningStatus screening_status() const;
  // Bytes the pending updates hold: the running sums and the deltas held (screening, Delayed Nesterov).
  int64_t pending_bytes() const;
  double grace_s() const { return diloco::grace_window(timings_, settings_.options().syncer); }
  int active_learners() const { return roster_.active_count(); }
  // The highest throughput among active learners (0: none reported): async mode's dynamic local steps.
  double fastest_tokens_per_s() const { return roster_.fastest_tokens_per_s(); }

  // Bytes on the learner links, counted by the syncer actor and persisted with every manifest.
  int64_t bytes_from_learners = 0;
  int64_t bytes_to_learners = 0;
  std::map<std::string, int64_t> updates_by_codec;  // accepted updates by the codec they came in (this process)
  std::map<std::string, int64_t> updates_by_period;  // ... and by their inner steps (the schedule's H)

 private:
  struct Sizes {
    std::vector<int64_t> numels;
  };
  SyncerCore(Sizes sizes, RuntimeOptions options);  // sizes first: never chosen for a brace list

  const RuntimeOptions& options() const { return settings_.options(); }
  // Fragment p's share of the model's parameters (a contribution's step equivalents).
  double fragment_share(int p) const;
  void count(const Rejection& rejection, const std::string& learner_id);
  // Marks when fragment p's on-time contributors reached the quorum (and records the quorum time).
  void update_quorum(int p, double now_s);
  // Judges fragment p's held contributions (before a merge), folding or refusing each.
  void settle_held(int p, double now_s);
  // Discards fragment p's pending contributions after their merge came out non-finite (`why`).
  // A sync merge of fragment p: the round's first-to-last arrival spread (sync_spreads_), and every
  // active learner without a contribution in it counted as having missed the round.
  void note_sync_round(int p);
  // Drops fragment p's pending merge (non-finite, or a norm jump), counting each contribution as `reason`.
  void drop_unsafe_merge(int p, RejectReason reason, const std::string& why, double now_s);
  // Credits a commit's merged contributions to their learners in `roster`.
  void credit(LearnerRoster& roster, const StagedCommit& commit, double now_s) const;
  // The counters a committed version carries (with `roster`'s learners), and back.
  SyncerAccounting accounting(const LearnerRoster& roster) const;
  // A manifest's accounting (its JSON); an error, naming the key, leaves the counters as they were.
  Status restore_accounting(const nlohmann::json& accounting);

  SyncerSettings settings_;
  std::vector<FragmentState> fragments_;
  int64_t total_numel_ = 0;
  bool has_values_ = false;
  LearnerRoster roster_;
  RejectCounters rejects_;
  UpdateAdmission admission_;
  NormScreen screen_;
  CommitBook commits_;
  diloco::SyncTimings timings_;
  static constexpr size_t kSyncSpreads = 16;  // sync rounds whose spread the round deadline follows
  std::vector<double> sync_spreads_;
  double fold_s_ = 0;  // seconds accept() spent on norms and folds (bench/syncer)
};

}  // namespace archipelago::actors

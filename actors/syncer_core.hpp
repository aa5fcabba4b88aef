// The outer optimizer's state and rules, without actors: what the syncer actor (actors/syncer.hpp)
// wraps with messaging. Kept apart so it can be unit-tested and, later, sharded by fragment.
//
// State: one FragmentState value per fragment (actors/fragment_state.hpp: θ_p, B_p, the whole
// outer-optimizer state, versions, the open round, pending contributions) plus the learners' records
// and counters. Fragments commit independently: each fragment has at most one commit in flight, and
// commits of different fragments are under way at once, so a slow commit of one never holds back
// another's rounds. A commit is made in two steps: stage() merges (the ticket's blobs then go to the
// store), seal() chooses its version and manifest once those blobs are durable. A model version is
// the vector of its fragments' versions (`fragment_versions` in every manifest); the global
// `version` numbers the records in the order they land, each carrying the fragments it did not
// change from the one before. Decoupled mode runs rounds per fragment: an update sent in a schedule
// slot behind the fragment's open round is late; it merges with that round but does not count
// towards its quorum, so one round is at most one outer step, one version and one broadcast of p.
// In decoupled mode a merge of k of the n expected learners (active ∪ contributors) is scaled by
// k/n, so a period merged in pieces moves θ as far as one merged at once.
//
// Merge weights come from the syncer's figures, not from the learner's claims: an update is credited
// with min(claimed steps, kMaxPeriodsPerUpdate · H) steps of the configured tokens per step
// (diloco/merge_rules.hpp, credit_work); the tokens it claims are never used. Honest claims equal these figures.
//
// Invariants: a fragment's θ_p, B_p and outer state only change through stage() → commit_succeeded(),
// which swaps in the staged value. Memory: stage() makes the new value and then lets the committed
// one's θ_p, B_p and outer state go (the fragment is *lent* while its commit is in flight: its stored
// entry and digests are kept, its values are the staged ones), so that a fragment is held about
// once plus the one fragment being staged, not twice. A commit that fails therefore stays staged and
// is sent again (commit_failed gives it a new ticket): nobody has seen its value yet, so landing
// later is the same as landing slowly. The initial commit is the exception: its values are handed
// back (it failed because the store holds a version, which a restore then loads). A merge that
// would make any value NaN/Inf is dropped in stage() (with the contributions it held, counted as
// non_finite_merge) before anything is lent, and the committed value stays; at most one commit per
// fragment is in flight, and one sealed commit at a time; committed versions are strictly
// increasing; a rejected update changes nothing but a counter.
// A syncer shard (RuntimeOptions::shard) merges only its own fragments and, once version 1 (or the
// version it restored) is committed, holds no values of the others: its records carry them.
// Not thread-safe: owned by one syncer actor.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/fragment_state.hpp"
#include "diloco/merge_rules.hpp"
#include "diloco/schedule.hpp"
#include "actors/runtime_options.hpp"
#include "common/error.hpp"
#include "messages/message_types.hpp"
#include "training/outer.hpp"

namespace archipelago::actors {

// Why an update was refused; each class has its own counter. implausible_claim: it claims 0 inner
// steps (diloco/merge_rules.hpp, credit_work). non_finite_merge: the merge it was part of came out NaN/Inf and
// was dropped with every contribution it held (SyncerCore::stage). not_owner: its fragment belongs
// to another syncer shard (RuntimeOptions::shard).
enum class RejectReason {
  stale, duplicate, unknown_learner, wrong_shape, non_finite, malformed, unauthenticated, implausible_claim,
  non_finite_merge, outlier, not_owner,
};
inline constexpr RejectReason kRejectReasons[] = {
    RejectReason::stale,      RejectReason::duplicate,       RejectReason::unknown_learner,
    RejectReason::wrong_shape, RejectReason::non_finite,     RejectReason::malformed,
    RejectReason::unauthenticated, RejectReason::implausible_claim, RejectReason::non_finite_merge,
    RejectReason::outlier,    RejectReason::not_owner,
};
const char* to_string(RejectReason reason);
// What a message or tensor that did not decode is refused as: non_finite or malformed.
RejectReason reject_reason_of(const Error& error);

struct RejectCounters {
  std::map<std::string, int64_t> by_reason;  // reason name -> count
  int64_t total() const;
};

struct LearnerRecord {
  std::string id;
  bool active = false;            // joined and not dead / finished since
  bool finished = false;
  uint64_t last_sequence = 0;     // of the current incarnation (reset by Join)
  uint64_t joined_version = 0;    // committed version when it last joined
  double joined_s = -1;
  double first_merge_after_join_s = -1;  // first commit carrying its work after its last join
  int64_t joins = 0;
  int64_t contributions_merged = 0;
  int64_t contributions_rejected = 0;
  double step_equivalents_merged = 0;    // Σ inner steps × fragment share over merged contributions
  double step_equivalents_rejected = 0;
  double compute_merged_s = 0;           // Σ compute seconds of merged contributions (goodput)
  double compute_rejected_s = 0;         // ... of refused updates
  int64_t steps_merged_fragment0 = 0;    // data position hint for --resume
  int64_t tokens_merged = 0;
  double tokens_per_s = 0;               // its throughput, as its last update reported it
  int64_t last_staleness = -1;           // of its last merged contribution (-1: none yet)
  std::vector<int64_t> last_round;       // per fragment: schedule slot of its last accepted update (-1: none)
  std::vector<uint64_t> received_until;  // per fragment: to_step of its last accepted update (0: none); persisted
};

// One commit being made durable: the staged value of every merged fragment and, once sealed, its
// version and manifest.
struct StagedCommit {
  uint64_t ticket = 0;    // names it at the store before it has a version
  uint64_t version = 0;   // 0 until seal()
  bool initial = false;   // the initial parameters (stage_initial)
  std::vector<StagedFragment> fragments;
  nlohmann::json manifest;  // made by seal()
  double started_s = 0;
  int attempts = 0;          // failed attempts so far (commit_failed)
  double resend_at_s = -1;   // a failed commit waits until then to be sent again (−1: sent)
  double handed_s = -1;      // when its last chunk went to the store: its timeout counts from then
                             // (its chunks wait their turn behind other commits' first; −1: not yet)

  std::vector<int> fragment_ids() const;
  const StagedFragment* find(int fragment) const;
};

// What an accepted update header must carry (one whole, reassembled tensor).
struct UpdateHeader {
  std::string learner_id;
  uint32_t fragment = 0;
  uint64_t base_version = 0;
  uint32_t inner_steps = 0;
  uint64_t tokens = 0;
  float train_loss = 0;
  uint64_t round = 0;
  uint64_t from_step = 0;  // the learner's data positions the work spans
  uint64_t to_step = 0;
  double compute_s = 0;    // the compute time behind it (the goodput ledger)
};

// Screening of updates by norm (outer.screen). An update's norm is taken per unit of inner learning
// rate, ‖Δ‖ / Σ lr(t) over its steps: AdamW moves each weight by about lr a step, so a Δ made during
// the warm-up is that much smaller (the default run's first updates of a fragment were up to 11x
// smaller than the next ones by plain norm). Each fragment keeps that figure of each learner's
// latest honest update; an update past `clip` medians of those is scaled down to `clip` medians,
// and past `refuse` medians (mode refuse) it is refused as `outlier`.
// Until a fragment knows 3 norms an update is held, as received, and judged once the known and held
// norms are 3 (or when its round closes) against all of them: the median of 2 honest norms and 1 bad
// one is honest. So at most 3 deltas of a fragment are ever held, at the start of a run, and runs of
// 2 learners are not screened. The known norms are part of every committed manifest, so a restarted
// syncer screens from its first update. A clipped norm is remembered at its clipped size.
struct Screening {
  enum class Mode { none, clip, refuse };
  Mode mode = Mode::refuse;
  double clip = 16.0;
  double refuse = 64.0;
  static constexpr size_t kMinKnown = 3;

  enum class Action { pass, hold, clip, refuse };
  struct Verdict {
    Action action = Action::pass;
    double ratio = 0;  // ‖Δ‖ ÷ median (0: no median)
    float scale = 1;   // clip: the factor Δ is multiplied by
  };
  // The verdict on a figure `norm` against the median of `known`; hold when fewer than kMinKnown.
  Verdict judge(double norm, std::vector<double> known) const;
  static double median(std::vector<double> values);  // 0 when empty
};
Expected<Screening::Mode> parse_screen_mode(const std::string& name);

class SyncerCore {
 public:
  // With θ of every fragment (the state of version 1 in a fresh run): as hold_initial(initial).
  SyncerCore(RuntimeOptions options, std::vector<std::vector<float>> initial);
  // Without values: `numels` per fragment. A restore (a store holding a version) or hold_initial
  // (an empty store) gives it its values; until then it stages nothing.
  static SyncerCore without_values(RuntimeOptions options, std::vector<int64_t> numels);

  diloco::Mode mode() const { return mode_; }
  int fragment_count() const { return static_cast<int>(fragments_.size()); }
  int64_t fragment_numel(int p) const { return fragments_[p].numel; }
  uint64_t latest_version() const { return latest_version_; }
  // Some fragment's commit is under way (staged, not yet committed or failed).
  bool commit_in_flight() const { return !in_flight_.empty(); }
  bool fragment_in_flight(int p) const { return in_flight_.count(p) > 0; }
  // Fragments holding contributions not yet merged (an operator's `checkpoint` commits them now).
  std::vector<int> fragments_with_pending() const;
  const FragmentState& fragment(int p) const { return fragments_[p]; }
  const FragmentRules& rules() const { return rules_; }
  // The codec learners encode their updates with: outer.codec, until an operator sets another; every
  // broadcast names it (GlobalFragment.uplinkCodec). Updates are decoded by the codec they name.
  messages::Codec uplink_codec() const { return uplink_; }
  // The fragment schedule (diloco/schedule.hpp): train.inner_steps, then each `set train.inner_steps`
  // from a step one period past the leading learner's. Broadcasts carry it once it has changed
  // (empty before), and every committed version's accounting keeps it.
  const diloco::FragmentSchedule& schedule() const { return schedule_; }
  std::vector<messages::InnerStepsFrom> schedule_to_broadcast() const;

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
                 std::vector<std::vector<float>> outer, const nlohmann::json& manifest);

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
  struct Payload {
    messages::Codec codec = messages::Codec::fp32;
    std::vector<uint8_t> encoded;  // quantized codecs
    std::vector<float> values;     // otherwise
  };
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
  // this commit's credits. One sealed commit at a time: the next is sealed once this one landed or
  // failed, so each record carries what the one before it committed.
  void seal(StagedCommit& commit, double now_s);
  // Swaps the staged values in (the commit's broadcasts may go out now). Empties `commit.fragments`' values.
  void commit_succeeded(StagedCommit& commit, double now_s);
  // A failed commit stays staged and in flight under a new ticket, for the caller to send again
  // (its version is chosen again at its next seal); a failed initial commit hands its values back.
  void commit_failed(StagedCommit& commit, const std::string& reason);

  // ---- reporting -------------------------------------------------------------------------------
  nlohmann::json status(double now_s) const;
  // Per fragment: version and digest of B_p (receivers' copies must match), digest of the stored
  // outer-state blob (the store's copy of that version must match) and Delayed Nesterov's count.
  nlohmann::json broadcast_digests() const;
  const std::map<std::string, LearnerRecord>& learners() const { return learners_; }
  const RejectCounters& rejects() const { return rejects_; }
  // Accepted updates whose claimed steps or tokens differed from what they were credited with.
  int64_t claims_corrected() const { return claims_corrected_; }
  const diloco::SyncTimings& timings() const { return timings_; }
  // Screening's figures: mode, bounds, counts, and per fragment the median and the largest ratio
  // an update passed with (how close honest updates come to being clipped).
  nlohmann::json screening_status() const;
  // Bytes the pending updates hold: the running sums and the deltas held (screening, Delayed Nesterov).
  int64_t pending_bytes() const;
  double grace_s() const { return diloco::grace_window(timings_, options_.syncer); }
  int active_learners() const;
  // The highest throughput among active learners (0: none reported): async mode's dynamic local steps.
  double fastest_tokens_per_s() const;

  // Bytes on the learner links, counted by the syncer actor and persisted with every manifest.
  int64_t bytes_from_learners = 0;
  int64_t bytes_to_learners = 0;
  std::map<std::string, int64_t> updates_by_codec;  // accepted updates by the codec they came in (this process)
  std::map<std::string, int64_t> updates_by_period;  // ... and by their inner steps (the schedule's H)

 private:
  // Credits a commit's merged contributions to their learners' counters.
  void credit(std::map<std::string, LearnerRecord>& learners, const StagedCommit& commit, double now_s) const;
  // The quorum threshold of fragment p's open round for an update arriving now (decoupled).
  uint64_t on_time_round(int p) const;
  // Marks when fragment p's on-time contributors reached the quorum (and records the quorum time).
  void update_quorum(int p, double now_s);
  int effective_quorum() const;
  // Discards fragment p's pending contributions after their merge came out non-finite (`why`).
  void drop_non_finite_merge(int p, const std::string& why, double now_s);
  // Folds an accepted, screened Δ into fragment p's running sum (Delayed Nesterov keeps it in `c`).
  void fold(int p, PendingContribution& c, std::vector<float> delta);
  // Folds a quantized update straight from its codes (times c.scale).
  void fold_encoded(int p, PendingContribution& c, messages::Codec codec, const std::vector<uint8_t>& encoded);
  // Applies a verdict to `c` (clip scales `delta`); false when it was refused (counted as outlier, logged).
  bool apply_verdict(int p, PendingContribution& c, const Screening::Verdict& verdict, std::vector<float>& delta);
  // Judges fragment p's held contributions (before a merge), folding or refusing each.
  void settle_held(int p, double now_s);
  std::vector<double> known_norms(int p) const;
  // The known norms and those of fragment p's held contributions: what a held one is judged against.
  std::vector<double> norms_with_held(int p) const;
  // Fragment p's share of the model's parameters (a contribution's step equivalents).
  double fragment_share(int p) const;
  // A contribution's merge weight from its credited tokens and steps.
  double merge_weight_of(const PendingContribution& c) const;
  // Σ of the inner learning rate over the update's steps (the last `credited_steps` before to_step).
  double learning_rate_sum(uint64_t from_step, uint64_t to_step, int64_t credited_steps) const;
  void remember_norm(int p, const std::string& learner_id, double norm);
  // A shard keeps no values of the fragments it does not own once version 1 (or the version it
  // restored) is committed: their θ, B and outer state are dropped, and every later record carries
  // them from the store, with the stored entry they had (hollow_).
  void release_unowned();
  // What is kept of a fragment whose values are not held: another shard's (released for good) or
  // one lent to its commit in flight (until the commit lands).
  struct HollowFragment {
    nlohmann::json entry;       // stored_entry of its committed value: what records carrying it say
    uint64_t digest = 0;        // of B_p
    uint64_t outer_digest = 0;  // of the stored outer-state blob
  };
  HollowFragment hollow_of(const FragmentState& f) const;
  // Lets the committed value of fragment p go while its commit is in flight.
  void lend(int p);
  nlohmann::json accounting_json(const std::map<std::string, LearnerRecord>& learners) const;
  nlohmann::json accounting_json() const { return accounting_json(learners_); }
  void restore_accounting(const nlohmann::json& accounting);
  struct Sizes {
    std::vector<int64_t> numels;
  };
  SyncerCore(Sizes sizes, RuntimeOptions options);  // sizes first: never chosen for a brace list

  RuntimeOptions options_;
  diloco::Mode mode_ = diloco::Mode::sync;
  FragmentRules rules_;
  messages::Codec uplink_ = messages::Codec::fp32;
  diloco::FragmentSchedule schedule_;
  std::vector<FragmentState> fragments_;
  std::vector<int64_t> fragment_commits_;  // per fragment, commits since this syncer started
  int64_t total_numel_ = 0;
  bool has_values_ = false;
  std::map<std::string, LearnerRecord> learners_;
  std::map<std::string, double> last_arrival_;  // "learner/fragment" -> time, for step-time estimates
  RejectCounters rejects_;
  Screening screening_;
  std::vector<std::map<std::string, double>> honest_norms_;  // per fragment: learner -> its latest honest ‖Δ‖
  std::vector<double> largest_passed_ratio_;      // per fragment
  std::map<int, HollowFragment> hollow_;  // fragments whose values are not held (released or lent)
  int64_t clipped_ = 0;
  int64_t held_ = 0;                              // updates held for want of known norms
  int64_t unscreened_ = 0;                        // held ones merged with fewer than kMinKnown norms known
  double fold_s_ = 0;                             // seconds accept() spent on norms and folds (bench/syncer)
  int64_t tokens_per_step_ = 0;             // configured_tokens_per_step: what a credited step is worth
  int64_t claims_corrected_ = 0;
  std::set<std::string> claims_logged_;     // learners whose corrected claim was logged (once each)
  diloco::SyncTimings timings_;
  uint64_t latest_version_ = 0;
  uint64_t last_attempted_version_ = 0;  // a timed-out commit may still land: never reuse its number
  std::set<int> in_flight_;              // fragments with a commit under way
  uint64_t last_ticket_ = 0;
  int64_t commits_ = 0;
  int64_t failed_commits_ = 0;  // attempts that failed (each sent again, or a restore for the initial one)
  int64_t merges_ = 0;
  double loss_sum_ = 0;   // train loss of merged contributions since the last status
  int64_t loss_count_ = 0;
  double last_train_loss_ = 0;
};

}  // namespace archipelago::actors

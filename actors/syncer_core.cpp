#include "actors/syncer_core.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "actors/events.hpp"
#include "actors/initial_fragments.hpp"
#include "actors/syncer_restore.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "diloco/learner_id.hpp"
#include "diloco/rounds.hpp"
#include "net/auth.hpp"

namespace archipelago::actors {
namespace {

void ema(double& value, double sample, double gain = 0.2) { value = value == 0 ? sample : value + gain * (sample - value); }

}  // namespace

SyncerCore::SyncerCore(Sizes sizes, RuntimeOptions options)
    : settings_(std::move(options), static_cast<int>(sizes.numels.size())),
      fragments_(sized_fragments(sizes.numels, settings_.rules())),
      screen_(settings_.screening(), settings_.options().setup.outer.screen_max_ratio,
              static_cast<int>(sizes.numels.size()), settings_.options().events),
      commits_(static_cast<int>(sizes.numels.size())) {
  for (int64_t n : sizes.numels) total_numel_ += n;
}

SyncerCore::SyncerCore(RuntimeOptions options, std::vector<std::vector<float>> initial)
    : SyncerCore(Sizes{numels_of(initial)}, std::move(options)) {
  (void)hold_initial(std::move(initial));  // the sizes are the fragments' by construction
}

SyncerCore SyncerCore::without_values(RuntimeOptions options, std::vector<int64_t> numels) {
  return SyncerCore(Sizes{std::move(numels)}, std::move(options));
}

std::vector<int> SyncerCore::fragments_with_pending() const {
  std::vector<int> ids;
  for (int p = 0; p < fragment_count(); ++p) {
    if (!fragments_[p].pending.empty()) ids.push_back(p);
  }
  return ids;
}

double SyncerCore::fragment_share(int p) const {
  return static_cast<double>(fragments_[p].numel) / static_cast<double>(std::max<int64_t>(1, total_numel_));
}

// ---- restoring ---------------------------------------------------------------------------------

Status SyncerCore::hold_initial(std::vector<std::vector<float>> initial) {
  auto values = initial_values(std::move(initial), fragments_, rules());
  if (!values) return values.error();
  fragments_ = std::move(*values);
  has_values_ = true;
  return {};
}

StagedCommit SyncerCore::stage_initial(double now_s) { return commits_.stage_initial(fragments_, now_s); }

Expected<std::pair<std::string, std::string>> SyncerCore::set(const std::string& key, const std::string& value) {
  return settings_.set(key, value, roster_.leading_step());
}

Status SyncerCore::restore(uint64_t version, std::vector<std::vector<float>> broadcast,
                           std::vector<std::vector<float>> outer, const diloco::VersionManifest& manifest) {
  auto values = restored_values(version, std::move(broadcast), std::move(outer), manifest, fragments_, rules());
  if (!values) return values.error();
  fragments_ = std::move(*values);
  commits_.restored(version);
  if (!manifest.accounting.empty()) {
    if (auto restored = restore_accounting(manifest.accounting); !restored.ok()) return restored;
  }
  // The screening's known norms, so that a restarted syncer screens from its first update.
  screen_.restore_known(manifest.screening_norms);
  has_values_ = true;
  commits_.release_unowned(fragments_, options().shard);
  return {};
}

SyncerAccounting SyncerCore::accounting(const LearnerRoster& roster) const {
  SyncerAccounting a;
  a.learners = roster.accounting();
  a.rejected = rejects_.by_reason;
  a.claims_corrected = admission_.claims_corrected();
  a.bytes_from_learners = bytes_from_learners;
  a.bytes_to_learners = bytes_to_learners;
  a.schedule = settings_.schedule_json();
  return a;
}

Status SyncerCore::restore_accounting(const nlohmann::json& j) {
  auto a = decode_status<SyncerAccounting>(j, "the manifest's accounting");
  if (!a) return a.error();
  roster_.restore_accounting(a->learners);
  rejects_.restore(a->rejected);
  admission_.restore_claims_corrected(a->claims_corrected);
  bytes_from_learners = a->bytes_from_learners;
  bytes_to_learners = a->bytes_to_learners;
  settings_.restore_schedule(a->schedule);
  return {};
}

// ---- learners ----------------------------------------------------------------------------------

messages::Welcome SyncerCore::join(const messages::Join& join, double now_s) {
  messages::Welcome welcome;
  welcome.fragment_count = static_cast<uint32_t>(fragments_.size());
  welcome.version = latest_version();
  if (!net::tokens_equal(join.auth_token, options().syncer.auth_token)) {  // constant time
    count_reject(RejectReason::unauthenticated, join.learner_id);
    welcome.reason = "unauthenticated: wrong auth token";
    welcome.refusal = messages::JoinRefusal::unauthenticated;
    return welcome;
  }
  if (diloco::learner_index(join.learner_id) < 0) {
    count_reject(RejectReason::unknown_learner, join.learner_id);
    welcome.reason = "unauthenticated: learner ids are learner-<n>";
    welcome.refusal = messages::JoinRefusal::unauthenticated;
    return welcome;
  }
  welcome.received_until = roster_.join(join.learner_id, latest_version(), now_s, fragment_count()).received_until;
  // The version each fragment last changed at: a learner that rejoins after missing broadcasts (a
  // frozen or cut-off node) sees at once that it holds older ones, and fetches the state.
  for (const auto& f : fragments_) welcome.fragment_versions.push_back(f.version);
  welcome.accepted = true;
  return welcome;
}

void SyncerCore::leave(const std::string& learner_id, bool finished, const std::string& reason, double) {
  if (!roster_.leave(learner_id, finished)) return;
  component_logger("syncer")->info("{} left ({}): quorum now counts {} active learner(s)", learner_id, reason,
                                   active_learners());
}

std::optional<RejectReason> SyncerCore::screen(const std::string& sender_id, uint64_t sequence,
                                               const messages::FragmentUpdate& update) {
  return screen_envelope(sender_id, sequence, update, roster_, fragments_, options().shard);
}

void SyncerCore::count_reject(RejectReason reason, const std::string& learner_id, double step_equivalents,
                              double compute_s) {
  rejects_.count(reason);
  if (options().events) options().events->add("rejected", learner_id.empty() ? "?" : learner_id, to_string(reason));
  roster_.charge_rejected(learner_id, step_equivalents, compute_s);
}

void SyncerCore::count(const Rejection& rejection, const std::string& learner_id) {
  count_reject(rejection.reason, learner_id, rejection.step_equivalents, rejection.compute_s);
}

namespace {

// `learner_id` has an update of `f` waiting for screening to judge it.
bool holds_unjudged(const FragmentState& f, const std::string& learner_id) {
  return std::any_of(f.pending.begin(), f.pending.end(),
                     [&](const PendingContribution& c) { return !c.screened && c.learner_id == learner_id; });
}

}  // namespace

std::optional<RejectReason> SyncerCore::accept(const UpdateHeader& h, std::vector<float> delta, double now_s) {
  Payload payload;
  payload.values = std::move(delta);
  return accept(h, std::move(payload), now_s);
}

std::optional<RejectReason> SyncerCore::accept(const UpdateHeader& h, Payload payload, double now_s) {
  const int p = static_cast<int>(h.fragment);
  // 1. Admission: this shard's fragment, a plausible claim, not a duplicate, not stale.
  if (!options().shard.owns(p)) {
    count_reject(RejectReason::not_owner, h.learner_id, 0, h.compute_s);
    return RejectReason::not_owner;
  }
  auto& f = fragments_[p];
  const double share = fragment_share(p);
  const auto admitted = admission_.admit(h, fragments_, roster_, latest_version(), settings_, share);
  if (admitted.rejected) {
    count(*admitted.rejected, h.learner_id);
    return admitted.rejected->reason;
  }
  if (auto step_s = admission_.step_time(h, admitted.steps, now_s)) ema(timings_.step_s, *step_s);
  const bool on_time = !diloco::numbered_rounds(mode()) ||
                       h.round >= diloco::on_time_round(f.next_round, roster_.leading_slot(p));
  PendingContribution c = UpdateAdmission::contribution(h, admitted, on_time, now_s);

  // 2. Measured as it came, screened, then folded into the round's sum (or held until screening can judge it).
  const double fold_started_s = monotonic_seconds();
  auto measured = measure_update(std::move(payload), f.numel, rules());
  if (!measured) {
    const auto reason = reject_reason_of(measured.error());
    component_logger("syncer")->warn("rejected update of fragment {} from {}: {}", h.fragment, h.learner_id,
                                     measured.error().to_string());
    count({reason, admitted.steps * share, h.compute_s}, h.learner_id);
    return reason;
  }
  c.norm = measured->norm;
  c.screen_norm = NormScreen::figure(c.norm, h.from_step, h.to_step, admitted.steps, options().setup.inner);
  screen_.bound(p, c, f.parameters_norm, measured->delta);  // ‖Δ_p‖ ≤ max_ratio × ‖θ_p‖, medians or not
  auto verdict = screen_.judge(p, c.screen_norm, c.learner_id);
  if (verdict.action == diloco::Screening::Action::hold && holds_unjudged(f, c.learner_id)) {
    // A learner is one witness: its second update while one of its waits does not wait beside it
    // (that would let one sender hold deltas without bound); the waiting ones are settled first, as
    // at their round's close, and this one is judged against what that leaves.
    settle_held(p, now_s);
    verdict = screen_.judge(p, c.screen_norm, c.learner_id);
  }
  const bool held = verdict.action == diloco::Screening::Action::hold;
  if (held) {
    hold_update(c, std::move(*measured));
    screen_.count_held();
  } else {
    if (!screen_.apply(p, c, verdict, measured->delta)) {
      count({RejectReason::outlier, c.steps * share, c.compute_s}, c.learner_id);
      return RejectReason::outlier;
    }
    fold_update(f, c, std::move(*measured), rules());
  }
  fold_s_ += monotonic_seconds() - fold_started_s;

  // 3. Pending in its round: the learner's position, the round's quorum.
  roster_.accepted(h.learner_id, p, h.to_step, h.round, fragment_count());
  f.pending.push_back(std::move(c));
  update_quorum(p, now_s);
  // Enough learners' figures with the held ones: judge them now, so that at most kMinKnown deltas
  // (one per learner) are ever held.
  if (held && screen_.can_settle(p, f)) settle_held(p, now_s);
  return std::nullopt;
}

// ---- merging -----------------------------------------------------------------------------------

void SyncerCore::update_quorum(int p, double now_s) {
  const int quorum = diloco::round_quorum(options().setup.outer.quorum, roster_.active_count());
  if (auto wait_s = mark_quorum(fragments_[p], quorum, now_s)) ema(timings_.quorum_s, *wait_s);
}

void SyncerCore::settle_held(int p, double now_s) {
  const double share = fragment_share(p);
  screen_.settle(p, fragments_[p], rules(), [&](const PendingContribution& c) {
    count({RejectReason::outlier, c.steps * share, c.compute_s}, c.learner_id);
  });
  update_quorum(p, now_s);
}

std::vector<int> SyncerCore::ready_fragments(double now_s, double* next_deadline_s) {
  *next_deadline_s = -1;
  std::vector<int> ready;
  const double grace = grace_s();
  const double sync_wait = diloco::round_barrier(mode()) ? diloco::sync_round_wait(sync_spreads_, options().syncer) : 0;
  const std::set<std::string> active = roster_.active_ids();
  for (int p = 0; p < fragment_count(); ++p) {
    if (!options().shard.owns(p)) continue;  // another shard's: never merged here
    update_quorum(p, now_s);  // the quorum shrinks when learners leave
    if (fragment_in_flight(p)) continue;  // looked at again when its commit has landed or failed
    const auto decision = diloco::decide_merge(mode(), now_s, tally_of(fragments_[p], active),
                                               options().setup.outer.quorum, grace, sync_wait);
    if (decision.action == diloco::MergeAction::merge_now) {
      ready.push_back(p);
    } else if (decision.action == diloco::MergeAction::wait_until) {
      if (*next_deadline_s < 0 || decision.deadline_s < *next_deadline_s) *next_deadline_s = decision.deadline_s;
    }
  }
  return ready;
}

Expected<StagedCommit> SyncerCore::stage(const std::vector<int>& fragment_ids, double now_s) {
  for (int p : fragment_ids) {
    if (fragment_in_flight(p))
      return make_error(ErrorCode::conflict, "fragment " + std::to_string(p) + " has a commit in flight");
  }
  StagedCommit commit;
  commit.started_s = now_s;
  int dropped = 0;
  std::optional<Error> failed;  // a fragment that could not be staged (a bug): the others go on
  for (int p : fragment_ids) {
    settle_held(p, now_s);
    const auto& f = fragments_[p];
    if (f.pending.empty()) continue;
    // A round merged in pieces (quorum + grace, stragglers, the drain) moves θ as far as one merged
    // at once: each piece counts for its contributions ÷ the learners a round expects (commit_share).
    auto staged = stage_fragment(p, f, rules());
    if (!staged && staged.error().code == ErrorCode::non_finite) {
      drop_unsafe_merge(p, RejectReason::non_finite_merge, staged.error().reason, now_s);
      dropped += 1;
      continue;
    }
    if (!staged) {
      component_logger("syncer")->error("fragment {} cannot be staged: {}", p, staged.error().to_string());
      if (!failed) failed = staged.error();
      continue;
    }
    // A merge that blows θ_p up while staying finite (outer.max_norm_growth) is dropped the same way:
    // the run keeps the last good value.
    if (f.parameters_norm > 0) {
      const double growth = staged->next.parameters_norm / f.parameters_norm;
      const double bound = options().setup.outer.max_norm_growth;
      if (growth > bound) {
        drop_unsafe_merge(p, RejectReason::unsafe_merge,
                          "fragment " + std::to_string(p) + ": the merge would make |theta_p| grow " +
                              std::to_string(growth) + " times (outer.max_norm_growth = " + std::to_string(bound) + ")",
                          now_s);
        dropped += 1;
        continue;
      }
      screen_.record_growth(p, growth);
    }
    if (diloco::round_barrier(mode())) note_sync_round(p);
    commits_.lend(p, fragments_[p]);  // before the next fragment is staged: one fragment is held twice at a time, not all
    commit.fragments.push_back(std::move(*staged));
  }
  if (commit.fragments.empty() && failed) return *failed;
  if (commit.fragments.empty() && dropped > 0) {
    return make_error(ErrorCode::non_finite, "every merge came out non-finite or unsafe and was dropped");
  }
  if (commit.fragments.empty()) return make_error(ErrorCode::invalid_argument, "no fragment had pending updates");
  commits_.open(commit, fragments_);
  return commit;
}

void SyncerCore::note_sync_round(int p) {
  const auto& f = fragments_[p];
  double first = -1, last = -1;
  std::set<std::string> contributors;
  for (const auto& c : f.pending) {
    contributors.insert(c.learner_id);
    first = first < 0 ? c.arrived_s : std::min(first, c.arrived_s);
    last = std::max(last, c.arrived_s);
  }
  sync_spreads_.push_back(last - first);
  if (sync_spreads_.size() > kSyncSpreads) sync_spreads_.erase(sync_spreads_.begin());
  for (const auto& id : roster_.active_ids()) {
    if (contributors.count(id)) continue;
    roster_.missed_round(id);
    component_logger("syncer")->warn("sync round of fragment {} merged at its deadline without {} (active, sent "
                                     "nothing for it)", p, id);
  }
}

void SyncerCore::drop_unsafe_merge(int p, RejectReason reason, const std::string& why, double now_s) {
  const double share = fragment_share(p);
  for (const auto& c : fragments_[p].pending) {
    count({reason, c.steps * share, c.compute_s}, c.learner_id);
  }
  drop_merge(p, fragments_[p], why);
  update_quorum(p, now_s);
}

void SyncerCore::credit(LearnerRoster& roster, const StagedCommit& commit, double now_s) const {
  for (const auto& staged : commit.fragments) {
    for (const auto& c : staged.merged) roster.credit(c, fragment_share(c.fragment), now_s);
  }
}

void SyncerCore::seal(StagedCommit& commit, double now_s) {
  LearnerRoster credited = roster_;  // the learners as this commit leaves them
  credit(credited, commit, now_s);
  commits_.seal(commit, fragments_, mode(), nlohmann::json(accounting(credited)), screen_.known_norms());
  commit.manifest.bytes_from_learners = bytes_from_learners;
  commit.manifest.bytes_to_learners = bytes_to_learners;
}

void SyncerCore::commit_succeeded(StagedCommit& commit, double now_s) {
  credit(roster_, commit, now_s);
  const std::vector<int> landed = commit.fragment_ids();
  commits_.succeeded(commit, fragments_);
  for (int p : landed) update_quorum(p, now_s);
  ema(timings_.sync_s, now_s - commit.started_s);
  if (commit.initial) commits_.release_unowned(fragments_, options().shard);
}

void SyncerCore::commit_failed(StagedCommit& commit, const std::string& reason) {
  commits_.failed(commit, fragments_, reason);
}

// ---- reporting ---------------------------------------------------------------------------------

SyncerStatus SyncerCore::status(double) const {
  int64_t pending = 0;
  std::vector<uint64_t> fragment_versions, open_rounds;
  for (const auto& f : fragments_) {
    pending += static_cast<int64_t>(f.pending.size());
    fragment_versions.push_back(f.version);
    open_rounds.push_back(f.next_round);
  }
  const auto& shard = options().shard;
  const std::vector<int> owned = shard.owned(fragment_count());
  double owned_share = 0;
  for (int p : owned) owned_share += fragment_share(p);
  SyncerStatus s;
  s.mode = diloco::mode_name(mode());
  s.shard = {shard.index, shard.count, owned, shard.count > 1 ? owned_share : 1.0};  // unsharded: exactly all
  s.outer_lr = rules().lr;
  s.outer_momentum = rules().momentum;
  s.quorum = options().setup.outer.quorum;
  s.version = latest_version();
  s.commits = commits_.commits();
  s.failed_commits = commits_.failed_commits();
  s.merged_contributions = commits_.merged_contributions();
  s.commit_in_flight = commit_in_flight();
  s.fragments_in_flight.assign(commits_.fragments_in_flight().begin(), commits_.fragments_in_flight().end());
  s.pending = pending;
  s.active_learners = active_learners();
  s.fragment_versions = fragment_versions;
  s.fragment_commits = commits_.fragment_commits();
  s.open_rounds = open_rounds;
  s.downlink_codec = messages::codec_name(rules().downlink);
  s.uplink_codec = messages::codec_name(uplink_codec());
  s.updates_by_codec = updates_by_codec;
  s.updates_by_period = updates_by_period;
  s.inner_steps = schedule().epochs().back().inner_steps;
  s.outer_optimizer = diloco::outer_rule_name(rules().outer);
  s.train_loss = commits_.train_loss();
  s.grace_s = grace_s();
  s.timings = {timings_.step_s, timings_.quorum_s, timings_.sync_s};
  s.rejected = rejects_.by_reason;
  s.rejected_total = rejects_.total();
  s.claims_corrected = claims_corrected();
  s.bytes_from_learners = bytes_from_learners;
  s.bytes_to_learners = bytes_to_learners;
  s.screening = screening_status();
  s.pending_bytes = pending_bytes();
  s.fold_s = fold_s_;
  s.learners = roster_.status();
  s.accounting = accounting(roster_);
  return s;
}

ScreeningStatus SyncerCore::screening_status() const {
  return screen_.status(rejects_.by_reason.at(to_string(RejectReason::outlier)));
}

int64_t SyncerCore::pending_bytes() const {
  int64_t bytes = 0;
  for (const auto& f : fragments_) bytes += actors::pending_bytes(f);
  return bytes;
}

}  // namespace archipelago::actors

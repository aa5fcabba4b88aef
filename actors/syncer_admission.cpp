#include "actors/syncer_admission.hpp"

#include "common/log.hpp"
#include "diloco/admission.hpp"
#include "diloco/learner_id.hpp"

namespace archipelago::actors {

std::optional<RejectReason> screen_envelope(const std::string& sender_id, uint64_t sequence,
                                            const messages::FragmentUpdate& update, LearnerRoster& roster,
                                            const std::vector<FragmentState>& fragments, const ShardOptions& shard) {
  LearnerRecord* record = roster.find(update.learner_id);
  if (!record || !record->active || sender_id != update.learner_id) return RejectReason::unknown_learner;
  if (sequence <= record->last_sequence) return RejectReason::duplicate;
  record->last_sequence = sequence;
  if (update.tokens_per_sec > 0) record->tokens_per_s = update.tokens_per_sec;
  if (update.fragment_id >= fragments.size() ||
      update.chunk.element_count != static_cast<uint64_t>(fragments[update.fragment_id].numel)) {
    return RejectReason::wrong_shape;
  }
  if (!shard.owns(static_cast<int>(update.fragment_id))) return RejectReason::not_owner;
  return std::nullopt;
}

UpdateAdmission::Admitted UpdateAdmission::admit(const UpdateHeader& h, const std::vector<FragmentState>& fragments,
                                                 LearnerRoster& roster, uint64_t latest_version,
                                                 const SyncerSettings& settings, double share) {
  const FragmentState& f = fragments[h.fragment];
  diloco::AdmissionState state;
  if (const LearnerRecord* known = roster.find(h.learner_id); known && h.fragment < known->received_until.size()) {
    state.received_until = known->received_until[h.fragment];
  }
  for (const auto& c : f.pending) {
    if (c.learner_id == h.learner_id && c.base_version == h.base_version) state.same_base_pending = true;
  }
  state.commit_versions = f.commit_versions;
  state.latest_version = latest_version;
  const auto decision = diloco::admit_update(
      settings.mode(), {h.inner_steps, h.tokens, h.base_version, h.from_step}, state,
      {settings.schedule().largest_period(), settings.tokens_per_step(), settings.options().syncer.max_staleness});

  Admitted admitted;
  admitted.steps = decision.work.steps;
  admitted.tokens = decision.work.tokens;
  admitted.staleness = decision.staleness;
  auto log = component_logger("syncer");
  if (decision.refused == diloco::UpdateRefusal::implausible_claim) {
    log->warn("rejected update of fragment {} from {}: {}", h.fragment, h.learner_id, decision.reason);
    admitted.rejected = Rejection{RejectReason::implausible_claim, 0, h.compute_s};
    return admitted;
  }
  roster.record(h.learner_id, static_cast<int>(fragments.size()));
  const double wasted = static_cast<double>(decision.work.steps) * share;
  if (decision.refused == diloco::UpdateRefusal::duplicate) {
    log->warn("rejected update of fragment {} from {} (steps {}..{}, base {}): {}", h.fragment, h.learner_id,
              h.from_step, h.to_step, h.base_version, decision.reason);
    admitted.rejected = Rejection{RejectReason::duplicate, wasted, h.compute_s};
    return admitted;
  }
  if (decision.refused == diloco::UpdateRefusal::stale) {
    log->warn("rejected update of fragment {} from {}: {}", h.fragment, h.learner_id, decision.reason);
    admitted.rejected = Rejection{RejectReason::stale, wasted, h.compute_s};
    return admitted;
  }
  if (decision.work.corrected) {
    claims_corrected_ += 1;
    if (claims_logged_.insert(h.learner_id).second) {
      log->warn("update of fragment {} from {}: {} (logged once per learner; counted in claims_corrected)",
                h.fragment, h.learner_id, decision.work.reason);
    }
  }
  return admitted;
}

std::optional<double> UpdateAdmission::step_time(const UpdateHeader& h, int64_t credited_steps, double now_s) {
  const std::string key = h.learner_id + "/" + std::to_string(h.fragment);
  std::optional<double> seconds;
  if (auto last = last_arrival_.find(key); last != last_arrival_.end()) {
    seconds = (now_s - last->second) / static_cast<double>(credited_steps);
  } else if (h.compute_s > 0 && credited_steps > 0) {
    // The first update of a (learner, fragment) since this syncer started, a restart or a --resume:
    // the learner's own compute time per step seeds the grace window, so the first round gathers
    // the learners that arrive within it instead of merging its first arrival alone.
    seconds = h.compute_s / static_cast<double>(credited_steps);
  }
  last_arrival_[key] = now_s;
  return seconds;
}

PendingContribution UpdateAdmission::contribution(const UpdateHeader& h, const Admitted& admitted, bool on_time,
                                                  double now_s) {
  PendingContribution c;
  c.learner = diloco::learner_index(h.learner_id);
  c.learner_id = h.learner_id;
  c.fragment = static_cast<int>(h.fragment);
  c.base_version = h.base_version;
  c.round = h.round;
  c.on_time = on_time;
  c.steps = admitted.steps;
  c.tokens = admitted.tokens;
  c.train_loss = h.train_loss;
  c.compute_s = h.compute_s;
  c.staleness = admitted.staleness;
  c.arrived_s = now_s;
  return c;
}

}  // namespace archipelago::actors

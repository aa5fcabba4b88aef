#include "actors/syncer_roster.hpp"

#include <algorithm>

namespace archipelago::actors {

const LearnerRecord& LearnerRoster::join(const std::string& id, uint64_t committed_version, double now_s,
                                         int fragment_count) {
  auto& record = records_[id];
  record.id = id;
  record.active = true;
  record.finished = false;
  record.last_sequence = 0;
  record.joined_version = committed_version;
  record.joined_s = now_s;
  record.first_merge_after_join_s = -1;
  record.joins += 1;
  record.received_until.resize(static_cast<size_t>(fragment_count), 0);
  return record;
}

bool LearnerRoster::leave(const std::string& id, bool finished) {
  auto it = records_.find(id);
  if (it == records_.end()) return false;
  it->second.active = false;
  it->second.finished = it->second.finished || finished;
  return true;
}

LearnerRecord& LearnerRoster::record(const std::string& id, int fragment_count) {
  auto& record = records_[id];
  record.received_until.resize(static_cast<size_t>(fragment_count), 0);
  return record;
}

LearnerRecord* LearnerRoster::find(const std::string& id) {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}

const LearnerRecord* LearnerRoster::find(const std::string& id) const {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}

void LearnerRoster::accepted(const std::string& id, int p, uint64_t to_step, uint64_t round, int fragment_count) {
  auto& r = record(id, fragment_count);
  r.last_round.resize(static_cast<size_t>(fragment_count), -1);
  r.received_until[p] = std::max(r.received_until[p], to_step);
  r.last_round[p] = std::max<int64_t>(r.last_round[p], static_cast<int64_t>(round));
}

void LearnerRoster::credit(const PendingContribution& c, double share, double now_s) {
  auto* r = find(c.learner_id);
  if (!r) return;
  r->contributions_merged += 1;
  r->step_equivalents_merged += c.steps * share;
  r->compute_merged_s += c.compute_s;
  r->tokens_merged += static_cast<int64_t>(c.tokens * share);
  if (c.fragment == 0) r->steps_merged_fragment0 += c.steps;
  r->last_staleness = c.staleness;
  // Only work sent after the (re)join counts: a dead incarnation's last updates may still merge.
  if (r->first_merge_after_join_s < 0 && c.arrived_s >= r->joined_s) r->first_merge_after_join_s = now_s;
}

void LearnerRoster::charge_rejected(const std::string& id, double step_equivalents, double compute_s) {
  auto* r = find(id);
  if (!r) return;
  r->contributions_rejected += 1;
  r->step_equivalents_rejected += step_equivalents;
  r->compute_rejected_s += compute_s;
}

int LearnerRoster::active_count() const {
  int n = 0;
  for (const auto& [_, r] : records_) n += r.active ? 1 : 0;
  return n;
}

std::set<std::string> LearnerRoster::active_ids() const {
  std::set<std::string> ids;
  for (const auto& [id, r] : records_) {
    if (r.active) ids.insert(id);
  }
  return ids;
}

double LearnerRoster::fastest_tokens_per_s() const {
  double fastest = 0;
  for (const auto& [_, r] : records_) {
    if (r.active) fastest = std::max(fastest, r.tokens_per_s);
  }
  return fastest;
}

uint64_t LearnerRoster::leading_step() const {
  uint64_t leading = 0;
  for (const auto& [_, r] : records_) {
    for (uint64_t until : r.received_until) leading = std::max(leading, until);
  }
  return leading;
}

int64_t LearnerRoster::leading_slot(int p) const {
  int64_t leading = -1;
  for (const auto& [_, r] : records_) {
    if (r.active && p < static_cast<int>(r.last_round.size())) leading = std::max(leading, r.last_round[p]);
  }
  return leading;
}

std::map<std::string, LearnerAccounting> LearnerRoster::accounting() const {
  std::map<std::string, LearnerAccounting> learners;
  for (const auto& [id, r] : records_) learners[id] = r;
  return learners;
}

void LearnerRoster::restore_accounting(const std::map<std::string, LearnerAccounting>& learners) {
  for (const auto& [id, counted] : learners) {
    auto& r = records_[id];
    r.id = id;
    static_cast<LearnerAccounting&>(r) = counted;
  }
}

void LearnerRoster::missed_round(const std::string& id) {
  if (auto it = records_.find(id); it != records_.end()) it->second.rounds_missed += 1;
}

std::map<std::string, SyncerLearnerStatus> LearnerRoster::status() const {
  std::map<std::string, SyncerLearnerStatus> learners;
  for (const auto& [id, r] : records_) {
    auto& s = learners[id];
    static_cast<LearnerAccounting&>(s) = r;
    s.active = r.active;
    s.finished = r.finished;
    s.joined_version = r.joined_version;
    s.joined_s = r.joined_s;
    s.first_merge_after_join_s = r.first_merge_after_join_s;
    s.tokens_per_s = r.tokens_per_s;
    s.staleness = r.last_staleness;
    s.rounds_missed = r.rounds_missed;
  }
  return learners;
}

}  // namespace archipelago::actors

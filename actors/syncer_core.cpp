#include "actors/syncer_core.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "actors/wire.hpp"
#include "common/log.hpp"
#include "net/auth.hpp"

namespace archipelago::actors {
namespace {

constexpr size_t kCommitHistory = 64;  // per fragment, for staleness; older bases are stale anyway

void ema(double& value, double sample, double gain = 0.2) { value = value == 0 ? sample : value + gain * (sample - value); }

// The counters of one learner that a committed version's manifest carries (restore_accounting reads them).
nlohmann::json learner_accounting(const LearnerRecord& r) {
  return {{"contributions_merged", r.contributions_merged},
          {"contributions_rejected", r.contributions_rejected},
          {"step_equivalents_merged", r.step_equivalents_merged},
          {"step_equivalents_rejected", r.step_equivalents_rejected},
          {"steps_merged_fragment0", r.steps_merged_fragment0},
          {"tokens_merged", r.tokens_merged},
          {"joins", r.joins}};
}

}  // namespace

const char* to_string(RejectReason reason) {
  switch (reason) {
    case RejectReason::stale: return "stale";
    case RejectReason::duplicate: return "duplicate";
    case RejectReason::unknown_learner: return "unknown_learner";
    case RejectReason::wrong_shape: return "wrong_shape";
    case RejectReason::non_finite: return "non_finite";
    case RejectReason::malformed: return "malformed";
    case RejectReason::unauthenticated: return "unauthenticated";
  }
  return "unknown";
}

int64_t RejectCounters::total() const {
  int64_t sum = 0;
  for (const auto& [_, n] : by_reason) sum += n;
  return sum;
}

SyncerCore::SyncerCore(RuntimeOptions options, std::vector<std::vector<float>> initial)
    : options_(std::move(options)), mode_(options_.setup.run.mode) {
  auto rule = training::parse_merge_rule(options_.setup.outer.merge);
  if (rule) merge_rule_ = *rule;
  const bool delayed = mode_ == "async" && options_.setup.outer.optimizer == "delayed_nesterov";
  for (auto& values : initial) {
    FragmentState f;
    f.numel = static_cast<int64_t>(values.size());
    f.momentum.assign(values.size(), 0.0f);
    f.parameters = std::move(values);
    total_numel_ += f.numel;
    if (delayed) {
      delayed_.push_back(std::make_unique<training::DelayedNesterovOuter>(
          f.numel, options_.setup.outer.lr, options_.setup.outer.momentum, options_.setup.outer.delayed_every));
    }
    fragments_.push_back(std::move(f));
  }
  for (const char* r : {"stale", "duplicate", "unknown_learner", "wrong_shape", "non_finite", "malformed",
                        "unauthenticated"}) {
    rejects_.by_reason[r] = 0;
  }
}

StagedCommit SyncerCore::stage_initial(double now_s) {
  StagedCommit commit;
  commit.version = 1;
  last_attempted_version_ = 1;
  commit.started_s = now_s;
  for (int p = 0; p < fragment_count(); ++p) {
    commit.fragments.push_back(p);
    commit.previous_parameters.push_back(fragments_[p].parameters);
    commit.previous_momentum.push_back(fragments_[p].momentum);
  }
  commit.manifest = {{"version", 1}, {"kind", "initial"}, {"mode", mode_}, {"fragments", commit.fragments},
                     {"fragment_versions", std::vector<uint64_t>(fragments_.size(), 1)},
                     {"accounting", accounting_json()}};
  in_flight_ = true;
  return commit;
}

Status SyncerCore::restore(uint64_t version, std::vector<std::vector<float>> parameters,
                           std::vector<std::vector<float>> momentum, const nlohmann::json& manifest) {
  if (parameters.size() != fragments_.size() || momentum.size() != fragments_.size()) {
    return make_error(ErrorCode::inconsistent, "stored version has " + std::to_string(parameters.size()) +
                                                   " fragments, the model has " + std::to_string(fragments_.size()));
  }
  std::vector<uint64_t> fragment_versions(fragments_.size(), version);
  if (manifest.contains("fragment_versions") && manifest["fragment_versions"].size() == fragments_.size()) {
    fragment_versions = manifest["fragment_versions"].get<std::vector<uint64_t>>();
  }
  for (size_t p = 0; p < fragments_.size(); ++p) {
    auto& f = fragments_[p];
    if (static_cast<int64_t>(parameters[p].size()) != f.numel || momentum[p].size() != parameters[p].size()) {
      return make_error(ErrorCode::inconsistent, "stored fragment " + std::to_string(p) + " has the wrong shape");
    }
    f.parameters = std::move(parameters[p]);
    f.momentum = std::move(momentum[p]);
    f.version = fragment_versions[p];
    f.commit_versions = {f.version};
    f.pending.clear();
    f.first_arrival_s = f.quorum_reached_s = -1;
  }
  latest_version_ = version;
  last_attempted_version_ = std::max(last_attempted_version_, version);
  in_flight_ = false;
  if (manifest.contains("accounting")) restore_accounting(manifest["accounting"]);
  return {};
}

messages::Welcome SyncerCore::join(const messages::Join& join, double now_s) {
  messages::Welcome welcome;
  welcome.fragment_count = static_cast<uint32_t>(fragments_.size());
  welcome.version = latest_version_;
  if (!net::tokens_equal(join.auth_token, options_.syncer.auth_token)) {  // constant time
    count_reject(RejectReason::unauthenticated, join.learner_id);
    welcome.reason = "unauthenticated: wrong auth token";
    return welcome;
  }
  if (learner_index(join.learner_id) < 0) {
    count_reject(RejectReason::unknown_learner, join.learner_id);
    welcome.reason = "unauthenticated: learner ids are learner-<n>";
    return welcome;
  }
  auto& record = learners_[join.learner_id];
  record.id = join.learner_id;
  record.active = true;
  record.finished = false;
  record.last_sequence = 0;
  record.joined_version = latest_version_;
  record.joined_s = now_s;
  record.first_merge_after_join_s = -1;
  record.joins += 1;
  welcome.accepted = true;
  return welcome;
}

void SyncerCore::leave(const std::string& learner_id, bool finished, const std::string& reason, double now_s) {
  auto it = learners_.find(learner_id);
  if (it == learners_.end()) return;
  it->second.active = false;
  it->second.finished = it->second.finished || finished;
  component_logger("syncer")->info("{} left ({}): quorum now counts {} active learner(s)", learner_id, reason,
                                   active_learners());
}

int SyncerCore::active_learners() const {
  int n = 0;
  for (const auto& [_, r] : learners_) n += r.active ? 1 : 0;
  return n;
}

double SyncerCore::fastest_tokens_per_s() const {
  double fastest = 0;
  for (const auto& [_, r] : learners_) {
    if (r.active) fastest = std::max(fastest, r.tokens_per_s);
  }
  return fastest;
}

void SyncerCore::count_reject(RejectReason reason, const std::string& learner_id, double step_equivalents) {
  rejects_.by_reason[to_string(reason)] += 1;
  auto it = learners_.find(learner_id);
  if (it != learners_.end()) {
    it->second.contributions_rejected += 1;
    it->second.step_equivalents_rejected += step_equivalents;
  }
}

std::optional<RejectReason> SyncerCore::screen(const std::string& sender_id, uint64_t sequence,
                                               const messages::FragmentUpdate& update) {
  auto it = learners_.find(update.learner_id);
  if (it == learners_.end() || !it->second.active || sender_id != update.learner_id) {
    return RejectReason::unknown_learner;
  }
  if (sequence <= it->second.last_sequence) return RejectReason::duplicate;
  it->second.last_sequence = sequence;
  if (update.tokens_per_sec > 0) it->second.tokens_per_s = update.tokens_per_sec;
  if (update.fragment_id >= fragments_.size() ||
      update.chunk.element_count != static_cast<uint64_t>(fragments_[update.fragment_id].numel)) {
    return RejectReason::wrong_shape;
  }
  return std::nullopt;
}

std::optional<RejectReason> SyncerCore::accept(const UpdateHeader& h, std::vector<float> delta, double now_s) {
  auto& f = fragments_[h.fragment];
  const double share = static_cast<double>(f.numel) / static_cast<double>(std::max<int64_t>(1, total_numel_));
  for (const auto& c : f.pending) {
    if (c.learner_id == h.learner_id && c.base_version == h.base_version) {
      count_reject(RejectReason::duplicate, h.learner_id, h.inner_steps * share);
      return RejectReason::duplicate;
    }
  }
  auto staleness = check_staleness(h.base_version, f.commit_versions, latest_version_, options_.syncer.max_staleness);
  if (!staleness.accept) {
    component_logger("syncer")->warn("rejected update of fragment {} from {}: {}", h.fragment, h.learner_id,
                                     staleness.reason);
    count_reject(RejectReason::stale, h.learner_id, h.inner_steps * share);
    return RejectReason::stale;
  }
  const std::string key = h.learner_id + "/" + std::to_string(h.fragment);
  if (auto last = last_arrival_.find(key); last != last_arrival_.end() && h.inner_steps > 0) {
    ema(timings_.step_s, (now_s - last->second) / h.inner_steps);
  }
  last_arrival_[key] = now_s;

  PendingContribution c;
  c.learner = learner_index(h.learner_id);
  c.learner_id = h.learner_id;
  c.fragment = static_cast<int>(h.fragment);
  c.base_version = h.base_version;
  c.steps = h.inner_steps;
  c.tokens = static_cast<int64_t>(h.tokens);
  c.train_loss = h.train_loss;
  c.staleness = staleness.staleness;
  c.arrived_s = now_s;
  c.delta = std::move(delta);
  if (f.pending.empty()) f.first_arrival_s = now_s;
  f.pending.push_back(std::move(c));
  std::set<std::string> distinct;
  for (const auto& p : f.pending) distinct.insert(p.learner_id);
  const int quorum = std::max(1, std::min(options_.setup.outer.quorum, std::max(1, active_learners())));
  if (f.quorum_reached_s < 0 && static_cast<int>(distinct.size()) >= quorum) {
    f.quorum_reached_s = now_s;
    ema(timings_.quorum_s, now_s - f.first_arrival_s);
  }
  return std::nullopt;
}

std::vector<int> SyncerCore::ready_fragments(double now_s, double* next_deadline_s) {
  *next_deadline_s = -1;
  std::vector<int> ready;
  const double grace = grace_s();
  for (int p = 0; p < fragment_count(); ++p) {
    const auto& f = fragments_[p];
    PendingFragment pending;
    std::set<std::string> distinct;
    for (const auto& c : f.pending) distinct.insert(c.learner_id);
    pending.contributors = static_cast<int>(distinct.size());
    pending.active_learners = active_learners();
    for (const auto& id : distinct) {
      auto it = learners_.find(id);
      if (it != learners_.end() && it->second.active) pending.contributors_active += 1;
    }
    pending.quorum_reached_s = f.quorum_reached_s;
    auto decision = decide_merge(mode_, now_s, pending, options_.setup.outer.quorum, grace);
    if (decision.action == MergeAction::merge_now) {
      ready.push_back(p);
    } else if (decision.action == MergeAction::wait_until) {
      if (*next_deadline_s < 0 || decision.deadline_s < *next_deadline_s) *next_deadline_s = decision.deadline_s;
    }
  }
  return ready;
}

Expected<StagedCommit> SyncerCore::stage(const std::vector<int>& fragment_ids, double now_s) {
  if (in_flight_) return make_error(ErrorCode::conflict, "a commit is already in flight");
  StagedCommit commit;
  commit.version = std::max(latest_version_, last_attempted_version_) + 1;
  last_attempted_version_ = commit.version;
  commit.started_s = now_s;
  nlohmann::json contributors = nlohmann::json::array();
  std::vector<uint64_t> fragment_versions;
  for (const auto& f : fragments_) fragment_versions.push_back(f.version);
  for (int p : fragment_ids) {
    auto& f = fragments_[p];
    if (f.pending.empty()) continue;
    // A fixed merge order (learner index, then arrival) makes sync mode deterministic.
    std::stable_sort(f.pending.begin(), f.pending.end(), [](const auto& a, const auto& b) {
      return a.learner != b.learner ? a.learner < b.learner : a.arrived_s < b.arrived_s;
    });
    std::vector<training::Contribution> inputs;
    for (const auto& c : f.pending) inputs.push_back({c.delta.data(), c.tokens, std::max<int64_t>(1, c.steps)});
    auto merged = training::merge(inputs, f.numel, merge_rule_);
    if (!merged) return merged.error();
    // Decoupled: a round merged in pieces (quorum + grace, stragglers later) must move θ as far as
    // one merged at once, so each piece counts for its share of the round's expected contributors.
    double share = 1.0;
    if (mode_ == "decoupled") {
      std::set<std::string> contributors, expected;
      for (const auto& c : f.pending) contributors.insert(c.learner_id);
      expected = contributors;
      for (const auto& [id, r] : learners_) {
        if (r.active) expected.insert(id);
      }
      share = static_cast<double>(contributors.size()) / static_cast<double>(expected.size());
      for (auto& v : *merged) v = static_cast<float>(v * share);
    }
    commit.fragments.push_back(p);
    commit.previous_parameters.push_back(f.parameters);
    commit.previous_momentum.push_back(f.momentum);
    if (mode_ == "ddp") {
      for (int64_t i = 0; i < f.numel; ++i) f.parameters[i] -= (*merged)[i];  // θ ← θ_local (plain checkpoint)
    } else if (!delayed_.empty()) {
      delayed_[p]->step(f.parameters.data(), merged->data());
      f.momentum = delayed_[p]->momentum_buffer();
    } else {
      training::NesterovOuter outer(f.numel, options_.setup.outer.lr, options_.setup.outer.momentum);
      outer.set_momentum_buffer(std::move(f.momentum));
      outer.step(f.parameters.data(), merged->data());
      f.momentum = outer.momentum_buffer();
    }
    fragment_versions[p] = commit.version;
    for (auto& c : f.pending) {
      contributors.push_back({{"learner", c.learner_id}, {"fragment", p}, {"base", c.base_version}, {"share", share},
                              {"staleness", c.staleness}, {"steps", c.steps}, {"tokens", c.tokens},
                              {"train_loss", c.train_loss}});
      c.delta = {};
      commit.merged.push_back(std::move(c));
    }
    f.pending.clear();
    f.first_arrival_s = f.quorum_reached_s = -1;
  }
  if (commit.fragments.empty()) return make_error(ErrorCode::invalid_argument, "no fragment had pending updates");
  std::vector<int> carried;
  for (int p = 0; p < fragment_count(); ++p) {
    if (std::find(commit.fragments.begin(), commit.fragments.end(), p) == commit.fragments.end()) carried.push_back(p);
  }
  commit.manifest = {{"version", commit.version}, {"mode", mode_}, {"fragments", commit.fragments},
                     {"carried", carried}, {"fragment_versions", fragment_versions},
                     {"contributors", contributors}};
  auto credited = learners_;
  credit(credited, commit.merged, now_s);
  commit.manifest["accounting"] = accounting_json(credited);
  in_flight_ = true;
  return commit;
}

void SyncerCore::commit_succeeded(const StagedCommit& commit, double now_s) {
  in_flight_ = false;
  latest_version_ = commit.version;
  commits_ += 1;
  for (int p : commit.fragments) {
    auto& f = fragments_[p];
    f.version = commit.version;
    f.commit_versions.push_back(commit.version);
    if (f.commit_versions.size() > kCommitHistory) f.commit_versions.erase(f.commit_versions.begin());
  }
  credit(learners_, commit.merged, now_s);
  for (const auto& c : commit.merged) {
    merges_ += 1;
    loss_sum_ += c.train_loss;
    loss_count_ += 1;
  }
  if (loss_count_ > 0) last_train_loss_ = loss_sum_ / loss_count_;
  loss_sum_ = 0;
  loss_count_ = 0;
  ema(timings_.sync_s, now_s - commit.started_s);
}

void SyncerCore::commit_failed(const StagedCommit& commit, const std::string& reason) {
  in_flight_ = false;
  for (size_t i = 0; i < commit.fragments.size(); ++i) {
    auto& f = fragments_[commit.fragments[i]];
    f.parameters = commit.previous_parameters[i];
    f.momentum = commit.previous_momentum[i];
  }
  component_logger("syncer")->error("commit of version {} failed ({}): {} contribution(s) discarded", commit.version,
                                    reason, commit.merged.size());
}

void SyncerCore::credit(std::map<std::string, LearnerRecord>& learners,
                        const std::vector<PendingContribution>& merged, double now_s) const {
  for (const auto& c : merged) {
    auto it = learners.find(c.learner_id);
    if (it == learners.end()) continue;
    auto& r = it->second;
    const double share = static_cast<double>(fragments_[c.fragment].numel) / std::max<int64_t>(1, total_numel_);
    r.contributions_merged += 1;
    r.step_equivalents_merged += c.steps * share;
    r.tokens_merged += static_cast<int64_t>(c.tokens * share);
    if (c.fragment == 0) r.steps_merged_fragment0 += c.steps;
    // Only work sent after the (re)join counts: a dead incarnation's last updates may still merge.
    if (r.first_merge_after_join_s < 0 && c.arrived_s >= r.joined_s) r.first_merge_after_join_s = now_s;
  }
}

nlohmann::json SyncerCore::accounting_json(const std::map<std::string, LearnerRecord>& learners_in) const {
  nlohmann::json learners = nlohmann::json::object();
  for (const auto& [id, r] : learners_in) learners[id] = learner_accounting(r);
  return {{"learners", learners}, {"rejected", rejects_.by_reason}, {"bytes_from_learners", bytes_from_learners},
          {"bytes_to_learners", bytes_to_learners}};
}

void SyncerCore::restore_accounting(const nlohmann::json& a) {
  const nlohmann::json learners = a.value("learners", nlohmann::json::object());
  for (const auto& [id, j] : learners.items()) {
    auto& r = learners_[id];
    r.id = id;
    r.contributions_merged = j.value("contributions_merged", int64_t{0});
    r.contributions_rejected = j.value("contributions_rejected", int64_t{0});
    r.step_equivalents_merged = j.value("step_equivalents_merged", 0.0);
    r.step_equivalents_rejected = j.value("step_equivalents_rejected", 0.0);
    r.steps_merged_fragment0 = j.value("steps_merged_fragment0", int64_t{0});
    r.tokens_merged = j.value("tokens_merged", int64_t{0});
    r.joins = j.value("joins", int64_t{0});
  }
  const nlohmann::json rejected = a.value("rejected", nlohmann::json::object());
  for (const auto& [reason, n] : rejected.items()) {
    rejects_.by_reason[reason] = n.get<int64_t>();
  }
  bytes_from_learners = a.value("bytes_from_learners", int64_t{0});
  bytes_to_learners = a.value("bytes_to_learners", int64_t{0});
}

nlohmann::json SyncerCore::status(double now_s) const {
  nlohmann::json learners = nlohmann::json::object();
  for (const auto& [id, r] : learners_) {
    learners[id] = learner_accounting(r);
    learners[id].update({{"active", r.active}, {"finished", r.finished}, {"joined_version", r.joined_version},
                         {"joined_s", r.joined_s}, {"first_merge_after_join_s", r.first_merge_after_join_s},
                         {"tokens_per_s", r.tokens_per_s}});
  }
  int64_t pending = 0;
  std::vector<uint64_t> fragment_versions;
  for (const auto& f : fragments_) {
    pending += static_cast<int64_t>(f.pending.size());
    fragment_versions.push_back(f.version);
  }
  return {{"mode", mode_},
          {"version", latest_version_},
          {"commits", commits_},
          {"merged_contributions", merges_},
          {"commit_in_flight", in_flight_},
          {"pending", pending},
          {"active_learners", active_learners()},
          {"fragment_versions", fragment_versions},
          {"train_loss", last_train_loss_},
          {"grace_s", grace_s()},
          {"timings", {{"step_s", timings_.step_s}, {"quorum_s", timings_.quorum_s}, {"sync_s", timings_.sync_s}}},
          {"rejected", rejects_.by_reason},
          {"rejected_total", rejects_.total()},
          {"bytes_from_learners", bytes_from_learners},
          {"bytes_to_learners", bytes_to_learners},
          {"learners", learners},
          {"accounting", accounting_json()}};
}

}  // namespace archipelago::actors

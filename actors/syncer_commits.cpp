#include "actors/syncer_commits.hpp"

#include <algorithm>
#include <utility>

#include "common/log.hpp"

namespace archipelago::actors {
namespace {

constexpr size_t kCommitHistory = 64;  // per fragment, for staleness; older bases are stale anyway

}  // namespace

std::vector<int> StagedCommit::fragment_ids() const {
  std::vector<int> ids;
  for (const auto& f : fragments) ids.push_back(f.fragment);
  return ids;
}

const StagedFragment* StagedCommit::find(int fragment) const {
  for (const auto& f : fragments) {
    if (f.fragment == fragment) return &f;
  }
  return nullptr;
}

CommitBook::CommitBook(int fragment_count) : fragment_commits_(static_cast<size_t>(fragment_count), 0) {}

CommitBook::HollowFragment CommitBook::hollow_of(const FragmentState& f) {
  return HollowFragment{stored_entry(f), messages::broadcast_digest(f.broadcast), stored_outer_digest(f)};
}

StagedCommit CommitBook::stage_initial(std::vector<FragmentState>& fragments, double now_s) {
  StagedCommit commit;
  commit.ticket = ++last_ticket_;
  commit.initial = true;
  commit.started_s = now_s;
  for (int p = 0; p < static_cast<int>(fragments.size()); ++p) {
    StagedFragment staged;
    staged.fragment = p;
    hollow_[p] = hollow_of(fragments[p]);
    staged.next = take_values(fragments[p]);  // lent as they are: no copy
    commit.fragments.push_back(std::move(staged));
    in_flight_.insert(p);
  }
  return commit;
}

void CommitBook::lend(int p, FragmentState& f) {
  hollow_[p] = hollow_of(f);
  drop_values(f);
}

void CommitBook::open(StagedCommit& commit, std::vector<FragmentState>& fragments) {
  commit.ticket = ++last_ticket_;
  for (auto& staged : commit.fragments) {
    auto& sum = fragments[staged.fragment].sum;
    sum = sum.fresh();  // merged: a failed commit is sent again as it is (failed)
    in_flight_.insert(staged.fragment);
  }
}

void CommitBook::seal(StagedCommit& commit, const std::vector<FragmentState>& fragments, diloco::Mode mode,
                      nlohmann::json accounting, std::vector<std::map<std::string, double>> known_norms) {
  commit.version = std::max(latest_version_, last_attempted_version_) + 1;
  last_attempted_version_ = commit.version;
  diloco::VersionManifest& m = commit.manifest;
  m = diloco::VersionManifest{};
  m.version = commit.version;
  m.mode = mode;
  m.initial = commit.initial;
  m.fragments = commit.fragment_ids();
  for (int p = 0; p < static_cast<int>(fragments.size()); ++p) {
    const StagedFragment* staged = commit.find(p);
    m.fragment_versions.push_back(staged ? commit.version : fragments[p].version);
    if (!staged) m.carried.push_back(p);
    const auto hollow = hollow_.find(p);
    m.outer_state.push_back(staged                    ? stored_entry(staged->next)
                            : hollow != hollow_.end() ? hollow->second.entry
                                                      : stored_entry(fragments[p]));
    if (!staged || commit.initial) continue;
    for (const auto& c : staged->merged) {
      m.contributors.push_back({c.learner_id, p, c.base_version, staged->share, c.round, c.on_time, c.staleness, c.steps,
                                c.tokens, c.train_loss});
    }
  }
  m.accounting = std::move(accounting);
  m.screening_norms = std::move(known_norms);
}

void CommitBook::succeeded(StagedCommit& commit, std::vector<FragmentState>& fragments) {
  for (const auto& staged : commit.fragments) in_flight_.erase(staged.fragment);
  latest_version_ = std::max(latest_version_, commit.version);
  commits_ += 1;
  double loss_sum = 0;  // train loss of the contributions this commit merged
  int64_t loss_count = 0;
  for (auto& staged : commit.fragments) {
    const int p = staged.fragment;
    for (const auto& c : staged.merged) {
      merges_ += 1;
      loss_sum += c.train_loss;
      loss_count += 1;
    }
    if (!staged.merged.empty()) fragment_commits_[p] += 1;
    hollow_.erase(p);  // its values are back: the staged ones
    // Moves the staged value in; the commit keeps its downlink message for the broadcast.
    fragments[p] = commit_fragment(std::move(staged), std::move(fragments[p]), commit.version, kCommitHistory);
  }
  if (loss_count > 0) last_train_loss_ = loss_sum / loss_count;
}

void CommitBook::failed(StagedCommit& commit, std::vector<FragmentState>& fragments, const std::string& reason) {
  const std::string which = commit.version ? "version " + std::to_string(commit.version)
                                           : "ticket " + std::to_string(commit.ticket);
  failed_commits_ += 1;
  if (commit.initial) {
    for (auto& staged : commit.fragments) {
      in_flight_.erase(staged.fragment);
      hollow_.erase(staged.fragment);
      give_back_values(fragments[staged.fragment], std::move(staged.next));
    }
    component_logger("syncer")->error("commit of {} (the initial parameters) failed ({})", which, reason);
    return;
  }
  size_t merged = 0;
  for (const auto& f : commit.fragments) merged += f.merged.size();
  commit.attempts += 1;
  commit.ticket = ++last_ticket_;
  commit.version = 0;
  commit.manifest = diloco::VersionManifest{};
  component_logger("syncer")->error("commit of {} failed ({}): its {} fragment(s) stay staged, with {} "
                                    "contribution(s), and are sent again as ticket {} (attempt {})",
                                    which, reason, commit.fragments.size(), merged, commit.ticket, commit.attempts + 1);
}

void CommitBook::release_unowned(std::vector<FragmentState>& fragments, const ShardOptions& shard) {
  for (int p = 0; p < static_cast<int>(fragments.size()); ++p) {
    if (shard.owns(p) || hollow_.count(p)) continue;
    auto& f = fragments[p];
    hollow_[p] = hollow_of(f);  // what every record says of it, as version 1 stored it
    drop_values(f);
    f.outer = training::OuterState{};
  }
}

void CommitBook::restored(uint64_t version) {
  latest_version_ = version;
  last_attempted_version_ = std::max(last_attempted_version_, version);
  in_flight_.clear();
  hollow_.clear();
}

nlohmann::json CommitBook::broadcast_digests(const std::vector<FragmentState>& fragments) const {
  nlohmann::json out = nlohmann::json::array();
  for (int p = 0; p < static_cast<int>(fragments.size()); ++p) {
    const auto& f = fragments[p];
    const auto hollow = hollow_.find(p);
    out.push_back({{"version", f.version},
                   {"digest", hollow != hollow_.end() ? hollow->second.digest : messages::broadcast_digest(f.broadcast)},
                   {"outer_digest", hollow != hollow_.end() ? hollow->second.outer_digest : stored_outer_digest(f)},
                   {"arrivals", f.outer.arrivals}});
  }
  return out;
}

}  // namespace archipelago::actors

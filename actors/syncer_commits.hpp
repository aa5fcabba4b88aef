// The syncer's book of commits: staged values of fragments on their way to the checkpoint store,
// the versions they land as, and the committed values lent to them meanwhile. A commit is made in
// two steps: the caller stages new values (stage_fragment) and open() puts them in flight under a
// ticket (the store writes its blobs); seal() then chooses its version and writes its manifest
// once those blobs are durable, and succeeded() swaps the staged values in. A model version is the
// vector of its fragments' versions (`fragment_versions` in every manifest); the version numbers
// the records in the order they land, each carrying the fragments it did not change.
//
// Invariants: at most one commit per fragment is in flight; versions are strictly increasing and
// never reused, not even one a failed commit had chosen (it may still land at the store). While a
// fragment's commit is in flight its committed θ_p, B_p and outer state are let go (lent): its
// stored entry and digests are kept here, so that a fragment is held about once, not twice. A
// failed commit therefore stays staged and in flight under a new ticket, to be sent again (nobody
// has seen its value yet); a failed initial commit hands its values back instead. A syncer shard
// keeps no values of the fragments it does not own once version 1 (or the version it restored) is
// committed: their stored entries stand for them in every record. Owned by SyncerCore; one thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/fragment_state.hpp"
#include "actors/runtime_options.hpp"
#include "diloco/version_manifest.hpp"

namespace archipelago::actors {

// One commit being made durable: the staged value of every merged fragment and, once sealed, its
// version and manifest.
struct StagedCommit {
  uint64_t ticket = 0;    // names it at the store before it has a version
  uint64_t version = 0;   // 0 until seal()
  bool initial = false;   // the initial parameters (stage_initial)
  std::vector<StagedFragment> fragments;
  diloco::VersionManifest manifest;  // made by seal()
  double started_s = 0;
  int attempts = 0;          // failed attempts so far (commit_failed)
  double resend_at_s = -1;   // a failed commit waits until then to be sent again (−1: sent)
  double handed_s = -1;      // when its last chunk went to the store: its timeout counts from then
                             // (its chunks wait their turn behind other commits' first; −1: not yet)

  std::vector<int> fragment_ids() const;
  const StagedFragment* find(int fragment) const;
};

class CommitBook {
 public:
  explicit CommitBook(int fragment_count);

  uint64_t latest_version() const { return latest_version_; }
  bool in_flight() const { return !in_flight_.empty(); }
  bool in_flight(int p) const { return in_flight_.count(p) > 0; }
  const std::set<int>& fragments_in_flight() const { return in_flight_; }

  // Version 1 of a fresh run: every fragment's values, lent to the commit as they are (no copy).
  StagedCommit stage_initial(std::vector<FragmentState>& fragments, double now_s);
  // Lets fragment p's committed values go while a staged value of it is in flight.
  void lend(int p, FragmentState& f);
  // Puts a commit of staged (and lent) fragments in flight under a new ticket; what arrives from
  // now on starts new running sums, the staged values hold what this one merged.
  void open(StagedCommit& commit, std::vector<FragmentState>& fragments);
  // Chooses the version of a commit whose blobs are durable (the next number) and writes its
  // manifest: the other fragments as committed, `accounting` and the screening's `known_norms`.
  void seal(StagedCommit& commit, const std::vector<FragmentState>& fragments, diloco::Mode mode,
            nlohmann::json accounting, std::vector<std::map<std::string, double>> known_norms);
  // Swaps the staged values in (keeping what arrived meanwhile pending); empties the commit's values.
  void succeeded(StagedCommit& commit, std::vector<FragmentState>& fragments);
  // Keeps a failed commit staged and in flight under a new ticket, or hands an initial one's values back.
  void failed(StagedCommit& commit, std::vector<FragmentState>& fragments, const std::string& reason);
  // Drops the values of the fragments another shard owns (their stored entries stand for them).
  void release_unowned(std::vector<FragmentState>& fragments, const ShardOptions& shard);
  // A committed version was restored: it is the latest, nothing is in flight or lent.
  void restored(uint64_t version);

  // Per fragment: version and digest of B_p, digest of the stored outer-state blob, Delayed
  // Nesterov's count (of the committed value, also while it is lent).
  nlohmann::json broadcast_digests(const std::vector<FragmentState>& fragments) const;
  int64_t commits() const { return commits_; }
  int64_t failed_commits() const { return failed_commits_; }
  int64_t merged_contributions() const { return merges_; }
  double train_loss() const { return last_train_loss_; }  // mean of the last commit that merged any
  const std::vector<int64_t>& fragment_commits() const { return fragment_commits_; }

 private:
  // What is kept of a fragment whose values are not held: another shard's (released for good) or
  // one lent to its commit in flight (until the commit lands).
  struct HollowFragment {
    nlohmann::json entry;       // stored_entry of its committed value: what records carrying it say
    uint64_t digest = 0;        // of B_p
    uint64_t outer_digest = 0;  // of the stored outer-state blob
  };
  static HollowFragment hollow_of(const FragmentState& f);

  uint64_t latest_version_ = 0;
  uint64_t last_attempted_version_ = 0;  // a timed-out commit may still land: never reuse its number
  std::set<int> in_flight_;              // fragments with a commit under way
  uint64_t last_ticket_ = 0;
  std::map<int, HollowFragment> hollow_;  // fragments whose values are not held (released or lent)
  std::vector<int64_t> fragment_commits_;  // per fragment, commits that merged something since this syncer started
  int64_t commits_ = 0;
  int64_t failed_commits_ = 0;  // attempts that failed (each sent again, or a restore for the initial one)
  int64_t merges_ = 0;
  double last_train_loss_ = 0;
};

}  // namespace archipelago::actors

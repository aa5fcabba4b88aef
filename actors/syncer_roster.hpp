// The syncer's roster of learners: one record per learner id, kept across its incarnations (a
// rejoin starts a new incarnation of the same record), with what it has been credited and refused
// (the goodput ledger's inputs) and what the rules need of it: whether it is active, its throughput,
// its data position per fragment and the schedule slot of its last accepted update.
//
// Invariants: a record is created by a join (or an accepted update), never removed; `active` is
// true from a join until a leave; credits and charges only grow; `received_until[p]` and
// `last_round[p]` only move forward. The counters every committed version carries are
// accounting() (restore_accounting reads them back); the rest is this process's.
// Owned by SyncerCore; one thread.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "actors/fragment_state.hpp"
#include "actors/status.hpp"

namespace archipelago::actors {

// The persisted counters (LearnerAccounting, status.hpp: joins, merged and refused work, tokens, the
// data position received_until per fragment) and this process's view of the learner.
struct LearnerRecord : LearnerAccounting {
  std::string id;
  bool active = false;            // joined and not dead / finished since
  bool finished = false;
  uint64_t last_sequence = 0;     // of the current incarnation (reset by Join)
  uint64_t joined_version = 0;    // committed version when it last joined
  double joined_s = -1;
  double first_merge_after_join_s = -1;  // first commit carrying its work after its last join
  double tokens_per_s = 0;               // its throughput, as its last update reported it
  int64_t last_staleness = -1;           // of its last merged contribution (-1: none yet)
  int64_t rounds_missed = 0;             // sync rounds merged at their deadline without it
  std::vector<int64_t> last_round;       // per fragment: schedule slot of its last accepted update (-1: none)
};

class LearnerRoster {
 public:
  // A new incarnation of `id` (authenticated by the caller): active, a fresh sequence, joined now at
  // `committed_version`; its record is created on its first join.
  const LearnerRecord& join(const std::string& id, uint64_t committed_version, double now_s, int fragment_count);
  // It is dead or finished: no longer active (finished stays once set). False when unknown.
  bool leave(const std::string& id, bool finished);
  // The record of `id`, created when it has none, with a data position for every fragment.
  LearnerRecord& record(const std::string& id, int fragment_count);
  LearnerRecord* find(const std::string& id);
  const LearnerRecord* find(const std::string& id) const;
  const std::map<std::string, LearnerRecord>& records() const { return records_; }

  // An update of fragment p spanning up to `to_step`, sent in schedule slot `round`, was accepted.
  void accepted(const std::string& id, int p, uint64_t to_step, uint64_t round, int fragment_count);
  // A merged contribution that landed: `share` is its fragment's share of the model's parameters.
  void credit(const PendingContribution& c, double share, double now_s);
  // A refusal of its update or join (nothing when `id` is unknown).
  void charge_rejected(const std::string& id, double step_equivalents, double compute_s);

  int active_count() const;
  std::set<std::string> active_ids() const;
  // A sync round was merged at its deadline without `id` (an active learner that sent nothing for it).
  void missed_round(const std::string& id);
  // The highest throughput among active learners (0: none reported).
  double fastest_tokens_per_s() const;
  // The furthest to_step of any learner's accepted work, active or not (0: none).
  uint64_t leading_step() const;
  // The latest schedule slot of fragment p any active learner sent (−1: none).
  int64_t leading_slot(int p) const;

  // Per learner, the counters a committed version carries; and back (they replace this process's).
  std::map<std::string, LearnerAccounting> accounting() const;
  void restore_accounting(const std::map<std::string, LearnerAccounting>& learners);
  // Per learner, those counters and the state of this process (active, joined, throughput, staleness).
  std::map<std::string, SyncerLearnerStatus> status() const;

 private:
  std::map<std::string, LearnerRecord> records_;
};

}  // namespace archipelago::actors

// Admission of learners' updates by the syncer: the checks of an update's envelope before its
// chunks are reassembled (known, active learner sending as itself, fresh sequence, shape, owner),
// and the decision on a whole update (diloco/admission.hpp: plausible claim, not a duplicate, not
// stale), logged once per refusal; what an admitted update is credited with (the syncer's figures,
// never the learner's claims), and the pending contribution it becomes.
//
// Invariant: a refusal changes nothing here but what the caller counts (SyncerCore::count_reject),
// except that a learner's record exists once its update made a plausible claim; an admitted claim
// that differed from its credited figures is counted in claims_corrected (persisted with every
// committed version's accounting) and logged once per learner. Owned by SyncerCore; one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/fragment_state.hpp"
#include "actors/syncer_rejects.hpp"
#include "actors/syncer_roster.hpp"
#include "actors/syncer_settings.hpp"
#include "messages/message_types.hpp"

namespace archipelago::actors {

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

// Envelope-level checks before a chunk is reassembled: a known, active learner sending as itself,
// a fresh sequence (recorded, with the throughput the update reports), the fragment's shape, this
// shard's fragment. Returns the reject reason or nothing; the caller counts it.
std::optional<RejectReason> screen_envelope(const std::string& sender_id, uint64_t sequence,
                                            const messages::FragmentUpdate& update, LearnerRoster& roster,
                                            const std::vector<FragmentState>& fragments, const ShardOptions& shard);

class UpdateAdmission {
 public:
  struct Admitted {
    std::optional<Rejection> rejected;  // what to count, when it is refused
    int64_t steps = 0;                  // credited (diloco::credit_work)
    int64_t tokens = 0;
    int64_t staleness = 0;
  };
  // Admits or refuses a whole update of fragment h.fragment (diloco::admit_update), with the
  // learner's record in `roster` (created here once the claim is plausible). `share`: the
  // fragment's share of the model's parameters, what a refused update's work is charged at.
  Admitted admit(const UpdateHeader& h, const std::vector<FragmentState>& fragments, LearnerRoster& roster,
                 uint64_t latest_version, const SyncerSettings& settings, double share);
  // Seconds per inner step since the learner's previous update of this fragment; for its first, its own
  // compute time per step (none when it reports none).
  std::optional<double> step_time(const UpdateHeader& h, int64_t credited_steps, double now_s);
  // The pending contribution an admitted update becomes (its Δ still to be measured and folded).
  static PendingContribution contribution(const UpdateHeader& h, const Admitted& admitted, bool on_time, double now_s);

  // Admitted updates whose claimed steps or tokens differed from what they were credited with.
  int64_t claims_corrected() const { return claims_corrected_; }
  void restore_claims_corrected(int64_t count) { claims_corrected_ = count; }

 private:
  int64_t claims_corrected_ = 0;
  std::set<std::string> claims_logged_;         // learners whose corrected claim was logged (once each)
  std::map<std::string, double> last_arrival_;  // "learner/fragment" -> time, for step-time estimates
};

}  // namespace archipelago::actors

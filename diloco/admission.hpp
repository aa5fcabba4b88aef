// Whether the syncer admits a learner's whole update, as one decision on plain values: its claim
// (credit_work: 0 steps is implausible), whether it repeats work already accepted (duplicate), and
// its base version (check_staleness), checked in that order, so that an implausible claim is
// refused before it is credited with any work and a repeat before its staleness is measured. An
// admitted update carries the work it is credited with (the syncer's figures, never the learner's
// claims) and its staleness. The syncer gathers the inputs and acts on the answer
// (actors/syncer_admission.hpp). Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "diloco/merge_rules.hpp"
#include "diloco/mode.hpp"

namespace archipelago::diloco {

enum class UpdateRefusal { none, implausible_claim, duplicate, stale };

// What an update claims and spans, from its header.
struct UpdateClaim {
  uint64_t inner_steps = 0;
  uint64_t tokens = 0;
  uint64_t base_version = 0;
  uint64_t from_step = 0;  // the learner's data position its work starts at
};

// What the syncer knows of the fragment and of the learner's earlier updates of it.
struct AdmissionState {
  uint64_t received_until = 0;     // to_step of the learner's last accepted update of the fragment (0: none)
  bool same_base_pending = false;  // an update of the learner on the same base version is pending
  std::vector<uint64_t> commit_versions;  // the fragment's recent versions, ascending (check_staleness)
  uint64_t latest_version = 0;
};

struct AdmissionBounds {
  int largest_period = 1;       // the schedule's largest H (credit_work)
  int64_t tokens_per_step = 0;  // what a credited step is worth
  int max_staleness = 0;
};

struct AdmissionDecision {
  UpdateRefusal refused = UpdateRefusal::none;
  CreditedWork work;       // credit_work's answer (steps 0 when the claim is implausible)
  int64_t staleness = 0;   // of an admitted or stale update
  std::string reason;      // why it was refused
};

// Duplicates, by mode. Staggered modes (a learner's data position only moves on): work that starts
// before the end of work already accepted from the learner was sent before, e.g. by its previous
// incarnation after the checkpoint it restarted from, and merging it again would count those steps
// twice; two pending updates on one base are distinct work there. Sync and ddp (a restarted learner
// redoes its round from the same base): a second update of the learner on a base it has pending.
AdmissionDecision admit_update(Mode mode, const UpdateClaim& claim, const AdmissionState& state,
                               const AdmissionBounds& bounds);

}  // namespace archipelago::diloco

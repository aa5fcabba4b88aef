// The syncer's state of one parameter fragment as a value, and the pure steps that move it.
//
// A FragmentState holds everything the outer optimizer knows about fragment p: the global parameters
// θ_p, the broadcast state B_p every learner holds (messages/broadcast.hpp), the whole outer-optimizer
// state (Nesterov momentum, Delayed Nesterov's accumulator and arrival count), the versions at which
// θ_p changed (for staleness), the decoupled schedule's open round and the pending contributions.
//
// Life of a commit: stage_fragment() reads a state and returns a *new* value (merge, outer step,
// downlink encoding) without touching the current one, or non_finite if that value would hold
// NaN/Inf anywhere (the caller then drops the stage); once the checkpoint store committed it,
// commit_fragment() swaps it in, keeping the contributions that arrived meanwhile. Meanwhile the
// syncer lends the current value's θ_p, B_p and outer state (drop_values: its CommitBook,
// actors/syncer_commits.hpp, keeps their digests and stored entry), and sends a failed commit
// again as it is. to_stored()/from_stored() are what a committed version persists, so a restarted
// syncer resumes with the same value. This value is the unit a syncer shard owns. Pure functions
// over values: any thread; a value has one owner.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "messages/broadcast.hpp"
#include "common/error.hpp"
#include "diloco/mode.hpp"
#include "messages/tensor_codec.hpp"
#include "training/outer.hpp"

namespace archipelago::actors {

struct PendingContribution {
  int learner = -1;
  int fragment = 0;
  std::string learner_id;
  uint64_t base_version = 0;
  uint64_t round = 0;        // decoupled: the schedule slot the learner sent it in
  bool on_time = true;       // counts towards the quorum of the fragment's open round
  int64_t steps = 0;         // credited to it by the syncer (diloco/merge_rules.hpp, credit_work)
  int64_t tokens = 0;        // ... steps × the configured tokens per step: the merge weight's inputs
  float train_loss = 0;
  double compute_s = 0;      // the learner's compute time behind it
  int64_t staleness = 0;
  double arrived_s = 0;
  double norm = 0;           // ‖Δ‖ as received (rda)
  double screen_norm = 0;    // ‖Δ‖ / Σ inner lr over its steps (screening: actors/syncer_screen.hpp)
  float scale = 1;           // < 1: clipped by screening to this fraction of Δ
  bool screened = true;      // false: held until enough norms are known to screen it (syncer_screen.hpp)
  // Δ = θ_p(base) − θ_local,p: held only until it is folded into the running sum, and kept for
  // Delayed Nesterov's per-arrival steps (a merge that is not a sum).
  std::vector<float> delta;
  // Or, for an update held by screening that arrived quantized, its codes as they came (int4 is 1/8
  // of the fp32 Δ), folded from the codes once it is judged.
  messages::Codec codec = messages::Codec::fp32;
  std::vector<uint8_t> encoded;
};

struct FragmentState {
  int64_t numel = 0;
  std::vector<float> parameters;          // θ_p
  double parameters_norm = 0;             // ‖θ_p‖, set wherever θ_p is (kept while θ_p is lent to a commit)
  std::vector<float> broadcast;           // B_p: what a learner holding `version` holds, bit for bit
  training::OuterState outer;             // momentum (+ Delayed Nesterov's accumulator and count)
  uint64_t version = 0;                   // version at which θ_p (and B_p) last changed
  std::vector<uint64_t> commit_versions;  // recent versions at which θ_p changed, ascending
  uint64_t next_round = 0;                // decoupled: lowest schedule slot whose round is not closed
  std::vector<PendingContribution> pending;
  training::MergeAccumulator sum;         // the folded pending contributions' running merge sum
  double quorum_reached_s = -1;           // when the on-time contributors reached the quorum
};

// How a fragment's merges are made: fixed for a run.
struct FragmentRules {
  diloco::Mode mode = diloco::Mode::sync;
  training::MergeRule merge = training::MergeRule::token_weighted;
  diloco::OuterRule outer = diloco::OuterRule::nesterov;  // outer.optimizer as the mode runs it
  double lr = 0.7;
  double momentum = 0.9;
  int64_t momentum_warmup = 0;            // momentum ramps over this many momentum updates (training::warmed_momentum)
  int delayed_every = 4;                  // delayed_nesterov's N (arrivals)
  int expected_learners = 1;              // the learners a round expects (train.learners)
  int64_t inner_steps = 1;                // H: a round of work is expected_learners × H inner steps
  messages::Codec downlink = messages::Codec::fp32;
  int merge_threads = 1;                  // threads of a pass over the fragment (common/parallel.hpp)
};

// Whether `rule` keeps an accumulator beside the momentum (work_clock, delayed_nesterov).
bool keeps_accumulator(diloco::OuterRule rule);

// The share of a round that `contributions` merged together count for: contributions ÷ the learners
// a round expects, so that the pieces of one round add up to at most 1 whoever has left or finished
// (1 in sync and ddp, whose commits are whole rounds).
double commit_share(const FragmentRules& rules, size_t contributions);

// A fresh fragment: θ = B = `initial`, zero outer state, version 1.
FragmentState initial_fragment(std::vector<float> initial, const FragmentRules& rules);

struct StagedFragment {
  int fragment = -1;
  FragmentState next;                      // without pending contributions
  std::vector<PendingContribution> merged; // the contributions it merged, deltas dropped
  messages::BroadcastMessage downlink;               // Q(θ_new − B_old), or θ_new
  double share = 1.0;                      // the merged Δ's scale (commit_share)
};

// A copy of `state` without its pending contributions (and so without a reached quorum): what a
// staged value starts from. The deltas of the pending contributions are most of a value's bytes.
FragmentState without_pending(const FragmentState& state);

// Merges every pending contribution of `current` and steps the outer optimizer: the running sum,
// into which every one must have been folded with the weight of its `steps` and `tokens` (the
// syncer's credited figures, not the learner's claims; invalid_argument when one was not). The
// merged Δ is scaled by commit_share; then by rules.outer: nesterov and per_commit_nesterov take one
// Nesterov step, work_clock training::work_clock_step with the steps merged, memoryless a plain step,
// average (ddp) θ ← θ − merged Δ, delayed_nesterov one arrival per contribution's Δ in arrival order.
// non_finite when the staged θ_p, B_p, momentum or accumulator would hold NaN/Inf (finite but
// enormous updates can overflow): such a value is never returned, so it is never committed.
Expected<StagedFragment> stage_fragment(int fragment, const FragmentState& current, const FragmentRules& rules);
// The staged value with the contributions that arrived after staging (kept pending, their on-time
// flags re-checked against the new round; `current.sum` must hold just those, as the syncer keeps
// it). Takes `staged.next`; `staged.downlink` stays for the broadcast. `history` bounds commit_versions.
FragmentState commit_fragment(StagedFragment&& staged, FragmentState&& current, uint64_t version, size_t history);

// What a version stores of a fragment: B_p as its parameters (served to joining learners), the outer
// state blob (θ_p when it differs from B_p, momentum, accumulator) and a JSON entry describing it.
struct StoredFragment {
  std::vector<float> broadcast;
  std::vector<float> outer;
  nlohmann::json entry;
};
StoredFragment to_stored(const FragmentState& state);
// The outer-state blob's parts in their stored order, viewed in place: what a persist streams
// without concatenating them (a copy of 2–3 fragments' worth per commit).
std::vector<const std::vector<float>*> stored_outer_parts(const FragmentState& state);
// broadcast_digest of the stored outer-state blob, read from its parts (no concatenated copy).
uint64_t stored_outer_digest(const FragmentState& state);
// θ_p, B_p and the outer state moved out of `state` into a value without pending contributions (a
// commit of the values as they are, without a copy), and moved back.
FragmentState take_values(FragmentState& state);
void give_back_values(FragmentState& state, FragmentState&& taken);
// Lets θ_p, B_p and the outer momentum and accumulator go (counters and versions stay).
void drop_values(FragmentState& state);
// The JSON entry alone (no copies of the tensors).
nlohmann::json stored_entry(const FragmentState& state);
// Rebuilds a committed value; `entry` may be null (stores written before the entry existed: the blob
// is the momentum alone and θ = B). inconsistent on wrong sizes.
Expected<FragmentState> from_stored(std::vector<float> broadcast, std::vector<float> outer, const nlohmann::json& entry,
                                    uint64_t version, const FragmentRules& rules);

}  // namespace archipelago::actors

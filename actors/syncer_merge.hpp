// The streaming merge of one fragment's round, as steps on its FragmentState (fragment_state.hpp):
// an accepted update is measured as it came (its norm, from the codes of a quantized one, never
// decoded), then folded into the round's running sum with its merge weight, or held as it came
// until screening judges it (actors/syncer_screen.hpp); the time the round reached its quorum; the
// tally decide_merge reads and the share a merge counts for (diloco/rounds.hpp); a merge that
// came out non-finite dropped with what it held.
//
// Invariant: every pending contribution marked screened has been folded into `f.sum` exactly once
// (Delayed Nesterov's per-arrival steps keep its Δ instead: not a sum); a held one is not in the
// sum and keeps its Δ or its codes. Pure steps on values the caller owns; one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/fragment_state.hpp"
#include "common/error.hpp"
#include "diloco/rounds.hpp"
#include "messages/tensor_codec.hpp"

namespace archipelago::actors {

// An update as it came: a quantized one (int8, int4) as its codes, other codecs decoded.
struct UpdatePayload {
  messages::Codec codec = messages::Codec::fp32;
  std::vector<uint8_t> encoded;  // quantized codecs
  std::vector<float> values;     // otherwise
};

// An update measured and ready to fold or hold: its codes when it is folded straight from them
// (a quantized update, unless Delayed Nesterov needs its Δ), else its Δ decoded.
struct MeasuredUpdate {
  double norm = 0;  // ‖Δ‖ as received
  messages::Codec codec = messages::Codec::fp32;
  std::vector<uint8_t> encoded;
  std::vector<float> delta;
  bool fused() const { return !encoded.empty(); }
};
// non_finite or malformed when the codes' scales or the size (`numel`) are bad.
Expected<MeasuredUpdate> measure_update(UpdatePayload payload, int64_t numel, const FragmentRules& rules);

// Keeps the update in `c` as it came (codes or Δ) until screening judges it: not folded.
void hold_update(PendingContribution& c, MeasuredUpdate&& update);
// Folds a screened update into f's running sum with c's merge weight (times c.scale).
void fold_update(FragmentState& f, PendingContribution& c, MeasuredUpdate&& update, const FragmentRules& rules);
// The same for Δ decoded (Delayed Nesterov keeps it in `c`), and for codes (checked already).
void fold(FragmentState& f, PendingContribution& c, std::vector<float> delta, const FragmentRules& rules);
void fold_encoded(FragmentState& f, PendingContribution& c, messages::Codec codec,
                  const std::vector<uint8_t>& encoded, const FragmentRules& rules);

// Marks when f's on-time contributors reached `quorum` (diloco::quorum_time); returns how long that
// took when it was reached just now (the syncer's quorum timing).
std::optional<double> mark_quorum(FragmentState& f, int quorum, double now_s);
// What decide_merge reads of f, given the active learners.
diloco::PendingFragment tally_of(const FragmentState& f, const std::set<std::string>& active);

// Drops fragment p's pending contributions and running sum after their merge came out non-finite
// (`why`), logged once; the caller counted each. Kept, they would make the same merge again.
void drop_merge(int p, FragmentState& f, const std::string& why);

// Bytes f's round holds: the running sum and the deltas or codes held.
int64_t pending_bytes(const FragmentState& f);

}  // namespace archipelago::actors

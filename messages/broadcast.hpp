// The compressed downlink: how the syncer turns a fragment's new global θ_p into one GlobalFragment
// payload, and how every receiver turns that payload back into the same broadcast state B_p.
//
// The syncer keeps B_p, the state every learner that installed the last broadcast holds. With a lossy
// `downlink_codec` it sends Q(θ_p − B_p) and sets B_p ← B_p + deQ(message); a receiver holding B_p of
// the message's base version does the same float adds in the same order, so both hold B_p bit for bit.
// What the codec dropped stays in θ_p − B_p and goes out with the next broadcast (error feedback kept
// by the sender). With fp32 the payload is θ_p itself and B_p = θ_p exactly. A receiver that does not
// hold the base version (it missed a broadcast, or has just joined) fetches B_p from the checkpoint
// store, which persists B_p as the fragment's parameters.
// Pure functions, no actors: any thread. The syncer (actors/fragment_state.cpp) encodes; learners and the
// evaluator apply.
#pragma once

#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "messages/tensor_codec.hpp"

namespace archipelago::messages {

// One encoded broadcast of a fragment. `delta_base` 0: `payload` holds the values; otherwise a delta
// against B of version `delta_base`.
struct BroadcastMessage {
  Codec codec = Codec::fp32;
  uint64_t delta_base = 0;
  std::vector<uint8_t> payload;
};

// Encodes the broadcast of `theta` to receivers holding `broadcast` (B_p of version `base_version`,
// 0 = receivers hold nothing yet, which forces absolute values) and advances `broadcast` to what they
// will hold after applying it. non_finite when θ − B cannot be encoded.
Expected<BroadcastMessage> encode_broadcast(Codec codec, const std::vector<float>& theta,
                                            std::vector<float>& broadcast, uint64_t base_version);

// A receiver's copy of B_p and the version it belongs to.
struct BroadcastCopy {
  uint64_t version = 0;       // 0: nothing held
  std::vector<float> values;  // B_p
};
enum class ApplyResult { applied, old, gap };
// Applies a received, decoded broadcast of `version`: absolute values replace the copy; a delta is
// added when the copy holds `delta_base` (else `gap`: fetch B_p from the store). `old`: not newer than
// the copy; nothing changes.
ApplyResult apply_broadcast(BroadcastCopy& copy, uint64_t version, uint64_t delta_base, std::vector<float>&& decoded);

// XXH3-64 of B_p's fp32 bytes: receivers and the syncer compare copies with it.
uint64_t broadcast_digest(const std::vector<float>& values);

}  // namespace archipelago::messages

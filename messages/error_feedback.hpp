// Error feedback for lossy tensor codecs: what quantization drops this send is added back next time.
//
// One ErrorFeedback per (sender, tensor) — e.g. per learner and fragment — holds the residual
// r = (x + r_prev) - decode(encode(x + r_prev)). Invariant: after every successful send, the sum of
// everything decoded so far plus the residual equals the sum of every input (up to fp32 rounding),
// so compression error stays bounded by one step's error instead of accumulating over sends.
// Not thread-safe: one owner (the learner that sends the tensor) calls it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "messages/tensor_codec.hpp"

namespace archipelago::messages {

class ErrorFeedback {
 public:
  // Encodes values + residual with `codec` into `out` and stores the new residual. The tensor size
  // is fixed by the first call: a different `count` later is invalid_argument (call reset() when a
  // fragment is re-shaped). On error (non_finite input, ...) the residual is left unchanged.
  Status encode(Codec codec, const float* values, size_t count, std::vector<uint8_t>& out);

  // Forgets the residual, e.g. after a rejoin when the learner restarts from global state.
  void reset();

  // The error still owed to the receiver (empty before the first send).
  const std::vector<float>& residual() const { return residual_; }

 private:
  std::vector<float> residual_;
  // Scratch reused across sends so steady-state encoding does not allocate.
  std::vector<float> corrected_;
  std::vector<float> decoded_;
};

// Free-function spelling of ErrorFeedback::encode.
inline Status encode_with_feedback(ErrorFeedback& feedback, Codec codec, const float* values,
                                   size_t count, std::vector<uint8_t>& out) {
  return feedback.encode(codec, values, count, out);
}

}  // namespace archipelago::messages

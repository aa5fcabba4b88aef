#include "messages/error_feedback.hpp"

#include <string>

namespace archipelago::messages {

Status ErrorFeedback::encode(Codec codec, const float* values, size_t count,
                             std::vector<uint8_t>& out) {
  if (!residual_.empty() && residual_.size() != count) {
    return make_error(ErrorCode::invalid_argument,
                      "error feedback holds a residual of " + std::to_string(residual_.size()) +
                          " elements, got a tensor of " + std::to_string(count));
  }
  if (residual_.empty()) residual_.assign(count, 0.0f);
  corrected_.resize(count);
  for (size_t i = 0; i < count; ++i) corrected_[i] = values[i] + residual_[i];

  Status encoded = encode_tensor(codec, corrected_.data(), count, out);
  if (!encoded) return encoded;
  decoded_.resize(count);
  Status decoded = decode_tensor(codec, out.data(), out.size(), decoded_.data(), count);
  if (!decoded) return decoded;
  for (size_t i = 0; i < count; ++i) residual_[i] = corrected_[i] - decoded_[i];
  return Status::success();
}

void ErrorFeedback::reset() {
  residual_.clear();
  corrected_.clear();
  decoded_.clear();
}

}  // namespace archipelago::messages

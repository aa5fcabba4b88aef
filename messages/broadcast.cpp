#include "messages/broadcast.hpp"

#include "messages/chunking.hpp"

namespace archipelago::messages {

Expected<BroadcastMessage> encode_broadcast(Codec codec, const std::vector<float>& theta,
                                            std::vector<float>& broadcast, uint64_t base_version) {
  BroadcastMessage message;
  message.codec = codec;
  if (codec == Codec::fp32 || base_version == 0 || broadcast.size() != theta.size()) {
    message.codec = Codec::fp32;
    Status encoded = encode_tensor(Codec::fp32, theta.data(), theta.size(), message.payload);
    if (!encoded) return encoded.error();
    broadcast = theta;
    return message;
  }
  std::vector<float> delta(theta.size());
  for (size_t i = 0; i < theta.size(); ++i) delta[i] = theta[i] - broadcast[i];
  Status encoded = encode_tensor(codec, delta.data(), delta.size(), message.payload);
  if (!encoded) return encoded.error();
  // What every receiver will decode, so B advances exactly as theirs do.
  Status decoded = decode_tensor(codec, message.payload.data(), message.payload.size(), delta.data(),
                                           delta.size());
  if (!decoded) return decoded.error();
  for (size_t i = 0; i < delta.size(); ++i) broadcast[i] += delta[i];
  message.delta_base = base_version;
  return message;
}

ApplyResult apply_broadcast(BroadcastCopy& copy, uint64_t version, uint64_t delta_base, std::vector<float>&& decoded) {
  if (version <= copy.version) return ApplyResult::old;
  if (delta_base == 0) {
    copy.values = std::move(decoded);
    copy.version = version;
    return ApplyResult::applied;
  }
  if (copy.version != delta_base || copy.values.size() != decoded.size()) return ApplyResult::gap;
  for (size_t i = 0; i < decoded.size(); ++i) copy.values[i] += decoded[i];
  copy.version = version;
  return ApplyResult::applied;
}

uint64_t broadcast_digest(const std::vector<float>& values) {
  return messages::chunk_checksum(reinterpret_cast<const uint8_t*>(values.data()), values.size() * sizeof(float));
}

}  // namespace archipelago::messages

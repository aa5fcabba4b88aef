#include "messages/framing.hpp"

#include <cstring>
#include <memory>

#include "messages/tensor_codec.hpp"

namespace archipelago::messages {

Expected<WireBytes> Outbox::wrap(Message body) {
  Envelope envelope;
  envelope.sender_id = sender_id_;
  envelope.sequence = ++sequence_;
  envelope.body = std::move(body);
  std::vector<uint8_t> out;
  Status status = encode(envelope, out);
  if (!status) return status.error();
  bytes_ += out.size();
  return WireBytes(out.begin(), out.end());
}

Expected<uint32_t> Outbox::stream_tensor(Codec codec, uint64_t element_count, const std::vector<ByteView>& parts,
                                         const std::function<Message(TensorChunk)>& make_body,
                                         const std::function<void(WireBytes&&)>& send, uint32_t first_chunk,
                                         uint32_t chunk_limit) {
  return for_each_chunk(
      codec, element_count, parts,
      [&](TensorChunk&& chunk) -> Status {
        auto bytes = wrap(make_body(std::move(chunk)));
        if (!bytes) return bytes.error();
        send(std::move(*bytes));
        return Status::success();
      },
      kMaxChunkBytes, first_chunk, chunk_limit);
}

Expected<std::vector<WireBytes>> Outbox::wrap_tensor(Codec codec, uint64_t element_count,
                                                     const std::vector<uint8_t>& encoded,
                                                     const std::function<Message(TensorChunk)>& make_body) {
  std::vector<WireBytes> out;
  auto wrapped = stream_tensor(codec, element_count, {ByteView{encoded.data(), encoded.size(), nullptr}}, make_body,
                               [&](WireBytes&& bytes) { out.push_back(std::move(bytes)); });
  if (!wrapped) return wrapped.error();
  return out;
}

Expected<DecodedEnvelope> unwrap(WireBytes&& bytes, const DecodeLimits& limits) {
  auto owned = std::make_shared<const WireBytes>(std::move(bytes));
  return decode(ByteView{reinterpret_cast<const uint8_t*>(owned->data()), owned->size(), owned}, limits);
}

Expected<TensorInbox::Result> TensorInbox::add(const std::string& key, const TensorChunk& chunk, bool keep_quantized) {
  auto it = streams_.find(key);
  if (it != streams_.end() && chunk.chunk_index == 0) {
    streams_.erase(it);
    streams_cut_ += 1;
    it = streams_.end();
  }
  if (it == streams_.end()) it = streams_.emplace(key, Reassembler(kMaxTensorBytes)).first;
  Status status = it->second.add(chunk);
  if (!status) {
    streams_.erase(it);
    return status.error();
  }
  Result result;
  if (!it->second.complete()) return result;
  const Codec codec = it->second.codec();
  const uint64_t count = it->second.element_count();
  auto bytes = it->second.take();
  streams_.erase(it);
  if (!bytes) return bytes.error();
  result.codec = codec;
  if (keep_quantized && is_quantized(codec)) {
    result.complete = true;
    result.encoded = std::move(*bytes);
    return result;
  }
  auto values = decode_tensor(codec, bytes->data(), bytes->size(), count);
  if (!values) return values.error();
  result.complete = true;
  result.values = std::move(*values);
  return result;
}

std::vector<float> bytes_to_floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

}  // namespace archipelago::messages

#include "actors/wire.hpp"
#include "actors/directory.hpp"

#include <chrono>
#include <cstring>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

namespace archipelago::actors {

using namespace archipelago::messages;

caf::atom_value learner_name(int index) { return caf::atom_from_string("l" + std::to_string(index)); }
std::string learner_id(int index) { return "learner-" + std::to_string(index); }

std::vector<std::string> learner_ids(int count) {
  std::vector<std::string> ids;
  for (int m = 0; m < count; ++m) ids.push_back(learner_id(m));
  return ids;
}

int learner_index(const std::string& id) {
  static const std::string prefix = "learner-";
  if (id.size() <= prefix.size() || id.compare(0, prefix.size(), prefix) != 0) return -1;
  int value = 0;
  for (size_t i = prefix.size(); i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9' || value > 1000000) return -1;
    value = value * 10 + (id[i] - '0');
  }
  return value;
}

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

WireBytes admin_request(const std::string& sender, const std::string& command, std::vector<std::string> args) {
  Outbox outbox(sender);
  auto bytes = outbox.wrap(AdminRequest{0, command, std::move(args)});
  return bytes ? std::move(*bytes) : WireBytes{};
}

WireBytes admin_reply(const std::string& sender, uint64_t request_id, bool ok, const std::string& text,
                      const nlohmann::json& json) {
  Outbox outbox(sender);
  auto bytes = outbox.wrap(AdminReply{request_id, ok, text, json.dump()});
  return bytes ? std::move(*bytes) : WireBytes{};
}

Expected<AdminRequest> read_admin_request(WireBytes&& bytes) {
  auto envelope = unwrap(std::move(bytes));
  if (!envelope) return envelope.error();
  auto* request = std::get_if<AdminRequest>(&envelope->body);
  if (!request) return make_error(ErrorCode::unknown_type, std::string("expected admin_request, got ") +
                                                               message_name(envelope->body));
  return *request;
}

Expected<nlohmann::json> ask_admin(caf::actor_system& system, caf::atom_value name, const std::string& sender,
                                   const std::string& command, std::vector<std::string> args, double timeout_s) {
  auto target = Directory::get(system, name);
  if (!target) return make_error(ErrorCode::unavailable, "no actor registered as " + caf::to_string(name));
  caf::scoped_actor self{system};
  Expected<nlohmann::json> result = make_error(ErrorCode::unavailable, "no answer");
  self->request(target, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), admin_atom::value,
                admin_request(sender, command, std::move(args)))
      .receive([&](WireBytes& bytes) { result = read_admin_reply(std::move(bytes)); },
               [&](caf::error& error) {
                 result = make_error(ErrorCode::unavailable, caf::to_string(name) + ": " + system.render(error));
               });
  return result;
}

Expected<nlohmann::json> read_admin_reply(WireBytes&& bytes) {
  auto envelope = unwrap(std::move(bytes));
  if (!envelope) return envelope.error();
  auto* reply = std::get_if<AdminReply>(&envelope->body);
  if (!reply) return make_error(ErrorCode::unknown_type, "expected admin_reply");
  if (!reply->ok) return make_error(ErrorCode::unavailable, reply->text);
  auto parsed = nlohmann::json::parse(reply->json, nullptr, false);
  if (parsed.is_discarded()) return make_error(ErrorCode::corrupt, "admin reply is not JSON");
  return parsed;
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

}  // namespace archipelago::actors

namespace archipelago::actors {
double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace archipelago::actors

#include "messages/envelope.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include "messages/archipelago.capnp.h"
#include "messages/chunking.hpp"
#include "messages/wire_convert.hpp"

namespace archipelago::messages {
namespace {

uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }

// The tensor chunk a message carries, if any.
const TensorChunk* chunk_of(const Message& message) {
  if (auto* m = std::get_if<FragmentUpdate>(&message)) return &m->chunk;
  if (auto* m = std::get_if<GlobalFragment>(&message)) return &m->chunk;
  if (auto* m = std::get_if<Persist>(&message)) return &m->chunk;
  return nullptr;
}

// Writes the builder's segments in standard framing: (count-1, sizes...) as u32, padded to a word,
// then the segments. The referenced payload segment is rounded up to whole words by Cap'n Proto;
// only its real bytes are read (the padding is zeroed), so we never read past the caller's tensor.
void write_flat(capnp::MessageBuilder& builder, const ByteView* external,
                std::vector<uint8_t>& out) {
  auto segments = builder.getSegmentsForOutput();
  const size_t table_bytes = (4 + 4 * segments.size() + 7) / 8 * 8;
  size_t total = table_bytes;
  for (auto& segment : segments) total += segment.size() * sizeof(capnp::word);
  out.resize(total);
  uint8_t* p = out.data();
  std::memset(p, 0, table_bytes);
  const uint32_t count_minus_one = static_cast<uint32_t>(segments.size() - 1);
  std::memcpy(p, &count_minus_one, 4);
  for (size_t i = 0; i < segments.size(); ++i) {
    const uint32_t words = static_cast<uint32_t>(segments[i].size());
    std::memcpy(p + 4 + 4 * i, &words, 4);
  }
  p += table_bytes;
  for (auto& segment : segments) {
    const size_t bytes = segment.size() * sizeof(capnp::word);
    const auto* begin = reinterpret_cast<const uint8_t*>(segment.begin());
    if (external != nullptr && begin == external->data) {
      std::memcpy(p, begin, external->size);
      std::memset(p + external->size, 0, bytes - external->size);
    } else {
      std::memcpy(p, begin, bytes);
    }
    p += bytes;
  }
}

// Checks the segment table against the input length before Cap'n Proto sees it, so that a short
// input is reported as truncated and absurd tables as oversized, not as a generic parse failure.
Status check_framing(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  if (size > limits.max_message_bytes) {
    return make_error(ErrorCode::oversized, "message of " + std::to_string(size) +
                                                " bytes exceeds limit " +
                                                std::to_string(limits.max_message_bytes));
  }
  if (size < 8) return make_error(ErrorCode::truncated, "message shorter than its header");
  const uint64_t segment_count = uint64_t{load_u32(data)} + 1;
  if (segment_count > limits.max_segments) {
    return make_error(ErrorCode::oversized, std::to_string(segment_count) + " segments");
  }
  const uint64_t table_bytes = (4 + 4 * segment_count + 7) / 8 * 8;
  if (size < table_bytes) return make_error(ErrorCode::truncated, "message ends in segment table");
  uint64_t body_bytes = 0;
  for (uint64_t i = 0; i < segment_count; ++i) body_bytes += uint64_t{load_u32(data + 4 + 4 * i)} * 8;
  if (table_bytes + body_bytes > size) {
    return make_error(ErrorCode::truncated, "message announces " +
                                                std::to_string(table_bytes + body_bytes) +
                                                " bytes, got " + std::to_string(size));
  }
  if (table_bytes + body_bytes < size) {
    return make_error(ErrorCode::corrupt, std::to_string(size - table_bytes - body_bytes) +
                                              " trailing bytes after message");
  }
  return Status::success();
}

Status validate(const Message& message, const DecodeLimits& limits) {
  auto finite = [](double v) { return std::isfinite(v); };
  if (auto* m = std::get_if<FragmentUpdate>(&message); m && !finite(m->train_loss)) {
    return make_error(ErrorCode::non_finite, "train loss is not finite");
  }
  if (auto* m = std::get_if<FragmentUpdate>(&message); m && !(finite(m->tokens_per_sec) && m->tokens_per_sec >= 0)) {
    return make_error(ErrorCode::non_finite, "tokens/s of an update is not a finite, non-negative number");
  }
  if (auto* m = std::get_if<FragmentUpdate>(&message); m && m->from_step > m->to_step) {
    return make_error(ErrorCode::invalid_argument, "an update's work ends before it begins (from_step > to_step)");
  }
  if (auto* m = std::get_if<GlobalFragment>(&message);
      m && !(finite(m->fastest_tokens_per_sec) && m->fastest_tokens_per_sec >= 0)) {
    return make_error(ErrorCode::non_finite, "fastest tokens/s of a global fragment is not a finite, non-negative number");
  }
  if (auto* m = std::get_if<GlobalFragment>(&message); m && m->delta_base >= m->version && m->delta_base != 0) {
    return make_error(ErrorCode::invalid_argument, "a global fragment's delta base must be older than its version");
  }
  if (auto* m = std::get_if<Heartbeat>(&message); m && !finite(m->tokens_per_sec)) {
    return make_error(ErrorCode::non_finite, "tokens/s is not finite");
  }
  // A train loss is a cross-entropy (>= 0), or NaN before the learner's first step: never infinite.
  if (auto* m = std::get_if<Heartbeat>(&message); m && (std::isinf(m->train_loss) || m->train_loss < 0)) {
    return make_error(ErrorCode::invalid_argument, "a heartbeat's train loss must be NaN or a finite value >= 0");
  }
  // Times of the goodput ledger: finite and non-negative, or the ledger would be poisoned.
  auto duration = [&](double v) { return finite(v) && v >= 0; };
  if (auto* m = std::get_if<FragmentUpdate>(&message); m && !duration(m->compute_seconds)) {
    return make_error(ErrorCode::non_finite, "an update's compute seconds are not a finite, non-negative number");
  }
  if (auto* m = std::get_if<Heartbeat>(&message);
      m && !(duration(m->alive_seconds) && duration(m->recovery_seconds) && duration(m->compute_seconds) &&
             duration(m->wait_seconds) && duration(m->paused_seconds) && duration(m->throttled_seconds) &&
             duration(m->overhead_seconds) && duration(m->sent_compute_seconds) &&
             duration(m->unsent_compute_seconds) && duration(m->dropped_compute_seconds) &&
             duration(m->restored_compute_seconds))) {
    return make_error(ErrorCode::non_finite, "a heartbeat's times are not finite, non-negative numbers");
  }
  if (auto* m = std::get_if<SlotReport>(&message);
      m && !(duration(m->lifetime_seconds) && duration(m->alive_seconds) && duration(m->recovery_seconds) &&
             duration(m->compute_seconds) && duration(m->wait_seconds) && duration(m->paused_seconds) &&
             duration(m->restarting_seconds) && duration(m->throttled_seconds) && duration(m->overhead_seconds) &&
             duration(m->sent_compute_seconds) && duration(m->held_compute_seconds) && duration(m->idle_seconds) &&
             finite(m->left_compute_seconds))) {
    return make_error(ErrorCode::non_finite, "a slot report's times are not finite, non-negative numbers");
  }
  if (auto* m = std::get_if<SlotReport>(&message); m && static_cast<uint8_t>(m->state) > 3) {
    return make_error(ErrorCode::invalid_argument, "a slot report's state is unknown");
  }
  if (auto* m = std::get_if<LearnerControl>(&message); m && static_cast<uint8_t>(m->action) > kLastControlAction) {
    return make_error(ErrorCode::invalid_argument, "a learner control's action is unknown");
  }
  if (auto* m = std::get_if<LearnerControl>(&message);
      m && m->action == ControlAction::throttle_learner && !(m->factor >= 1 && m->factor <= kMaxThrottle)) {
    return make_error(ErrorCode::invalid_argument, "a learner control's throttle factor is outside 1..100");
  }
  constexpr size_t kMaxFragments = 1 << 16;
  if (auto* m = std::get_if<Fetch>(&message); m && m->held_digests.size() > kMaxFragments) {
    return make_error(ErrorCode::invalid_argument, "a fetch lists more held fragments than any model has");
  }
  if (auto* m = std::get_if<Welcome>(&message); m && static_cast<uint8_t>(m->refusal) > 5) {
    return make_error(ErrorCode::invalid_argument, "a welcome's refusal code is unknown");
  }
  if (auto* m = std::get_if<AdminCommand>(&message); m && static_cast<uint8_t>(m->verb) > kLastAdminVerb) {
    return make_error(ErrorCode::invalid_argument, "an admin command's verb is unknown");
  }
  if (auto* m = std::get_if<Leave>(&message); m && static_cast<uint8_t>(m->code) > 2) {
    return make_error(ErrorCode::invalid_argument, "a leave's code is unknown");
  }
  // A schedule grows by one epoch per operator change of H (diloco/schedule.cpp allows 1024): a longer
  // list is an attack, e.g. zero-sized list elements that re-encode to megabytes.
  constexpr size_t kMaxScheduleEpochs = 1024;
  if (auto* m = std::get_if<GlobalFragment>(&message); m && m->schedule.size() > kMaxScheduleEpochs) {
    return make_error(ErrorCode::invalid_argument, "a global fragment's schedule has more epochs than any run makes");
  }
  if (auto* m = std::get_if<Join>(&message); m && m->held_digests.size() > kMaxFragments) {
    return make_error(ErrorCode::invalid_argument, "a join lists more held fragments than any model has");
  }
  if (auto* m = std::get_if<Welcome>(&message);
      m && (m->held_fragments.size() > kMaxFragments || m->fragment_versions.size() > kMaxFragments ||
            m->received_until.size() > kMaxFragments)) {
    return make_error(ErrorCode::invalid_argument, "a welcome lists more fragments than any model has");
  }
  if (auto* m = std::get_if<Join>(&message); m && !finite(m->speed_hint)) {
    return make_error(ErrorCode::non_finite, "speed hint is not finite");
  }
  if (const TensorChunk* chunk = chunk_of(message)) {
    auto placement = place_chunk(*chunk, limits.max_tensor_bytes, limits.max_payload_bytes);
    if (!placement) return placement.error();
    if (limits.check_finite) {
      Status finite_payload = check_finite_range(chunk->codec, chunk->element_count,
                                                 placement->offset, chunk->payload.data,
                                                 chunk->payload.size);
      if (!finite_payload) return finite_payload;
    }
  }
  return Status::success();
}

Error from_exception(const kj::Exception& e) {
  std::string description = e.getDescription().cStr();
  const bool limit = description.find("traversal limit") != std::string::npos ||
                     description.find("nesting limit") != std::string::npos;
  return make_error(limit ? ErrorCode::oversized : ErrorCode::corrupt, std::move(description));
}

// Decodes a message whose framing was checked and whose data is 8-byte aligned and kept alive
// by `owner`.
Expected<DecodedEnvelope> decode_aligned(const uint8_t* data, size_t size,
                                         const std::shared_ptr<const void>& owner,
                                         const DecodeLimits& limits) {
  try {
    capnp::ReaderOptions options;
    options.traversalLimitInWords = limits.traversal_limit_words;
    options.nestingLimit = limits.nesting_limit;
    capnp::FlatArrayMessageReader reader(
        kj::ArrayPtr<const capnp::word>(reinterpret_cast<const capnp::word*>(data), size / 8),
        options);
    auto root = reader.getRoot<wire::Envelope>();
    const uint32_t version = root.getProtocolVersion();
    if (version != kProtocolVersion) {
      return make_error(ErrorCode::wrong_version, "protocol version " + std::to_string(version) +
                                                      ", this build speaks " +
                                                      std::to_string(kProtocolVersion));
    }
    auto body = detail::read_body(root.getBody(), owner);
    if (!body) return body.error();
    Status valid = validate(*body, limits);
    if (!valid) return valid.error();
    auto sender = root.getSenderId();
    return DecodedEnvelope{version, std::string(sender.begin(), sender.size()), root.getSequence(),
                           std::move(*body)};
  } catch (const kj::Exception& e) {
    return from_exception(e);
  } catch (const std::exception& e) {
    return make_error(ErrorCode::corrupt, e.what());
  }
}

}  // namespace

Status encode(const Envelope& envelope, std::vector<uint8_t>& out) {
  if (const TensorChunk* chunk = chunk_of(envelope.body)) {
    auto placement = place_chunk(*chunk, kMaxTensorBytes, kMaxChunkBytes);
    if (!placement) return placement.error();
  }
  try {
    capnp::MallocMessageBuilder builder;
    auto root = builder.initRoot<wire::Envelope>();
    root.setProtocolVersion(envelope.protocol_version);
    root.setSenderId(capnp::Text::Reader(envelope.sender_id.data(), envelope.sender_id.size()));
    root.setSequence(envelope.sequence);
    const ByteView* external = nullptr;
    detail::write_body(builder, root.initBody(), envelope.body, &external);
    write_flat(builder, external, out);
    return Status::success();
  } catch (const kj::Exception& e) {
    return make_error(ErrorCode::invalid_argument, e.getDescription().cStr());
  } catch (const std::exception& e) {
    return make_error(ErrorCode::invalid_argument, e.what());
  }
}

Expected<std::vector<uint8_t>> encode(const Envelope& envelope) {
  std::vector<uint8_t> out;
  Status status = encode(envelope, out);
  if (!status) return status.error();
  return out;
}

Expected<DecodedEnvelope> decode(const ByteView& bytes, const DecodeLimits& limits) {
  Status framing = check_framing(bytes.data, bytes.size, limits);
  if (!framing) return framing.error();
  if (bytes.owner && reinterpret_cast<uintptr_t>(bytes.data) % 8 == 0) {
    return decode_aligned(bytes.data, bytes.size, bytes.owner, limits);
  }
  auto words = std::make_shared<std::vector<capnp::word>>(bytes.size / 8);
  std::memcpy(words->data(), bytes.data, bytes.size);
  return decode_aligned(reinterpret_cast<const uint8_t*>(words->data()), bytes.size, words, limits);
}

Expected<DecodedEnvelope> decode(std::vector<uint8_t>&& bytes, const DecodeLimits& limits) {
  auto owned = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  return decode(ByteView{owned->data(), owned->size(), owned}, limits);
}

Expected<DecodedEnvelope> decode(const uint8_t* data, size_t size, const DecodeLimits& limits) {
  return decode(ByteView{data, size, nullptr}, limits);
}

const char* message_name(const Message& message) {
  static constexpr const char* kNames[] = {"join",      "welcome",   "fragment_update",
                                           "global_fragment", "heartbeat", "persist",
                                           "persisted", "leave",     "admin_request",
                                           "admin_reply", "fetch",     "restore",
                                           "commit_end", "admin_command", "slot_report",
                                           "learner_control"};
  static_assert(std::variant_size_v<Message> == sizeof(kNames) / sizeof(kNames[0]));
  return kNames[message.index()];
}

}  // namespace archipelago::messages

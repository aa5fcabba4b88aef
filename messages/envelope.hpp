// Envelope codec: the only place where messages become bytes and bytes become messages.
//
// encode() turns an Envelope (plain structs, messages/message_types.hpp) into one Cap'n Proto
// message in standard flat framing (segment table + segments); decode() does the reverse with
// explicit limits and full validation. Invariant: decode never crashes, throws or over-reads on
// arbitrary bytes — every failure is an Error whose code says what was wrong:
//   truncated      the bytes end before the framing they announce
//   oversized      over a DecodeLimits bound (message, segments, traversal, nesting, payload, tensor)
//   corrupt        framing that is not a valid Cap'n Proto message (bad pointers, trailing bytes)
//   wrong_version  Envelope.protocolVersion != kProtocolVersion
//   unknown_type   a union tag, codec or enum value this build does not know
//   inconsistent   fields that contradict each other (chunk index >= count, payload length not
//                  matching codec, element count and chunk geometry, ...)
//   non_finite     NaN/Inf in a float field or in a tensor payload (when check_finite)
// The chunk checksum is not verified here but by the Reassembler (messages/chunking.hpp), which
// every tensor chunk should pass through, even when a tensor is a single chunk.
// Stateless: any thread may call these functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"
#include "messages/message_types.hpp"
#include "messages/protocol.hpp"

namespace archipelago::messages {

struct DecodeLimits {
  size_t max_message_bytes = kMaxMessageBytes;
  // Cap'n Proto's bound on words read; we read every field once, so the message size suffices.
  uint64_t traversal_limit_words = kMaxMessageBytes / 8 + 1024;
  int nesting_limit = kNestingLimit;
  uint32_t max_segments = kMaxSegments;
  size_t max_payload_bytes = kMaxChunkBytes;   // per TensorChunk
  uint64_t max_tensor_bytes = kMaxTensorBytes;  // whole tensor a chunk claims to belong to
  // Scan tensor payloads for NaN/Inf (a read of the payload, ~memory speed). Turn off only where
  // the decoded tensor is checked anyway.
  bool check_finite = true;
};

// Encodes into `out`, reusing its capacity; the payload is copied once, straight into `out`.
// Fails (inconsistent / oversized) on a tensor chunk the receiver would reject, so a sender finds
// its own bugs; `out` is then unspecified.
Status encode(const Envelope& envelope, std::vector<uint8_t>& out);
Expected<std::vector<uint8_t>> encode(const Envelope& envelope);

// Decodes `bytes`. When `bytes.owner` is set and the data is 8-byte aligned, nothing is copied:
// payloads of the result view the input and share its owner. Otherwise (no owner, or unaligned
// input, which Cap'n Proto cannot read in place) the bytes are first copied into an aligned
// buffer that the payloads own.
Expected<DecodedEnvelope> decode(const ByteView& bytes, const DecodeLimits& limits = {});
// Takes ownership of `bytes` (zero-copy: vector storage is aligned).
Expected<DecodedEnvelope> decode(std::vector<uint8_t>&& bytes, const DecodeLimits& limits = {});
// Borrows `data` only for the call (copies it).
Expected<DecodedEnvelope> decode(const uint8_t* data, size_t size, const DecodeLimits& limits = {});

// The message kind's name ("join", "fragment_update", ...) for logs and counters.
const char* message_name(const Message& message);

}  // namespace archipelago::messages

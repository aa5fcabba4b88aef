// Constants of the wire protocol that sender and receiver must agree on.
//
// Everything here is part of the wire contract (messages/archipelago.capnp): changing a value
// changes what peers accept or how tensor bytes are laid out, so bump kProtocolVersion with it.
// Header-only, no dependencies; any module may include it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace archipelago::messages {

// Envelope.protocolVersion; a peer speaking another version is rejected with wrong_version.
inline constexpr uint32_t kProtocolVersion = 1;

// Largest payload of one TensorChunk. Large tensors are cut into chunks of at most this size so
// that control messages (heartbeats, admin) are never stuck behind a whole tensor on a link.
inline constexpr size_t kMaxChunkBytes = size_t{4} << 20;

// Chunk strides are multiples of this, so every chunk starts on an element (and scale) boundary.
inline constexpr size_t kChunkAlignment = 8;

// Elements sharing one fp32 scale in the int8 and 4-bit codecs. 4-bit needs smaller blocks: with
// only 15 levels, one outlier in a large block flattens its neighbours to zero.
inline constexpr size_t kInt8BlockSize = 256;
inline constexpr size_t kInt4BlockSize = 64;

// Default decode limits (see DecodeLimits in messages/envelope.hpp). A message is one chunk plus
// small fields; 1 MiB of slack covers ids, admin text and JSON manifests.
inline constexpr size_t kMaxMessageBytes = kMaxChunkBytes + (size_t{1} << 20);
inline constexpr int kNestingLimit = 16;
inline constexpr uint32_t kMaxSegments = 64;
// Largest encoded tensor a chunk may claim to belong to (bounds what a reassembler allocates).
inline constexpr uint64_t kMaxTensorBytes = uint64_t{16} << 30;

}  // namespace archipelago::messages

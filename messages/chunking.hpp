// Chunking: cutting an encoded tensor into checksummed chunks of at most kMaxChunkBytes, and
// putting it back together on the receiving side.
//
// Geometry (the wire contract): a tensor of T encoded bytes sent as C chunks uses a stride of
// S = roundUp(ceil(T / C), kChunkAlignment); chunk i holds bytes [i*S, min((i+1)*S, T)). Every
// chunk is non-empty (C = 1 when T = 0), so (T, C, i) alone say where a chunk goes and how long it
// must be — a receiver never trusts a length it cannot check. Each chunk carries XXH3-64 of its
// bytes. Free functions are pure (any thread); a Reassembler has one owner.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "common/error.hpp"
#include "messages/message_types.hpp"
#include "messages/protocol.hpp"

namespace archipelago::messages {

// XXH3-64 of `size` bytes: the checksum carried by TensorChunk.
uint64_t chunk_checksum(const uint8_t* data, size_t size);

// Stride of a tensor of `total_bytes` cut into `chunk_count` (>= 1) chunks.
uint64_t chunk_stride(uint64_t total_bytes, uint32_t chunk_count);

// Where a chunk's payload lies in the whole encoded tensor.
struct ChunkPlacement {
  uint64_t offset = 0;
  uint64_t size = 0;
};

// Checks that a chunk's fields agree with each other and with the limits (the checksum is not
// checked here: that is the reassembler's job, once per chunk). Errors: unknown_type (codec),
// oversized (total above `max_total_bytes`, payload above `max_chunk_bytes`), inconsistent
// (total_bytes != encoded_size(codec, element_count), index >= count, count == 0, more chunks
// than bytes, payload length different from the geometry's).
Expected<ChunkPlacement> place_chunk(const TensorChunk& chunk, uint64_t max_total_bytes,
                                     size_t max_chunk_bytes = kMaxChunkBytes);

// Cuts an encoded tensor into chunks that view `encoded` (sharing its owner: no copy), each with
// its checksum. `max_chunk_bytes` must be a positive multiple of kChunkAlignment
// (invalid_argument otherwise); `encoded.size` must be encoded_size(codec, element_count)
// (inconsistent otherwise).
Expected<std::vector<TensorChunk>> split_tensor(Codec codec, uint64_t element_count,
                                                const ByteView& encoded,
                                                size_t max_chunk_bytes = kMaxChunkBytes);

// The same cut of a tensor whose encoded bytes lie in `parts`, one after another (a value stored as
// several buffers, never concatenated), handed to `emit` chunk by chunk, in order. A chunk inside
// one part views it (sharing its owner); one that straddles two parts is copied into a scratch
// buffer valid only during `emit`. Stops at the first error `emit` returns. Only chunks
// [first_chunk, first_chunk + chunk_limit) are emitted (a sender that paces them); returns the
// tensor's chunk count.
Expected<uint32_t> for_each_chunk(Codec codec, uint64_t element_count, const std::vector<ByteView>& parts,
                                  const std::function<Status(TensorChunk&&)>& emit, size_t max_chunk_bytes = kMaxChunkBytes,
                                  uint32_t first_chunk = 0, uint32_t chunk_limit = UINT32_MAX);

// ChunkTracker: the bookkeeping of one tensor's chunks, without their bytes. Each chunk is checked
// against the geometry, the earlier chunks and its checksum, then marked received. A Reassembler
// keeps the bytes in memory; a receiver that writes them elsewhere (the checkpoint store writes
// them straight into a file) uses a tracker alone.
//
// Reassembler: collects the chunks of one tensor, in any order, into the whole encoded tensor.
//
// add() rejects a chunk without changing state when it is inconsistent with itself or with the
// chunks before it (inconsistent; oversized past the limits), a duplicate of an accepted index
// (conflict), or fails its checksum (corrupt) — a retransmission of that chunk can still
// complete the tensor. Memory is bounded: at most `max_total_bytes` is ever allocated, on the
// first accepted chunk.
class ChunkTracker {
 public:
  explicit ChunkTracker(uint64_t max_total_bytes, size_t max_chunk_bytes = kMaxChunkBytes);

  // Where `chunk` goes in the whole tensor; it is counted as received. On error (those of
  // Reassembler::add) nothing changes.
  Expected<ChunkPlacement> accept(const TensorChunk& chunk);

  bool started() const { return started_; }
  bool complete() const { return started_ && received_count_ == chunk_count_; }
  // Indices not received yet (empty before the first chunk).
  std::vector<uint32_t> missing() const;
  // truncated, naming the missing chunks, unless complete.
  Status check_complete() const;
  void reset();

  Codec codec() const { return codec_; }
  uint64_t element_count() const { return element_count_; }
  uint64_t total_bytes() const { return total_bytes_; }

 private:
  uint64_t max_total_bytes_;
  size_t max_chunk_bytes_;
  bool started_ = false;
  Codec codec_ = Codec::fp32;
  uint64_t element_count_ = 0;
  uint64_t total_bytes_ = 0;
  uint32_t chunk_count_ = 0;
  uint32_t received_count_ = 0;
  std::vector<bool> received_;
};

class Reassembler {
 public:
  explicit Reassembler(uint64_t max_total_bytes, size_t max_chunk_bytes = kMaxChunkBytes);

  Status add(const TensorChunk& chunk);

  bool started() const { return tracker_.started(); }
  bool complete() const { return tracker_.complete(); }
  // Indices not received yet (empty before the first chunk).
  std::vector<uint32_t> missing() const { return tracker_.missing(); }

  // The whole encoded tensor, or truncated (listing missing chunks) if incomplete. On success the
  // reassembler is reset and can collect another tensor.
  Expected<std::vector<uint8_t>> take();
  void reset();

  Codec codec() const { return tracker_.codec(); }
  uint64_t element_count() const { return tracker_.element_count(); }

 private:
  ChunkTracker tracker_;
  std::vector<uint8_t> buffer_;
};

}  // namespace archipelago::messages

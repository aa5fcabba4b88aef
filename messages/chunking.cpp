#include "messages/chunking.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

#include <xxhash.h>

namespace archipelago::messages {
namespace {

Error inconsistent(std::string reason) { return make_error(ErrorCode::inconsistent, std::move(reason)); }

}  // namespace

uint64_t chunk_checksum(const uint8_t* data, size_t size) { return XXH3_64bits(data, size); }

uint64_t chunk_stride(uint64_t total_bytes, uint32_t chunk_count) {
  const uint64_t even = total_bytes / chunk_count + (total_bytes % chunk_count != 0);
  return (even + kChunkAlignment - 1) / kChunkAlignment * kChunkAlignment;
}

Expected<ChunkPlacement> place_chunk(const TensorChunk& chunk, uint64_t max_total_bytes,
                                     size_t max_chunk_bytes) {
  if (!is_known_codec(static_cast<uint32_t>(chunk.codec))) {
    return make_error(ErrorCode::unknown_type, "unknown codec");
  }
  auto expected_total = encoded_size(chunk.codec, chunk.element_count);
  if (!expected_total) return expected_total.error();
  if (chunk.total_bytes != *expected_total) {
    return inconsistent(std::string(codec_name(chunk.codec)) + " tensor of " +
                        std::to_string(chunk.element_count) + " elements is " +
                        std::to_string(*expected_total) + " bytes, chunk says " +
                        std::to_string(chunk.total_bytes));
  }
  if (chunk.total_bytes > max_total_bytes) {
    return make_error(ErrorCode::oversized, "tensor of " + std::to_string(chunk.total_bytes) +
                                                " bytes exceeds limit " +
                                                std::to_string(max_total_bytes));
  }
  if (chunk.payload.size > max_chunk_bytes) {
    return make_error(ErrorCode::oversized, "chunk of " + std::to_string(chunk.payload.size) +
                                                " bytes exceeds limit " +
                                                std::to_string(max_chunk_bytes));
  }
  if (chunk.chunk_count == 0) return inconsistent("chunk count is 0");
  if (chunk.chunk_index >= chunk.chunk_count) {
    return inconsistent("chunk index " + std::to_string(chunk.chunk_index) + " >= count " +
                        std::to_string(chunk.chunk_count));
  }
  const uint64_t total = chunk.total_bytes;
  if (total == 0) {
    if (chunk.chunk_count != 1 || chunk.payload.size != 0) {
      return inconsistent("empty tensor must be one empty chunk");
    }
    return ChunkPlacement{0, 0};
  }
  // stride <= ceil(total / count) + 7, so these products stay far below 2^64.
  const uint64_t stride = chunk_stride(total, chunk.chunk_count);
  if (stride * (chunk.chunk_count - 1) >= total) {
    return inconsistent(std::to_string(chunk.chunk_count) + " chunks for " + std::to_string(total) +
                        " bytes leave empty chunks");
  }
  const uint64_t offset = stride * chunk.chunk_index;
  const uint64_t size = std::min(stride, total - offset);
  if (chunk.payload.size != size) {
    return inconsistent("chunk " + std::to_string(chunk.chunk_index) + " must hold " +
                        std::to_string(size) + " bytes, holds " +
                        std::to_string(chunk.payload.size));
  }
  return ChunkPlacement{offset, size};
}

Expected<uint32_t> for_each_chunk(Codec codec, uint64_t element_count, const std::vector<ByteView>& parts,
                                  const std::function<Status(TensorChunk&&)>& emit, size_t max_chunk_bytes,
                                  uint32_t first_chunk, uint32_t chunk_limit) {
  if (max_chunk_bytes == 0 || max_chunk_bytes % kChunkAlignment != 0) {
    return make_error(ErrorCode::invalid_argument,
                      "chunk size must be a positive multiple of " + std::to_string(kChunkAlignment));
  }
  auto total = encoded_size(codec, element_count);
  if (!total) return total.error();
  uint64_t given = 0;
  for (const ByteView& part : parts) given += part.size;
  if (*total != given) {
    return inconsistent("encoded tensor is " + std::to_string(given) + " bytes, expected " + std::to_string(*total));
  }
  const uint64_t count = std::max<uint64_t>(1, (*total + max_chunk_bytes - 1) / max_chunk_bytes);
  if (count > UINT32_MAX) return make_error(ErrorCode::oversized, "too many chunks");
  const uint64_t stride = chunk_stride(*total, static_cast<uint32_t>(count));
  std::vector<uint8_t> scratch;  // a chunk that straddles two parts
  size_t part = 0;
  uint64_t part_start = 0;  // offset of parts[part] in the whole tensor
  const uint64_t end = std::min<uint64_t>(count, uint64_t{first_chunk} + chunk_limit);
  for (uint64_t i = first_chunk; i < end; ++i) {
    TensorChunk c;
    c.codec = codec;
    c.element_count = element_count;
    c.total_bytes = *total;
    c.chunk_index = static_cast<uint32_t>(i);
    c.chunk_count = static_cast<uint32_t>(count);
    const uint64_t offset = std::min(stride * i, *total);
    const uint64_t size = std::min(stride, *total - offset);
    while (part + 1 < parts.size() && offset >= part_start + parts[part].size) part_start += parts[part++].size;
    if (parts.empty()) {
      c.payload = ByteView{};
    } else if (offset + size <= part_start + parts[part].size) {
      c.payload = ByteView{parts[part].data + (offset - part_start), size, parts[part].owner};
    } else {
      scratch.resize(size);
      uint64_t copied = 0;
      size_t q = part;
      uint64_t q_start = part_start;
      while (copied < size) {
        const uint64_t from = offset + copied - q_start;
        const uint64_t n = std::min<uint64_t>(parts[q].size - from, size - copied);
        std::memcpy(scratch.data() + copied, parts[q].data + from, n);
        copied += n;
        q_start += parts[q++].size;
      }
      c.payload = ByteView{scratch.data(), size, nullptr};
    }
    c.checksum = chunk_checksum(c.payload.data, c.payload.size);
    if (Status emitted = emit(std::move(c)); !emitted.ok()) return emitted.error();
  }
  return static_cast<uint32_t>(count);
}

Expected<std::vector<TensorChunk>> split_tensor(Codec codec, uint64_t element_count,
                                                const ByteView& encoded, size_t max_chunk_bytes) {
  std::vector<TensorChunk> chunks;
  auto split = for_each_chunk(
      codec, element_count, {encoded},
      [&](TensorChunk&& chunk) {
        chunks.push_back(std::move(chunk));
        return Status::success();
      },
      max_chunk_bytes);
  if (!split) return split.error();
  return chunks;
}

ChunkTracker::ChunkTracker(uint64_t max_total_bytes, size_t max_chunk_bytes)
    : max_total_bytes_(max_total_bytes), max_chunk_bytes_(max_chunk_bytes) {}

Expected<ChunkPlacement> ChunkTracker::accept(const TensorChunk& chunk) {
  auto placement = place_chunk(chunk, max_total_bytes_, max_chunk_bytes_);
  if (!placement) return placement.error();
  if (started_ && (chunk.codec != codec_ || chunk.element_count != element_count_ ||
                   chunk.total_bytes != total_bytes_ || chunk.chunk_count != chunk_count_)) {
    return inconsistent("chunk " + std::to_string(chunk.chunk_index) +
                        " disagrees with earlier chunks on codec, element count or chunk count");
  }
  if (started_ && received_[chunk.chunk_index]) {
    return make_error(ErrorCode::conflict, "duplicate chunk " + std::to_string(chunk.chunk_index));
  }
  if (chunk_checksum(chunk.payload.data, chunk.payload.size) != chunk.checksum) {
    return make_error(ErrorCode::corrupt,
                      "checksum mismatch in chunk " + std::to_string(chunk.chunk_index));
  }
  if (!started_) {
    started_ = true;
    codec_ = chunk.codec;
    element_count_ = chunk.element_count;
    total_bytes_ = chunk.total_bytes;
    chunk_count_ = chunk.chunk_count;
    received_count_ = 0;
    received_.assign(chunk_count_, false);
  }
  received_[chunk.chunk_index] = true;
  ++received_count_;
  return placement;
}

std::vector<uint32_t> ChunkTracker::missing() const {
  std::vector<uint32_t> result;
  for (uint32_t i = 0; i < received_.size(); ++i) {
    if (!received_[i]) result.push_back(i);
  }
  return result;
}

Status ChunkTracker::check_complete() const {
  if (!started_) return make_error(ErrorCode::truncated, "no chunk received");
  if (complete()) return Status::success();
  const auto absent = missing();
  return make_error(ErrorCode::truncated, std::to_string(absent.size()) + " of " + std::to_string(chunk_count_) +
                                              " chunks missing, first " + std::to_string(absent.front()));
}

void ChunkTracker::reset() {
  started_ = false;
  received_count_ = 0;
  chunk_count_ = 0;
  received_.clear();
}

Reassembler::Reassembler(uint64_t max_total_bytes, size_t max_chunk_bytes) : tracker_(max_total_bytes, max_chunk_bytes) {}

Status Reassembler::add(const TensorChunk& chunk) {
  auto placement = tracker_.accept(chunk);
  if (!placement) return placement.error();
  if (buffer_.size() != tracker_.total_bytes()) buffer_.resize(tracker_.total_bytes());  // at the first chunk
  if (placement->size > 0) std::memcpy(buffer_.data() + placement->offset, chunk.payload.data, placement->size);
  return Status::success();
}

Expected<std::vector<uint8_t>> Reassembler::take() {
  if (Status whole = tracker_.check_complete(); !whole.ok()) return whole.error();
  std::vector<uint8_t> result = std::move(buffer_);
  reset();
  return result;
}

void Reassembler::reset() {
  tracker_.reset();
  buffer_ = std::vector<uint8_t>();
}

}  // namespace archipelago::messages

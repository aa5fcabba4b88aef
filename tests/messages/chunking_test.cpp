// Chunking: a >12 MiB tensor split and reassembled in shuffled order, and every way a chunk can be
// wrong (missing, duplicated, corrupt, inconsistent, oversized) detected without losing the rest.
#include "messages/chunking.hpp"

#include <algorithm>
#include <random>

#include <string>

#include <doctest/doctest.h>

#include "tests/messages/test_data.hpp"

namespace archipelago::messages {
namespace {

struct Split {
  std::shared_ptr<std::vector<uint8_t>> encoded;
  std::vector<TensorChunk> chunks;
};

Split split_gaussian(size_t elements, size_t max_chunk = kMaxChunkBytes) {
  const auto values = test::gaussian(elements, 31);
  auto encoded = std::make_shared<std::vector<uint8_t>>();
  REQUIRE(encode_tensor(Codec::fp32, values.data(), values.size(), *encoded).ok());
  auto chunks = split_tensor(Codec::fp32, elements, ByteView{encoded->data(), encoded->size(), encoded},
                             max_chunk);
  REQUIRE(chunks.ok());
  return {encoded, *chunks};
}

TEST_CASE("a 13 MiB tensor splits into 4 MiB chunks and reassembles in shuffled order") {
  const size_t elements = (size_t{13} << 20) / 4 + 3;  // 13 MiB + 12 bytes: a short last chunk
  Split s = split_gaussian(elements);
  REQUIRE(s.chunks.size() == 4);
  for (const auto& c : s.chunks) CHECK(c.payload.size <= kMaxChunkBytes);

  std::mt19937 rng(32);
  std::shuffle(s.chunks.begin(), s.chunks.end(), rng);
  Reassembler reassembler(64 << 20);
  for (size_t i = 0; i < s.chunks.size(); ++i) {
    CHECK_FALSE(reassembler.complete());
    REQUIRE(reassembler.add(s.chunks[i]).ok());
  }
  REQUIRE(reassembler.complete());
  auto whole = reassembler.take();
  REQUIRE(whole.ok());
  CHECK(*whole == *s.encoded);
  CHECK_FALSE(reassembler.started());  // reset for the next tensor
}

TEST_CASE("a tensor held as three buffers is cut like its concatenation, with no copy inside a buffer") {
  // Three parts whose boundaries fall inside chunks (64-byte chunks; parts of 100, 36 and 164 bytes).
  const size_t elements = 75;
  Split whole = split_gaussian(elements, 64);
  const uint8_t* bytes = whole.encoded->data();
  std::vector<ByteView> parts = {ByteView{bytes, 100, nullptr}, ByteView{bytes + 100, 36, nullptr},
                                 ByteView{bytes + 136, 164, nullptr}};
  std::vector<TensorChunk> streamed;
  std::vector<std::vector<uint8_t>> payloads;  // a straddling chunk's view lives only during emit
  std::vector<bool> in_place;
  auto cut = for_each_chunk(
      Codec::fp32, elements, parts,
      [&](TensorChunk&& c) {
        payloads.push_back(c.payload.to_vector());
        in_place.push_back(c.payload.data >= bytes && c.payload.data < bytes + whole.encoded->size());
        streamed.push_back(std::move(c));
        return Status::success();
      },
      64);
  REQUIRE(cut.ok());
  CHECK(*cut == whole.chunks.size());
  REQUIRE(streamed.size() == whole.chunks.size());
  for (size_t i = 0; i < streamed.size(); ++i) {
    CHECK(streamed[i].chunk_index == whole.chunks[i].chunk_index);
    CHECK(streamed[i].chunk_count == whole.chunks[i].chunk_count);
    CHECK(streamed[i].checksum == whole.chunks[i].checksum);
    CHECK(payloads[i] == whole.chunks[i].payload.to_vector());
  }
  // Chunks [0,64) and [192,256) lie inside one part; [64,128) and [128,192) straddle a boundary.
  CHECK(in_place == std::vector<bool>{true, false, false, true, true});
  // A size that disagrees with the element count is refused before anything is emitted.
  int emitted = 0;
  auto wrong = for_each_chunk(Codec::fp32, elements + 1, parts, [&](TensorChunk&&) {
    ++emitted;
    return Status::success();
  });
  CHECK(wrong.error().code == ErrorCode::inconsistent);
  CHECK(emitted == 0);
  // A range of chunks (a paced sender): chunks 2 and 3 alone, the same as in the whole cut.
  std::vector<uint32_t> indices;
  auto range = for_each_chunk(
      Codec::fp32, elements, parts,
      [&](TensorChunk&& c) {
        indices.push_back(c.chunk_index);
        CHECK(c.checksum == whole.chunks[c.chunk_index].checksum);
        return Status::success();
      },
      64, 2, 2);
  REQUIRE(range.ok());
  CHECK(*range == 5);
  CHECK(indices == std::vector<uint32_t>{2, 3});
}

TEST_CASE("split geometry: strides are aligned, chunks non-empty, empty tensor is one chunk") {
  for (size_t elements : {size_t{0}, size_t{1}, size_t{1000}, size_t{1025}}) {
    Split s = split_gaussian(elements, 512);
    uint64_t covered = 0;
    for (const auto& c : s.chunks) {
      auto placement = place_chunk(c, 1 << 20, 512);
      REQUIRE(placement.ok());
      CHECK(placement->offset % kChunkAlignment == 0);
      CHECK(placement->offset == covered);
      CHECK((c.payload.size > 0 || elements == 0));
      covered += placement->size;
    }
    CHECK(covered == s.encoded->size());
  }
  CHECK(split_tensor(Codec::fp32, 1, ByteView{nullptr, 4, nullptr}, 12).error().code ==
        ErrorCode::invalid_argument);
  CHECK(split_tensor(Codec::fp32, 2, ByteView{nullptr, 4, nullptr}).error().code ==
        ErrorCode::inconsistent);
}

TEST_CASE("missing chunks: take() reports truncated and names them") {
  Split s = split_gaussian(5000, 4096);
  Reassembler reassembler(1 << 20, 4096);
  for (size_t i = 0; i < s.chunks.size(); ++i) {
    if (i != 2) REQUIRE(reassembler.add(s.chunks[i]).ok());
  }
  CHECK(reassembler.missing() == std::vector<uint32_t>{2});
  auto incomplete = reassembler.take();
  REQUIRE_FALSE(incomplete.ok());
  CHECK(incomplete.error().code == ErrorCode::truncated);
  REQUIRE(reassembler.add(s.chunks[2]).ok());  // the late chunk still completes it
  CHECK(reassembler.take().ok());
  CHECK(Reassembler(1 << 20).take().error().code == ErrorCode::truncated);
}

TEST_CASE("each bad chunk is rejected with its code and leaves the reassembler usable") {
  Split s = split_gaussian(5000, 4096);  // 20000 bytes in 5 chunks
  std::vector<uint8_t> flipped = s.chunks[1].payload.to_vector();
  flipped[100] ^= 1;

  struct Row { const char* name; TensorChunk chunk; ErrorCode code; };
  auto with = [&](auto&& edit) { TensorChunk c = s.chunks[1]; edit(c); return c; };
  const Row rows[] = {
      {"duplicate", s.chunks[0], ErrorCode::conflict},
      {"corrupt payload", with([&](TensorChunk& c) { c.payload.data = flipped.data(); }),
       ErrorCode::corrupt},
      {"index >= count", with([](TensorChunk& c) { c.chunk_index = c.chunk_count; }),
       ErrorCode::inconsistent},
      {"count differs", with([](TensorChunk& c) { c.chunk_count = 4; }), ErrorCode::inconsistent},
      {"zero count", with([](TensorChunk& c) { c.chunk_count = 0; }), ErrorCode::inconsistent},
      {"total differs from codec and count",
       with([](TensorChunk& c) { c.total_bytes += 8; }), ErrorCode::inconsistent},
      {"codec differs", with([](TensorChunk& c) {
         c.codec = Codec::bf16;
         c.total_bytes = 10000;
       }), ErrorCode::inconsistent},
      {"payload length", with([](TensorChunk& c) { c.payload.size -= 4; }), ErrorCode::inconsistent},
      {"payload over chunk limit", with([](TensorChunk& c) { c.payload.size = 4097; }),
       ErrorCode::oversized},
      {"tensor over limit", with([](TensorChunk& c) {
         c.element_count = 1 << 20;
         c.total_bytes = 4 << 20;
       }), ErrorCode::oversized},
  };
  Reassembler reassembler(1 << 20, 4096);
  REQUIRE(reassembler.add(s.chunks[0]).ok());
  for (const Row& row : rows) {
    const std::string name = row.name;
    CAPTURE(name);
    Status status = reassembler.add(row.chunk);
    REQUIRE_FALSE(status.ok());
    CHECK(status.error().code == row.code);
  }
  for (size_t i = 1; i < s.chunks.size(); ++i) REQUIRE(reassembler.add(s.chunks[i]).ok());
  auto whole = reassembler.take();
  REQUIRE(whole.ok());
  CHECK(*whole == *s.encoded);
}

TEST_CASE("a total above the configured maximum is refused before anything is allocated") {
  Split s = split_gaussian(5000, 4096);
  Reassembler small(1000, 4096);
  Status status = small.add(s.chunks[0]);
  REQUIRE_FALSE(status.ok());
  CHECK(status.error().code == ErrorCode::oversized);
  CHECK_FALSE(small.started());
}

}  // namespace
}  // namespace archipelago::messages

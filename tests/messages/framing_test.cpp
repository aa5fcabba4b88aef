// messages/framing.hpp: an Outbox numbers and chunks, a TensorInbox puts a tensor back together,
// drops a stream cut off by a new chunk 0, resets a stream on a corrupt chunk, and hands a
// quantized tensor over encoded when asked.
#include <doctest/doctest.h>

#include <cmath>
#include <variant>

#include "messages/framing.hpp"
#include "messages/tensor_codec.hpp"
#include "tests/messages/test_data.hpp"

using namespace archipelago;
using namespace archipelago::messages;

namespace {

using test::ramp;

// Wraps `values` encoded with `codec` as FragmentUpdate messages of `sender`.
std::vector<WireBytes> wrap_update(Outbox& outbox, Codec codec, const std::vector<float>& values) {
  std::vector<uint8_t> encoded;
  REQUIRE(encode_tensor(codec, values.data(), values.size(), encoded));
  auto wrapped = outbox.wrap_tensor(codec, values.size(), encoded, [&](TensorChunk chunk) {
    FragmentUpdate update;
    update.learner_id = outbox.sender_id();
    update.fragment_id = 3;
    update.chunk = std::move(chunk);
    return Message{std::move(update)};
  });
  REQUIRE(wrapped);
  return std::move(*wrapped);
}

TensorChunk chunk_of(WireBytes bytes, uint64_t* sequence = nullptr) {
  auto envelope = unwrap(std::move(bytes));
  REQUIRE(envelope);
  if (sequence) *sequence = envelope->sequence;
  auto* update = std::get_if<FragmentUpdate>(&envelope->body);
  REQUIRE(update != nullptr);
  return update->chunk;
}

}  // namespace

TEST_CASE("framing: an Outbox numbers its envelopes and a TensorInbox rebuilds the tensor from its chunks") {
  const auto values = ramp(3 * kMaxChunkBytes / sizeof(float) / 2);  // 1.5 chunks' worth of fp32
  Outbox outbox("learner-2");
  auto messages = wrap_update(outbox, Codec::fp32, values);
  REQUIRE(messages.size() == 2);
  uint64_t sent_bytes = 0;
  for (const auto& m : messages) sent_bytes += m.size();
  CHECK(outbox.bytes() == sent_bytes);

  TensorInbox inbox;
  uint64_t first = 0, second = 0;
  auto partial = inbox.add("learner-2/3", chunk_of(messages[0], &first));
  REQUIRE(partial);
  CHECK_FALSE(partial->complete);
  auto whole = inbox.add("learner-2/3", chunk_of(messages[1], &second));
  REQUIRE(whole);
  CHECK(second == first + 1);
  REQUIRE(whole->complete);
  CHECK(whole->values == values);
}

TEST_CASE("framing: a new chunk 0 drops the partial stream of the same key, never splicing two tensors") {
  const auto old_values = ramp(3 * kMaxChunkBytes / sizeof(float) / 2);
  auto new_values = old_values;
  for (auto& v : new_values) v += 1.0f;
  Outbox outbox("learner-1");
  auto old_messages = wrap_update(outbox, Codec::fp32, old_values);
  auto new_messages = wrap_update(outbox, Codec::fp32, new_values);

  TensorInbox inbox;
  REQUIRE(inbox.add("k", chunk_of(old_messages[0])));  // the sender is cut off after chunk 0
  REQUIRE(inbox.add("k", chunk_of(new_messages[0])));
  CHECK(inbox.streams_cut() == 1);
  auto whole = inbox.add("k", chunk_of(new_messages[1]));
  REQUIRE(whole);
  REQUIRE(whole->complete);
  CHECK(whole->values == new_values);
}

TEST_CASE("framing: a corrupt chunk is refused and its stream reset, so a retransmission starts clean") {
  const auto values = ramp(3 * kMaxChunkBytes / sizeof(float) / 2);
  Outbox outbox("learner-0");
  auto messages = wrap_update(outbox, Codec::fp32, values);
  TensorInbox inbox;
  REQUIRE(inbox.add("k", chunk_of(messages[0])));
  TensorChunk bad = chunk_of(messages[1]);
  bad.checksum ^= 1;
  CHECK_FALSE(inbox.add("k", bad));
  // Chunk 1 alone no longer completes anything: the stream was reset.
  auto orphan = inbox.add("k", chunk_of(messages[1]));
  CHECK_FALSE((orphan && orphan->complete));
  auto again = wrap_update(outbox, Codec::fp32, values);
  REQUIRE(inbox.add("k", chunk_of(again[0])));
  auto whole = inbox.add("k", chunk_of(again[1]));
  REQUIRE(whole);
  REQUIRE(whole->complete);
  CHECK(whole->values == values);
}

TEST_CASE("framing: keep_quantized hands an int8 tensor over as it came, and decodes it otherwise") {
  const auto values = ramp(5000);
  Outbox outbox("learner-3");
  auto messages = wrap_update(outbox, Codec::int8, values);
  REQUIRE(messages.size() == 1);
  TensorInbox inbox;
  auto kept = inbox.add("k", chunk_of(messages[0]), /*keep_quantized=*/true);
  REQUIRE(kept);
  REQUIRE(kept->complete);
  CHECK(kept->codec == Codec::int8);
  CHECK(kept->values.empty());
  std::vector<uint8_t> encoded;
  REQUIRE(encode_tensor(Codec::int8, values.data(), values.size(), encoded));
  CHECK(kept->encoded == encoded);

  auto decoded = inbox.add("k", chunk_of(messages[0]));
  REQUIRE(decoded);
  REQUIRE(decoded->complete);
  REQUIRE(decoded->values.size() == values.size());
  for (size_t i = 0; i < values.size(); i += 97) CHECK(decoded->values[i] == doctest::Approx(values[i]).epsilon(0.02));
}

TEST_CASE("framing: bytes_to_floats reads little-endian fp32 and ignores a trailing partial float") {
  const std::vector<float> values{1.5f, -2.25f, 3.0f};
  std::vector<uint8_t> bytes(reinterpret_cast<const uint8_t*>(values.data()),
                             reinterpret_cast<const uint8_t*>(values.data()) + values.size() * sizeof(float));
  bytes.push_back(0x7f);
  CHECK(bytes_to_floats(bytes) == values);
}

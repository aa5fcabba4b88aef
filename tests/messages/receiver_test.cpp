// messages/receiver.hpp: wire bytes in, whole messages out — a message without a tensor at once, a
// tensor's message once its tensor is whole, a chunk refused by the screen before it is buffered, a
// bad chunk refused with its reason, and Persist chunks placed rather than buffered.
#include <doctest/doctest.h>

#include <cmath>
#include <variant>

#include "messages/receiver.hpp"
#include "messages/tensor_codec.hpp"

using namespace archipelago;
using namespace archipelago::messages;

namespace {

std::vector<float> ramp(size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = std::sin(0.001f * static_cast<float>(i));
  return values;
}

// `values` encoded with `codec`, as the messages `make_body` builds from its chunks.
std::vector<WireBytes> wrap(Outbox& outbox, Codec codec, const std::vector<float>& values,
                            const std::function<Message(TensorChunk)>& make_body) {
  std::vector<uint8_t> encoded;
  REQUIRE(encode_tensor(codec, values.data(), values.size(), encoded));
  auto wrapped = outbox.wrap_tensor(codec, values.size(), encoded, make_body);
  REQUIRE(wrapped);
  return std::move(*wrapped);
}

std::vector<WireBytes> wrap_update(Outbox& outbox, Codec codec, const std::vector<float>& values) {
  return wrap(outbox, codec, values, [&](TensorChunk chunk) {
    FragmentUpdate update;
    update.learner_id = outbox.sender_id();
    update.fragment_id = 3;
    update.chunk = std::move(chunk);
    return Message{std::move(update)};
  });
}

std::vector<WireBytes> wrap_persist(Outbox& outbox, uint64_t ticket, const std::vector<float>& values) {
  return wrap(outbox, Codec::fp32, values, [&](TensorChunk chunk) {
    Persist persist;
    persist.fragment_id = 1;
    persist.kind = PersistKind::outer_momentum;
    persist.ticket = ticket;
    persist.chunk = std::move(chunk);
    return Message{std::move(persist)};
  });
}

Received::State state_of(Receiver& receiver, WireBytes bytes, const Receiver::Screen& screen = {}) {
  auto received = receiver.receive(std::move(bytes), screen);
  REQUIRE(received);
  return received->state;
}

const size_t kOneAndAHalfChunks = 3 * kMaxChunkBytes / sizeof(float) / 2;  // of fp32

}  // namespace

TEST_CASE("receiver: a message without a tensor is whole at once, and bytes that do not decode are an error") {
  Outbox outbox("learner-1");
  Receiver receiver;
  auto received = receiver.receive(outbox.wrap(Leave{"learner-1", "finished", LeaveCode::finished}).value());
  REQUIRE(received);
  CHECK(received->state == Received::State::whole);
  CHECK(received->envelope.sender_id == "learner-1");
  CHECK(std::holds_alternative<Leave>(received->envelope.body));
  auto garbage = receiver.receive(WireBytes{'n', 'o', 't', ' ', 'a', 'n', 'y', 't', 'h', 'i', 'n', 'g'});
  CHECK_FALSE(garbage);
}

TEST_CASE("receiver: an update is whole with its last chunk, decoded, or as its codes when asked") {
  const auto values = ramp(kOneAndAHalfChunks);
  Outbox outbox("learner-2");
  auto messages = wrap_update(outbox, Codec::fp32, values);
  REQUIRE(messages.size() == 2);
  Receiver receiver;
  CHECK(state_of(receiver, messages[0]) == Received::State::not_yet);
  auto whole = receiver.receive(std::move(messages[1]));
  REQUIRE(whole);
  REQUIRE(whole->state == Received::State::whole);
  CHECK(std::get<FragmentUpdate>(whole->envelope.body).chunk.chunk_index == 1);
  CHECK(whole->tensor.values == values);

  const auto small = ramp(5000);
  auto quantized = wrap_update(outbox, Codec::int8, small);
  std::vector<uint8_t> codes;
  REQUIRE(encode_tensor(Codec::int8, small.data(), small.size(), codes));
  Receiver keeping(ReceiveOptions{DecodeLimits{}, /*keep_quantized_updates=*/true, false});
  auto kept = keeping.receive(WireBytes(quantized[0]));
  REQUIRE(kept);
  REQUIRE(kept->state == Received::State::whole);
  CHECK(kept->tensor.codec == Codec::int8);
  CHECK(kept->tensor.encoded == codes);
  CHECK(kept->tensor.values.empty());
  auto decoded = receiver.receive(std::move(quantized[0]));
  REQUIRE(decoded);
  CHECK(decoded->tensor.values.size() == small.size());
  CHECK(decoded->tensor.encoded.empty());
}

TEST_CASE("receiver: the screen refuses a chunk before it is buffered") {
  const auto values = ramp(kOneAndAHalfChunks);
  Outbox outbox("learner-4");
  auto messages = wrap_update(outbox, Codec::fp32, values);
  Receiver receiver;
  int asked = 0;
  auto refuse_all = [&](const DecodedEnvelope& envelope, const TensorChunk& chunk) {
    asked += 1;
    CHECK(std::get<FragmentUpdate>(envelope.body).chunk.chunk_index == chunk.chunk_index);
    return false;
  };
  CHECK(state_of(receiver, messages[0], refuse_all) == Received::State::screened);
  CHECK(asked == 1);
  // Nothing of chunk 0 was kept: chunk 1 alone completes nothing.
  CHECK(state_of(receiver, messages[1]) == Received::State::not_yet);
  // Messages without a tensor are not shown to the screen.
  CHECK(state_of(receiver, outbox.wrap(Restore{0}).value(), refuse_all) == Received::State::whole);
  CHECK(asked == 1);
}

TEST_CASE("receiver: a corrupt chunk is refused with its reason and its stream reset") {
  const auto values = ramp(kOneAndAHalfChunks);
  Outbox outbox("learner-0");
  auto messages = wrap_update(outbox, Codec::fp32, values);
  auto decoded = unwrap(WireBytes(messages[1]));
  REQUIRE(decoded);
  auto bad = std::get<FragmentUpdate>(decoded->body);
  bad.chunk.checksum ^= 1;
  Receiver receiver;
  CHECK(state_of(receiver, messages[0]) == Received::State::not_yet);
  auto refused = receiver.receive(outbox.wrap(bad).value());
  REQUIRE(refused);
  REQUIRE(refused->state == Received::State::refused);
  CHECK(refused->error.code == ErrorCode::corrupt);
  CHECK(state_of(receiver, messages[1]) == Received::State::not_yet);  // chunk 0 was dropped with the stream
}

TEST_CASE("receiver: Persist chunks are placed, not buffered, and a duplicate is refused with its stream kept") {
  const auto values = ramp(kOneAndAHalfChunks);
  Outbox outbox("syncer");
  auto messages = wrap_persist(outbox, 9, values);
  REQUIRE(messages.size() == 2);
  Receiver receiver(ReceiveOptions{DecodeLimits{}, false, /*place_persist=*/true});
  auto second = receiver.receive(WireBytes(messages[1]));
  REQUIRE(second);
  REQUIRE(second->state == Received::State::placed);
  const auto& chunk = std::get<Persist>(second->envelope.body).chunk;
  CHECK(second->placement.offset == chunk_stride(chunk.total_bytes, chunk.chunk_count));
  CHECK(second->placement.size == chunk.total_bytes - second->placement.offset);
  CHECK(second->placement.size == chunk.payload.size);
  auto again = receiver.receive(WireBytes(messages[1]));
  REQUIRE(again);
  CHECK(again->state == Received::State::refused);
  CHECK(again->error.code == ErrorCode::conflict);
  auto first = receiver.receive(WireBytes(messages[0]));
  REQUIRE(first);
  CHECK(first->state == Received::State::placed);
  CHECK(first->placement.offset == 0);
  CHECK(first->tensor.values.empty());
  // Whole, the stream is forgotten: the same chunk starts a new one.
  CHECK(state_of(receiver, WireBytes(messages[1])) == Received::State::placed);
  // A ticket given up is forgotten too.
  receiver.drop_persist(9);
  CHECK(state_of(receiver, WireBytes(messages[1])) == Received::State::placed);
}

TEST_CASE("receiver: Persist chunks are reassembled when not placed, and dropped with drop_persist") {
  const auto values = ramp(kOneAndAHalfChunks);
  Outbox outbox("store");
  auto messages = wrap_persist(outbox, 0, values);
  Receiver receiver;
  CHECK(state_of(receiver, WireBytes(messages[0])) == Received::State::not_yet);
  receiver.drop_persist();
  CHECK(state_of(receiver, WireBytes(messages[1])) == Received::State::not_yet);
  CHECK(state_of(receiver, WireBytes(messages[0])) == Received::State::not_yet);
  auto whole = receiver.receive(WireBytes(messages[1]));
  REQUIRE(whole);
  REQUIRE(whole->state == Received::State::whole);
  CHECK(whole->tensor.values == values);
}

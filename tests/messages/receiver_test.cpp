// messages/receiver.hpp: wire bytes in, whole messages out — a message without a tensor at once, a
// tensor's message once its tensor is whole, a chunk refused by the screen before it is buffered, a
// bad chunk refused with its reason, and Persist chunks placed rather than buffered.
#include <doctest/doctest.h>

#include <cmath>
#include <variant>

#include "messages/receiver.hpp"
#include "messages/tensor_codec.hpp"
#include "tests/messages/test_data.hpp"

using namespace archipelago;
using namespace archipelago::messages;

namespace {

using test::ramp;

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

namespace {

// Records what dispatch hands it: the kinds, in order, with what came along.
struct Recorder : Handler {
  using Handler::on;
  std::vector<std::string> calls;
  std::vector<float> tensor;
  std::vector<WireBytes> held_bytes;
  bool holding_updates = false;
  bool refuse_chunks = false;

  bool screen(const DecodedEnvelope&, const TensorChunk&) override {
    calls.push_back("screen");
    return !refuse_chunks;
  }
  void refused(const DecodedEnvelope* envelope, const Error& error) override {
    calls.push_back(std::string("refused ") + (envelope ? message_name(envelope->body) : "bytes") + ": " +
                    archipelago::to_string(error.code));
  }
  void placed(const DecodedEnvelope&, const Persist& persist, const ChunkPlacement& placement) override {
    calls.push_back("placed " + std::to_string(persist.ticket) + " at " + std::to_string(placement.offset));
  }
  bool hold(const Message& body) override { return holding_updates && std::holds_alternative<FragmentUpdate>(body); }
  void held(WireBytes&& bytes) override {
    calls.push_back("held");
    held_bytes.push_back(std::move(bytes));
  }
  void on(const DecodedEnvelope& envelope, const Join& join) override {
    calls.push_back("join " + join.learner_id + " from " + envelope.sender_id);
  }
  void on(const DecodedEnvelope&, const FragmentUpdate& update, ReceivedTensor&& whole) override {
    calls.push_back("update " + std::to_string(update.fragment_id));
    tensor = std::move(whole.values);
  }
  void ignored(const DecodedEnvelope& envelope) override { calls.push_back(std::string("ignored ") + message_name(envelope.body)); }
};

}  // namespace

TEST_CASE("receiver dispatch: each whole message to its kind's handler, typed, what is not taken is told as such") {
  Receiver receiver;
  Recorder recorder;
  Outbox outbox("learner-1");
  Join join;
  join.learner_id = "learner-1";
  auto bytes = outbox.wrap(join);
  REQUIRE(bytes);
  receiver.dispatch(std::move(*bytes), recorder);
  auto leave = outbox.wrap(Leave{});
  REQUIRE(leave);
  receiver.dispatch(std::move(*leave), recorder);  // a kind the recorder does not take
  receiver.dispatch(WireBytes{'n', 'o', 't', ' ', 'a', 'n', ' ', 'e', 'n', 'v', 'e', 'l', 'o', 'p', 'e'}, recorder);
  REQUIRE(recorder.calls.size() == 3);
  CHECK(recorder.calls[0] == "join learner-1 from learner-1");
  CHECK(recorder.calls[1] == "ignored leave");
  CHECK(recorder.calls[2].rfind("refused bytes: ", 0) == 0);

  // A tensor's message reaches its handler once, whole, after each chunk passed the screen.
  recorder.calls.clear();
  const auto values = ramp(kOneAndAHalfChunks);
  for (auto& chunk : wrap_update(outbox, Codec::fp32, values)) receiver.dispatch(std::move(chunk), recorder);
  REQUIRE(recorder.calls.size() == 3);
  CHECK(recorder.calls[0] == "screen");
  CHECK(recorder.calls[1] == "screen");
  CHECK(recorder.calls[2] == "update 3");
  CHECK(recorder.tensor == values);

  // A screen that refuses: nothing is buffered, no handler runs.
  recorder.calls.clear();
  recorder.refuse_chunks = true;
  for (auto& chunk : wrap_update(outbox, Codec::fp32, values)) receiver.dispatch(std::move(chunk), recorder);
  CHECK(recorder.calls == std::vector<std::string>{"screen", "screen"});
}

TEST_CASE("receiver dispatch: an owner not ready holds a kind back untouched and dispatches it again later") {
  Receiver receiver;
  Recorder recorder;
  recorder.holding_updates = true;
  Outbox outbox("learner-2");
  const auto values = ramp(16);
  for (auto& chunk : wrap_update(outbox, Codec::fp32, values)) receiver.dispatch(std::move(chunk), recorder, true);
  Join join;
  join.learner_id = "learner-2";
  auto bytes = outbox.wrap(join);
  REQUIRE(bytes);
  receiver.dispatch(std::move(*bytes), recorder, true);  // a kind it is ready for
  REQUIRE(recorder.calls.size() == 2);
  CHECK(recorder.calls[0] == "held");
  CHECK(recorder.calls[1] == "join learner-2 from learner-2");

  recorder.calls.clear();
  recorder.holding_updates = false;
  for (auto& held : recorder.held_bytes) receiver.dispatch(std::move(held), recorder);
  CHECK(recorder.calls == std::vector<std::string>{"screen", "update 3"});
  CHECK(recorder.tensor == values);
}

TEST_CASE("receiver dispatch: a placed Persist chunk goes to placed(), a bad one to refused() with its envelope") {
  Receiver receiver(ReceiveOptions{DecodeLimits{}, false, /*place_persist=*/true});
  Recorder recorder;
  Outbox outbox("syncer");
  auto chunks = wrap_persist(outbox, 7, ramp(kOneAndAHalfChunks));
  REQUIRE(chunks.size() == 2);
  for (auto& chunk : chunks) receiver.dispatch(std::move(chunk), recorder);
  // A chunk whose payload does not match its checksum.
  auto bad = wrap(outbox, Codec::fp32, ramp(16), [&](TensorChunk chunk) {
    Persist persist;
    persist.ticket = 8;
    chunk.checksum += 1;
    persist.chunk = std::move(chunk);
    return Message{std::move(persist)};
  });
  REQUIRE(bad.size() == 1);
  receiver.dispatch(std::move(bad[0]), recorder);
  REQUIRE(recorder.calls.size() == 6);
  CHECK(recorder.calls[1] == "placed 7 at 0");
  CHECK(recorder.calls[3].rfind("placed 7 at ", 0) == 0);
  CHECK(recorder.calls[3] != "placed 7 at 0");
  CHECK(recorder.calls[4] == "screen");
  INFO(recorder.calls[5]);
  CHECK(recorder.calls[5].rfind("refused persist: corrupt", 0) == 0);
}

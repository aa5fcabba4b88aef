// Envelope codec: every message kind round-trips; every malformed input maps to its ErrorCode.
#include "messages/envelope.hpp"

#include <cstring>
#include <limits>
#include <random>

#include <capnp/any.h>
#include <capnp/message.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <doctest/doctest.h>

#include "messages/archipelago.capnp.h"
#include "messages/chunking.hpp"
#include "tests/messages/test_data.hpp"

namespace archipelago::messages {
namespace {

// A one-chunk fp32 tensor of `values`, its bytes owned by the returned chunk.
TensorChunk fp32_chunk(const std::vector<float>& values) {
  auto bytes = std::make_shared<std::vector<uint8_t>>();
  REQUIRE(encode_tensor(Codec::fp32, values.data(), values.size(), *bytes).ok());
  auto chunks = split_tensor(Codec::fp32, values.size(), ByteView{bytes->data(), bytes->size(), bytes});
  REQUIRE(chunks.ok());
  REQUIRE(chunks->size() == 1);
  return chunks->front();
}

Envelope wrap(Message body) { return Envelope{kProtocolVersion, "sender-7", 42, std::move(body)}; }

DecodedEnvelope round_trip(const Envelope& envelope) {
  auto bytes = encode(envelope);
  REQUIRE(bytes.ok());
  auto decoded = decode(std::move(*bytes));
  if (!decoded.ok()) FAIL(decoded.error().to_string());
  CHECK(decoded->protocol_version == kProtocolVersion);
  CHECK(decoded->sender_id == "sender-7");
  CHECK(decoded->sequence == 42);
  CHECK(decoded->body.index() == envelope.body.index());
  return std::move(*decoded);
}

void check_same_chunk(const TensorChunk& a, const TensorChunk& b) {
  CHECK(a.codec == b.codec);
  CHECK(a.element_count == b.element_count);
  CHECK(a.total_bytes == b.total_bytes);
  CHECK(a.chunk_index == b.chunk_index);
  CHECK(a.chunk_count == b.chunk_count);
  CHECK(a.checksum == b.checksum);
  CHECK(a.payload.to_vector() == b.payload.to_vector());
}

TEST_CASE("every message kind round-trips with all its fields") {
  const TensorChunk chunk = fp32_chunk(test::gaussian(3000, 41));  // large enough to be referenced
  const TensorChunk small = fp32_chunk({1.0f, -2.0f, 3.5f});        // small enough to be copied

  auto join = std::get<Join>(round_trip(wrap(Join{"l1", "node-a", "site-b", "cuda:0", 1234.5, "tok"})).body);
  CHECK(join.learner_id == "l1");
  CHECK(join.node == "node-a");
  CHECK(join.site == "site-b");
  CHECK(join.device == "cuda:0");
  CHECK(join.speed_hint == 1234.5);
  CHECK(join.auth_token == "tok");

  auto welcome = std::get<Welcome>(round_trip(wrap(Welcome{17, 4, true, "why"})).body);
  CHECK(welcome.version == 17);
  CHECK(welcome.fragment_count == 4);
  CHECK(welcome.accepted);
  CHECK(welcome.reason == "why");

  for (const TensorChunk* c : {&chunk, &small}) {
    auto update = std::get<FragmentUpdate>(
        round_trip(wrap(FragmentUpdate{"l2", 3, 99, 500, 1 << 20, 2.75f, *c, 5120.5})).body);
    CHECK(update.learner_id == "l2");
    CHECK(update.fragment_id == 3);
    CHECK(update.base_version == 99);
    CHECK(update.inner_steps == 500);
    CHECK(update.tokens == 1 << 20);
    CHECK(update.train_loss == 2.75f);
    CHECK(update.tokens_per_sec == 5120.5);
    check_same_chunk(update.chunk, *c);
  }

  auto global = std::get<GlobalFragment>(round_trip(wrap(GlobalFragment{2, 8, chunk, 7000.75})).body);
  CHECK(global.fragment_id == 2);
  CHECK(global.fastest_tokens_per_sec == 7000.75);
  CHECK(global.version == 8);
  CHECK_FALSE(global.uplink_codec.has_value());  // unset stays unset (the store's fragments)
  check_same_chunk(global.chunk, chunk);
  GlobalFragment scheduled{2, 9, chunk};
  scheduled.uplink_codec = Codec::int8;
  scheduled.schedule = {{0, 50}, {1234, 20}};
  auto with_codec = std::get<GlobalFragment>(round_trip(wrap(scheduled)).body);
  REQUIRE(with_codec.uplink_codec.has_value());
  CHECK(*with_codec.uplink_codec == Codec::int8);
  CHECK(with_codec.schedule == scheduled.schedule);
  CHECK(global.schedule.empty());

  auto heartbeat = std::get<Heartbeat>(round_trip(wrap(Heartbeat{"l3", 77, 11000.25})).body);
  CHECK(heartbeat.learner_id == "l3");
  CHECK(heartbeat.step == 77);
  CHECK(heartbeat.tokens_per_sec == 11000.25);
  auto timed = std::get<Heartbeat>(round_trip(wrap(Heartbeat{"l3", 7, 1.0, 0, 2, 9.5, 1.25, 6.5, 0.5, 0.75, true, 0.125,
                                                              0.375, 5.5, 1.0, 0.0625, 0.25})).body);
  CHECK(timed.incarnation == 2);
  CHECK(timed.alive_seconds == 9.5);
  CHECK(timed.recovery_seconds == 1.25);
  CHECK(timed.compute_seconds == 6.5);
  CHECK(timed.wait_seconds == 0.5);
  CHECK(timed.paused_seconds == 0.75);
  CHECK(timed.paused);
  CHECK(timed.throttled_seconds == 0.125);
  CHECK(timed.overhead_seconds == 0.375);
  CHECK(timed.sent_compute_seconds == 5.5);
  CHECK(timed.unsent_compute_seconds == 1.0);
  CHECK(timed.dropped_compute_seconds == 0.0625);
  CHECK(timed.restored_compute_seconds == 0.25);
  auto report = std::get<SlotReport>(
      round_trip(wrap(SlotReport{"l3", SlotState::restarting, 4, 3, 99, 20, 18, 2, 12, 1, 0.5, 1.5, 0.25, 0.75, 10, 1.25,
                                 -0.5, 3})).body);
  CHECK(report.state == SlotState::restarting);
  CHECK(report.incarnation == 4);
  CHECK(report.restarts == 3);
  CHECK(report.reporter == 99);
  CHECK(report.lifetime_seconds == 20);
  CHECK(report.compute_seconds == 12);
  CHECK(report.restarting_seconds == 1.5);
  CHECK(report.throttled_seconds == 0.25);
  CHECK(report.overhead_seconds == 0.75);
  CHECK(report.sent_compute_seconds == 10);
  CHECK(report.held_compute_seconds == 1.25);
  CHECK(report.left_compute_seconds == -0.5);  // less restored work than dropped: a signed sum
  CHECK(report.idle_seconds == 3);
  auto control = std::get<LearnerControl>(round_trip(wrap(LearnerControl{8, ControlAction::resume_learner, "l3"})).body);
  CHECK(control.request_id == 8);
  CHECK(control.action == ControlAction::resume_learner);
  CHECK(control.learner_id == "l3");
  auto throttle = std::get<LearnerControl>(
      round_trip(wrap(LearnerControl{9, ControlAction::throttle_learner, "l2", 2.5})).body);
  CHECK(throttle.action == ControlAction::throttle_learner);
  CHECK(throttle.factor == 2.5);
  auto corrupt = std::get<LearnerControl>(round_trip(wrap(LearnerControl{10, ControlAction::corrupt_update, "l1"})).body);
  CHECK(corrupt.action == ControlAction::corrupt_update);
  auto verb = std::get<AdminCommand>(round_trip(wrap(AdminCommand{11, AdminVerb::throttle, 0, 0, "", "4", "l1"})).body);
  CHECK(verb.verb == AdminVerb::throttle);
  CHECK(verb.value == "4");
  CHECK(verb.target == "l1");

  auto persist = std::get<Persist>(
      round_trip(wrap(Persist{9, 1, PersistKind::outer_momentum, small, "{\"a\":1}", 30})).body);
  CHECK(persist.version == 9);
  CHECK(persist.ticket == 30);
  CHECK(persist.fragment_id == 1);
  CHECK(persist.kind == PersistKind::outer_momentum);
  CHECK(persist.manifest_json == "{\"a\":1}");
  check_same_chunk(persist.chunk, small);

  auto persisted = std::get<Persisted>(round_trip(wrap(Persisted{9, true, "fine", 31})).body);
  CHECK(persisted.version == 9);
  CHECK(persisted.ticket == 31);
  CHECK(persisted.ok);
  CHECK(persisted.reason == "fine");

  auto leave = std::get<Leave>(round_trip(wrap(Leave{"l4", "shutdown", LeaveCode::stopped})).body);
  CHECK(leave.learner_id == "l4");
  CHECK(leave.reason == "shutdown");
  CHECK(leave.code == LeaveCode::stopped);

  Welcome refused{0, 0, false, "no slots"};
  refused.refusal = JoinRefusal::no_free_slots;
  CHECK(std::get<Welcome>(round_trip(wrap(refused)).body).refusal == JoinRefusal::no_free_slots);
  CHECK(std::get<Welcome>(round_trip(wrap(Welcome{17, 4, true, ""})).body).refusal == JoinRefusal::none);

  auto fetch = std::get<Fetch>(round_trip(wrap(Fetch{"l5", {7, 0, 9}})).body);
  CHECK(fetch.learner_id == "l5");
  CHECK(fetch.held_digests == std::vector<uint64_t>{7, 0, 9});
  CHECK(std::get<Restore>(round_trip(wrap(Restore{12})).body).request_id == 12);
  auto end = std::get<CommitEnd>(round_trip(wrap(CommitEnd{9, "{\"a\":1}", 32})).body);
  CHECK(end.version == 9);
  CHECK(end.ticket == 32);
  CHECK(end.manifest_json == "{\"a\":1}");
  CHECK(std::string(message_name(Message(end))) == "commit_end");
  auto command = std::get<AdminCommand>(round_trip(wrap(AdminCommand{3, AdminVerb::pin, 41, 0})).body);
  CHECK(command.request_id == 3);
  CHECK(command.verb == AdminVerb::pin);
  CHECK(command.version == 41);
  auto kill = std::get<AdminCommand>(
      round_trip(wrap(AdminCommand{6, AdminVerb::kill_learner, 0, 0, "", "", "learner-1"})).body);
  CHECK(kill.verb == AdminVerb::kill_learner);
  CHECK(kill.target == "learner-1");
  auto set = std::get<AdminCommand>(round_trip(wrap(AdminCommand{4, AdminVerb::set, 0, 0, "outer.lr", "0.5"})).body);
  CHECK(set.verb == AdminVerb::set);
  CHECK(set.key == "outer.lr");
  CHECK(set.value == "0.5");

  auto request = std::get<AdminRequest>(round_trip(wrap(AdminRequest{5, "kill", {"l1", "now"}})).body);
  CHECK(request.request_id == 5);
  CHECK(request.command == "kill");
  CHECK(request.args == std::vector<std::string>{"l1", "now"});

  auto reply = std::get<AdminReply>(round_trip(wrap(AdminReply{5, true, "killed", "{}"})).body);
  CHECK(reply.request_id == 5);
  CHECK(reply.ok);
  CHECK(reply.text == "killed");
  CHECK(reply.json == "{}");
  CHECK(std::string(message_name(Message(reply))) == "admin_reply");
}

TEST_CASE("decode is zero-copy for owned aligned input and keeps the buffer alive") {
  auto bytes = encode(wrap(GlobalFragment{0, 1, fp32_chunk(test::gaussian(5000, 42))}));
  REQUIRE(bytes.ok());
  const uint8_t* begin = bytes->data();
  const uint8_t* end = begin + bytes->size();
  TensorChunk kept;
  {
    auto decoded = decode(std::move(*bytes));
    REQUIRE(decoded.ok());
    kept = std::get<GlobalFragment>(decoded->body).chunk;
  }
  CHECK(kept.payload.data >= begin);
  CHECK(kept.payload.data + kept.payload.size <= end);
  CHECK(chunk_checksum(kept.payload.data, kept.payload.size) == kept.checksum);  // still alive
}

TEST_CASE("unaligned and borrowed input is copied, then decoded the same") {
  auto bytes = encode(wrap(Heartbeat{"l", 1, 2.0}));
  REQUIRE(bytes.ok());
  auto shifted = std::make_shared<std::vector<uint8_t>>(bytes->size() + 1);
  std::memcpy(shifted->data() + 1, bytes->data(), bytes->size());
  auto from_unaligned = decode(ByteView{shifted->data() + 1, bytes->size(), shifted});
  REQUIRE(from_unaligned.ok());
  CHECK(std::get<Heartbeat>(from_unaligned->body).step == 1);
  auto from_borrowed = decode(bytes->data(), bytes->size());
  REQUIRE(from_borrowed.ok());
  CHECK(std::get<Heartbeat>(from_borrowed->body).tokens_per_sec == 2.0);
}

// Builds a wire message directly, bypassing encode()'s checks, to craft what a buggy or
// malicious peer could send.
template <class Edit>
std::vector<uint8_t> raw_message(Edit&& edit) {
  capnp::MallocMessageBuilder builder;
  auto root = builder.initRoot<wire::Envelope>();
  root.setProtocolVersion(kProtocolVersion);
  root.setSenderId("raw");
  edit(root);
  auto words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  return std::vector<uint8_t>(bytes.begin(), bytes.end());
}

// A FragmentUpdate of `values` (fp32, one chunk) with `edit` applied to its chunk.
template <class Edit>
std::vector<uint8_t> raw_update(const std::vector<float>& values, Edit&& edit) {
  return raw_message([&](wire::Envelope::Builder root) {
    auto update = root.initBody().initFragmentUpdate();
    update.setLearnerId("l");
    update.setTrainLoss(1.0f);
    auto chunk = update.initChunk();
    chunk.setCodec(wire::Codec::FP32);
    chunk.setElementCount(values.size());
    chunk.setTotalBytes(values.size() * 4);
    chunk.setChunkCount(1);
    chunk.setPayload(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(values.data()),
                                         values.size() * 4));
    edit(update, chunk);
  });
}

ErrorCode decode_error(const std::vector<uint8_t>& bytes, const DecodeLimits& limits = {}) {
  auto decoded = decode(bytes.data(), bytes.size(), limits);
  if (decoded.ok()) {
    FAIL("decode accepted bytes it should reject");
    return ErrorCode::invalid_argument;
  }
  return decoded.error().code;
}

TEST_CASE("malformed messages are rejected with the expected code") {
  const auto values = test::gaussian(1000, 43);
  auto nan_values = values;
  nan_values[700] = std::numeric_limits<float>::quiet_NaN();
  using U = wire::FragmentUpdate::Builder;
  using C = wire::TensorChunk::Builder;
  auto valid = raw_update(values, [](U, C) {});
  REQUIRE(decode(valid.data(), valid.size()).ok());

  // Garbage after a well-formed segment table: a root pointer far outside the segment.
  std::vector<uint8_t> garbage(40, 0xff);
  std::memset(garbage.data(), 0, 8);
  garbage[4] = 4;  // one segment of 4 words
  auto trailing = valid;
  trailing.resize(trailing.size() + 8);
  auto too_many_segments = valid;
  too_many_segments[0] = 200;

  DecodeLimits small_payload;
  small_payload.max_payload_bytes = 1000;
  DecodeLimits small_message;
  small_message.max_message_bytes = 1024;
  DecodeLimits small_traversal;
  small_traversal.traversal_limit_words = 100;

  struct Row { const char* name; std::vector<uint8_t> bytes; DecodeLimits limits; ErrorCode code; };
  const Row rows[] = {
      {"garbage pointers", garbage, {}, ErrorCode::corrupt},
      {"trailing bytes", trailing, {}, ErrorCode::corrupt},
      {"too many segments", too_many_segments, {}, ErrorCode::oversized},
      {"wrong protocol version",
       raw_message([](wire::Envelope::Builder root) {
         root.setProtocolVersion(kProtocolVersion + 1);
         root.initBody().initLeave();
       }), {}, ErrorCode::wrong_version},
      {"unknown union tag",
       raw_message([](wire::Envelope::Builder root) {
         root.initBody().initLeave();
         const auto offset = capnp::Schema::from<wire::Envelope::Body>()
                                 .getProto().getStruct().getDiscriminantOffset();
         const uint16_t future_tag = 200;
         auto data = capnp::AnyStruct::Builder(kj::mv(root)).getDataSection();
         std::memcpy(data.begin() + 2 * offset, &future_tag, 2);
       }), {}, ErrorCode::unknown_type},
      {"unknown codec", raw_update(values, [](U, C c) { c.setCodec(static_cast<wire::Codec>(9)); }),
       {}, ErrorCode::unknown_type},
      {"unknown persist kind",
       raw_message([](wire::Envelope::Builder root) {
         root.initBody().initPersist().setKind(static_cast<wire::PersistKind>(5));
       }), {}, ErrorCode::unknown_type},
      {"chunk index >= count", raw_update(values, [](U, C c) { c.setChunkIndex(1); }), {},
       ErrorCode::inconsistent},
      {"zero chunk count", raw_update(values, [](U, C c) { c.setChunkCount(0); }), {},
       ErrorCode::inconsistent},
      {"payload length vs element count", raw_update(values, [](U, C c) { c.setElementCount(999); }),
       {}, ErrorCode::inconsistent},
      {"total bytes vs codec", raw_update(values, [](U, C c) { c.setCodec(wire::Codec::BF16); }), {},
       ErrorCode::inconsistent},
      {"payload length vs chunk geometry",
       raw_update(values, [](U, C c) { c.setChunkCount(2); }), {}, ErrorCode::inconsistent},
      {"payload over limit", valid, small_payload, ErrorCode::oversized},
      {"message over limit", valid, small_message, ErrorCode::oversized},
      {"traversal limit", valid, small_traversal, ErrorCode::oversized},
      {"NaN payload", raw_update(nan_values, [](U, C) {}), {}, ErrorCode::non_finite},
      {"NaN train loss",
       raw_update(values, [](U u, C) { u.setTrainLoss(std::numeric_limits<float>::quiet_NaN()); }),
       {}, ErrorCode::non_finite},
      {"negative tokens/s of an update",
       raw_update(values, [](U u, C) { u.setTokensPerSec(-1); }), {}, ErrorCode::non_finite},
      {"NaN fastest tokens/s of a global",
       *encode(wrap(GlobalFragment{2, 8, fp32_chunk(values), std::numeric_limits<double>::quiet_NaN()})), {},
       ErrorCode::non_finite},
      {"Inf tokens/s",
       raw_message([](wire::Envelope::Builder root) {
         root.initBody().initHeartbeat().setTokensPerSec(std::numeric_limits<double>::infinity());
       }), {}, ErrorCode::non_finite},
      {"negative compute seconds of a heartbeat",
       raw_message([](wire::Envelope::Builder root) { root.initBody().initHeartbeat().setComputeSeconds(-1); }), {},
       ErrorCode::non_finite},
      {"NaN lifetime of a slot report",
       raw_message([](wire::Envelope::Builder root) {
         root.initBody().initSlotReport().setLifetimeSeconds(std::numeric_limits<double>::quiet_NaN());
       }), {}, ErrorCode::non_finite},
      {"Inf compute seconds of an update",
       raw_update(values, [](U u, C) { u.setComputeSeconds(std::numeric_limits<double>::infinity()); }), {},
       ErrorCode::non_finite},
  };
  for (const Row& row : rows) {
    const std::string name = row.name;
    CAPTURE(name);
    CHECK(decode_error(row.bytes, row.limits) == row.code);
  }
}

TEST_CASE("a NaN payload passes when the caller turns the finite check off") {
  auto values = test::gaussian(100, 44);
  values[7] = std::numeric_limits<float>::infinity();
  auto bytes = raw_update(values, [](auto, auto) {});
  DecodeLimits unchecked;
  unchecked.check_finite = false;
  CHECK(decode(bytes.data(), bytes.size(), unchecked).ok());
}

TEST_CASE("every cut of a valid message is reported as truncated") {
  auto bytes = encode(wrap(FragmentUpdate{"l", 1, 2, 3, 4, 5.0f, fp32_chunk(test::gaussian(300, 45))}));
  REQUIRE(bytes.ok());
  for (size_t cut = 0; cut < bytes->size(); cut += (cut < 64 ? 1 : 37)) {
    CAPTURE(cut);
    CHECK(decode_error(std::vector<uint8_t>(bytes->begin(), bytes->begin() + cut)) ==
          ErrorCode::truncated);
  }
}

TEST_CASE("random bytes never decode and never crash") {
  std::mt19937 rng(46);
  auto valid = encode(wrap(AdminRequest{1, "status", {"a", "b"}}));
  REQUIRE(valid.ok());
  int random_decoded = 0, refused_without_reason = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bytes = *valid;
    const bool random = trial % 2 == 0;
    if (random) {
      bytes.resize(rng() % 200);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    } else {
      for (int flips = 0; flips < 4; ++flips) bytes[8 + rng() % (bytes.size() - 8)] = static_cast<uint8_t>(rng());
    }
    // Flips in the text may still decode; random bytes must not (the protocol version alone is a
    // 1-in-2^32 match), and whatever is refused says why. Nothing crashes or throws.
    auto decoded = decode(bytes.data(), bytes.size());
    if (decoded.ok()) {
      random_decoded += random;
    } else {
      refused_without_reason += decoded.error().reason.empty();
    }
  }
  CHECK(random_decoded == 0);
  CHECK(refused_without_reason == 0);
}

TEST_CASE("a receiver refuses a throttle outside 1..100 and an unknown control action") {
  auto decoded = [](const LearnerControl& control) {
    auto bytes = encode(wrap(control));
    REQUIRE(bytes.ok());
    return decode(bytes->data(), bytes->size());
  };
  for (double factor : {0.5, 0.0, -2.0, 101.0, std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(factor);
    auto d = decoded(LearnerControl{1, ControlAction::throttle_learner, "l0", factor});
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().code == ErrorCode::invalid_argument);
  }
  // The factor is read only for a throttle: a kill carries any and passes.
  CHECK(decoded(LearnerControl{1, ControlAction::kill_learner, "l0", 0}).ok());
  CHECK(decoded(LearnerControl{1, ControlAction::throttle_learner, "l0", 100}).ok());
  auto unknown = decoded(LearnerControl{1, static_cast<ControlAction>(kLastControlAction + 1), "l0"});
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().code == ErrorCode::invalid_argument);
}

TEST_CASE("a global fragment whose schedule holds more epochs than any run makes is refused") {
  GlobalFragment global{2, 8, fp32_chunk({1.0f, 2.0f})};
  for (uint32_t e = 0; e < 1024; ++e) global.schedule.push_back({e * 10, 10});
  auto bytes = encode(wrap(global));
  REQUIRE(bytes.ok());
  CHECK(decode(bytes->data(), bytes->size()).ok());  // 1024: as many as a schedule may hold
  global.schedule.push_back({1024 * 10, 10});
  bytes = encode(wrap(global));
  REQUIRE(bytes.ok());
  auto decoded = decode(bytes->data(), bytes->size());
  REQUIRE_FALSE(decoded.ok());
  CHECK(decoded.error().code == ErrorCode::invalid_argument);
}

TEST_CASE("encode refuses a chunk the receiver would reject") {
  TensorChunk chunk = fp32_chunk(test::gaussian(10, 47));
  chunk.chunk_index = 3;
  auto bytes = encode(wrap(GlobalFragment{0, 1, chunk}));
  REQUIRE_FALSE(bytes.ok());
  CHECK(bytes.error().code == ErrorCode::inconsistent);
}

}  // namespace
}  // namespace archipelago::messages

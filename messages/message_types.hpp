// Plain C++ structs for every message of the wire protocol (messages/archipelago.capnp).
//
// Actors build and read these; only messages/envelope.cpp converts them to and from Cap'n Proto,
// so no actor code touches capnp builders. Field meanings are documented once, in the schema.
// Invariant of a decoded message: every field has passed validation (see envelope.hpp), and every
// ByteView payload keeps the received buffer alive for as long as the view (or a copy) exists.
// Value types: copy and move freely, from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "messages/protocol.hpp"
#include "messages/tensor_codec.hpp"

namespace archipelago::messages {

// A read-only byte range. `owner`, when set, keeps the bytes alive (decoded payloads point into
// the received message without copying it). When null the range is borrowed: whoever built the
// view keeps the bytes alive while it is used, e.g. a tensor being encoded.
struct ByteView {
  const uint8_t* data = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;

  const uint8_t* begin() const { return data; }
  const uint8_t* end() const { return data + size; }
  std::vector<uint8_t> to_vector() const { return std::vector<uint8_t>(begin(), end()); }
};

// One chunk of an encoded tensor (see messages/chunking.hpp for how chunks are cut and placed).
struct TensorChunk {
  Codec codec = Codec::fp32;
  uint64_t element_count = 0;
  uint64_t total_bytes = 0;
  uint32_t chunk_index = 0;
  uint32_t chunk_count = 1;
  uint64_t checksum = 0;  // XXH3-64 of payload
  ByteView payload;
};

struct Join {
  std::string learner_id;
  std::string node;
  std::string site;
  std::string device;
  double speed_hint = 0.0;
  std::string auth_token;
  std::vector<uint64_t> held_digests{};  // to the store: what the requester holds, per fragment
};

enum class JoinRefusal : uint8_t {
  none = 0,
  unauthenticated = 1,
  unknown_learner = 2,
  no_committed_version = 3,
  no_free_slots = 4,
  bad_request = 5,
};

struct Welcome {
  uint64_t version = 0;
  uint32_t fragment_count = 0;
  bool accepted = false;
  std::string reason;
  std::vector<uint32_t> held_fragments{};     // from the store: not sent, the requester holds them
  std::vector<uint64_t> fragment_versions{};  // from the store: per fragment, the version it last changed at
  std::vector<uint64_t> received_until{};     // from the syncer: per fragment, its last accepted update's to_step
  JoinRefusal refusal = JoinRefusal::none;    // why it is refused; control flow reads this, not `reason`
};

struct FragmentUpdate {
  std::string learner_id;
  uint32_t fragment_id = 0;
  uint64_t base_version = 0;
  uint32_t inner_steps = 0;
  uint64_t tokens = 0;
  float train_loss = 0.0f;
  TensorChunk chunk;
  double tokens_per_sec = 0;  // the sender's throughput (0: not measured yet)
  uint64_t round = 0;         // decoupled: schedule slot of the fragment this update is due in
  uint64_t from_step = 0;     // the sender's data position when this work began
  uint64_t to_step = 0;       // ... and when it sent it
  double compute_seconds = 0; // the compute time behind it (each step's time × this fragment's share)
};

// An epoch of the fragment schedule: H = inner_steps for a learner's steps after from_step.
struct InnerStepsFrom {
  uint64_t from_step = 0;
  uint32_t inner_steps = 0;
  bool operator==(const InnerStepsFrom& o) const { return from_step == o.from_step && inner_steps == o.inner_steps; }
};

struct GlobalFragment {
  uint32_t fragment_id = 0;
  uint64_t version = 0;
  TensorChunk chunk;
  double fastest_tokens_per_sec = 0;  // async mode's dynamic local steps (0: unknown)
  uint64_t delta_base = 0;            // 0: absolute values; else a delta against B of this version
  std::optional<Codec> uplink_codec;  // the syncer's: learners encode their next updates with it
  std::vector<InnerStepsFrom> schedule;  // the syncer's fragment schedule (empty: not said)
};

struct Heartbeat {
  std::string learner_id;
  uint64_t step = 0;
  double tokens_per_sec = 0.0;
  uint64_t nonfinite_recoveries = 0;
  // This incarnation's time so far, on the learner's clock:
  uint32_t incarnation = 0;
  double alive_seconds = 0;
  double recovery_seconds = 0;
  double compute_seconds = 0;
  double wait_seconds = 0;
  double paused_seconds = 0;
  bool paused = false;
  double throttled_seconds = 0;
  double overhead_seconds = 0;
  // The fate of its compute (compute + restored = sent + unsent + dropped):
  double sent_compute_seconds = 0;
  double unsent_compute_seconds = 0;
  double dropped_compute_seconds = 0;
  double restored_compute_seconds = 0;
  // Its recent inner steps' cross-entropy, an exponential mean over ~10 steps (NaN: no step yet).
  double train_loss = std::numeric_limits<double>::quiet_NaN();
};

enum class SlotState : uint8_t { running = 0, restarting = 1, finished = 2, failed = 3 };

struct SlotReport {
  std::string learner_id;
  SlotState state = SlotState::running;
  uint32_t incarnation = 0;
  uint32_t restarts = 0;
  uint64_t reporter = 0;
  double lifetime_seconds = 0;
  double alive_seconds = 0;
  double recovery_seconds = 0;
  double compute_seconds = 0;
  double wait_seconds = 0;
  double paused_seconds = 0;
  double restarting_seconds = 0;
  double throttled_seconds = 0;
  double overhead_seconds = 0;
  double sent_compute_seconds = 0;
  double held_compute_seconds = 0;  // the running incarnation's unsent work
  double left_compute_seconds = 0;  // ended incarnations' unsent work + dropped − restored
  double idle_seconds = 0;
};

enum class ControlAction : uint8_t { kill_learner = 0, restart_learner = 1, pause_learner = 2, resume_learner = 3,
                                     kill_node = 4, throttle_learner = 5, corrupt_update = 6 };
constexpr uint8_t kLastControlAction = 6;
constexpr double kMaxThrottle = 100;  // throttle_learner: factor in [1, kMaxThrottle]

struct LearnerControl {
  uint64_t request_id = 0;
  ControlAction action = ControlAction::kill_learner;
  std::string learner_id;
  double factor = 1;  // throttle_learner
};

enum class PersistKind : uint8_t { parameters = 0, outer_momentum = 1 };

struct Persist {
  uint64_t version = 0;
  uint32_t fragment_id = 0;
  PersistKind kind = PersistKind::parameters;
  TensorChunk chunk;
  std::string manifest_json;
  uint64_t ticket = 0;  // a prepared commit's chunks (archipelago.capnp, CommitEnd); 0: a version's
};

struct Persisted {
  uint64_t version = 0;
  bool ok = false;
  std::string reason;
  uint64_t ticket = 0;  // version 0: this ticket is prepared (or failed to be)
};

enum class LeaveCode : uint8_t { finished = 0, dead = 1, stopped = 2 };

struct Leave {
  std::string learner_id;
  std::string reason;  // for people
  LeaveCode code = LeaveCode::finished;
};

struct Fetch {
  std::string learner_id;
  std::vector<uint64_t> held_digests{};  // per fragment: XXH3-64 of what the requester holds (0: none)
};

struct Restore {
  uint64_t request_id = 0;
};

enum class AdminVerb : uint8_t {
  status = 0, learners = 1, nodes = 2, versions = 3, pin = 4, unpin = 5, audit = 6, kill_syncer = 7, set = 8,
  drain = 9, kill_learner = 10, kill_node = 11, restart_learner = 12, pause = 13, resume = 14, checkpoint = 15,
  events = 16, version_show = 17, throttle = 18, corrupt_update = 19
};
constexpr uint8_t kLastAdminVerb = 19;

struct AdminCommand {
  uint64_t request_id = 0;
  AdminVerb verb = AdminVerb::status;
  uint64_t version = 0;  // pin, unpin
  uint32_t count = 0;    // audit (0: 20)
  std::string key{};     // set
  std::string value{};   // set
  std::string target{};  // kill, restart, pause, resume
};

struct CommitEnd {
  uint64_t version = 0;
  std::string manifest_json;
  uint64_t ticket = 0;  // version 0: prepare this ticket's chunks; otherwise record them as `version`
};

struct AdminRequest {
  uint64_t request_id = 0;
  std::string command;
  std::vector<std::string> args;
};

struct AdminReply {
  uint64_t request_id = 0;
  bool ok = false;
  std::string text;
  std::string json;
};

// The alternatives appear in the order of Envelope.body in the schema.
using Message = std::variant<Join, Welcome, FragmentUpdate, GlobalFragment, Heartbeat, Persist,
                             Persisted, Leave, AdminRequest, AdminReply, Fetch, Restore, CommitEnd,
                             AdminCommand, SlotReport, LearnerControl>;

struct Envelope {
  uint32_t protocol_version = kProtocolVersion;
  std::string sender_id;
  uint64_t sequence = 0;
  Message body;
};

// What decode returns: an Envelope whose payloads own (share) the received bytes.
using DecodedEnvelope = Envelope;

}  // namespace archipelago::messages

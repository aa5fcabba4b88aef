// How actors put Envelopes on the wire: one encoded messages::Envelope = one CAF message holding a
// `std::vector<char>` (a type CAF 0.17.6 serializes natively, so the same bytes cross caf::io links
// to remote nodes without type registration). Tensors travel as FragmentUpdate / GlobalFragment /
// Persist messages of at most kMaxChunkBytes of payload each and are put back together by a
// TensorInbox (messages::Reassembler per stream).
//
// Two message shapes exist between actors:
//   (WireBytes)             one-way envelope (join, update, fragment, heartbeat, persist, leave ...)
//   (admin_atom, WireBytes) AdminRequest envelope; the reply is one AdminReply envelope.
// Plus CAF's own system messages (down/exit) and self-sent timer atoms (never between actors).
// Free functions are pure (any thread); a TensorInbox has one owner.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <caf/string_view.hpp>
#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "messages/chunking.hpp"
#include "messages/envelope.hpp"

namespace archipelago::actors {

using WireBytes = std::vector<char>;

// Atoms (<= 10 characters). admin_atom tags request/reply; the others are self-sent timers.
using admin_atom = caf::atom_constant<caf::atom("admin")>;
using step_atom = caf::atom_constant<caf::atom("step")>;
using beat_atom = caf::atom_constant<caf::atom("beat")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using init_atom = caf::atom_constant<caf::atom("init")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using eval_atom = caf::atom_constant<caf::atom("eval")>;
// Sent to a learner (or across processes to a node): finish the in-flight work, leave, exit normally.
using stop_atom = caf::atom_constant<caf::atom("stop")>;
// Store commands of the admin actor (local only): pin / unpin a version, append / read the audit log.
using pin_atom = caf::atom_constant<caf::atom("pin")>;
using unpin_atom = caf::atom_constant<caf::atom("unpin")>;
using audit_atom = caf::atom_constant<caf::atom("audit")>;
// The admin actor's `set` of a runtime-tunable syncer key (local only): (tune, key, value).
using tune_atom = caf::atom_constant<caf::atom("tune")>;
// failure monitor -> syncer, in process: the goodput ledger's carry (accounting.hpp, LedgerCarry) as
// JSON text, for the next committed version's manifest.
using ledger_atom = caf::atom_constant<caf::atom("ledger")>;
// To a learner (local only, with the process key): (pause, key, true | false); (restart, key).
using pause_atom = caf::atom_constant<caf::atom("pause")>;
// To a learner (local only, with the process key): (throttle, key, factor >= 1); (corrupt, key): its
// next update leaves with one payload bit flipped (drill hook).
using throttle_atom = caf::atom_constant<caf::atom("throttle")>;
using corrupt_atom = caf::atom_constant<caf::atom("corrupt")>;
// A store actor's prepare worker -> the store actor (local only): (prepared, ticket) is done.
using prepared_atom = caf::atom_constant<caf::atom("prepared")>;
// The syncer -> its store (local only), as a request after a window of a commit's chunks: the
// (empty) answer says the store has taken every chunk sent before it.
using taken_atom = caf::atom_constant<caf::atom("taken")>;
// To the syncer (local only): commit every fragment with pending contributions now.
using checkpoint_atom = caf::atom_constant<caf::atom("checkpoint")>;
// A learner control for a node (LearnerControl): gateway -> node link -> node watcher.
using control_atom = caf::atom_constant<caf::atom("control")>;

// Names in the actor registry; a restarted actor is registered again under the same name.
inline caf::atom_value syncer_name() { return caf::atom("syncer"); }
inline caf::atom_value store_name() { return caf::atom("store"); }
inline caf::atom_value monitor_name() { return caf::atom("monitor"); }
inline caf::atom_value evaluator_name() { return caf::atom("evaluator"); }
inline caf::atom_value learner_supervisor_name() { return caf::atom("lsup"); }
caf::atom_value learner_name(int index);  // "l<index>"
std::string learner_id(int index);         // "learner-<index>"
std::vector<std::string> learner_ids(int count);  // learner_id(0 .. count - 1)
int learner_index(const std::string& id);  // -1 when `id` is not "learner-<n>"

// Sequence numbers and sender id of one actor's outgoing envelopes.
class Outbox {
 public:
  explicit Outbox(std::string sender_id) : sender_id_(std::move(sender_id)) {}
  // Encodes `body` into wire bytes; counts them. Encoding errors are bugs of the sender.
  Expected<WireBytes> wrap(messages::Message body);
  // Cuts an encoded tensor into chunks and wraps one message per chunk, built by `make_body`.
  Expected<std::vector<WireBytes>> wrap_tensor(messages::Codec codec, uint64_t element_count,
                                               const std::vector<uint8_t>& encoded,
                                               const std::function<messages::Message(messages::TensorChunk)>& make_body);
  // The same for a tensor whose encoded bytes lie in several buffers (messages::for_each_chunk),
  // handing each message to `send` as soon as it is wrapped: no copy of the whole tensor is made,
  // and at most one chunk's message exists here at a time.
  // Only chunks [first_chunk, first_chunk + chunk_limit) are sent; returns the tensor's chunk count.
  Expected<uint32_t> stream_tensor(messages::Codec codec, uint64_t element_count,
                                   const std::vector<messages::ByteView>& parts,
                                   const std::function<messages::Message(messages::TensorChunk)>& make_body,
                                   const std::function<void(WireBytes&&)>& send, uint32_t first_chunk = 0,
                                   uint32_t chunk_limit = UINT32_MAX);
  const std::string& sender_id() const { return sender_id_; }
  uint64_t bytes() const { return bytes_; }

 private:
  std::string sender_id_;
  uint64_t sequence_ = 0;
  uint64_t bytes_ = 0;
};

// Decodes one wire message (takes the bytes; zero-copy when aligned).
Expected<messages::DecodedEnvelope> unwrap(WireBytes&& bytes, const messages::DecodeLimits& limits = {});

// Admin helpers: a request envelope and the JSON of a reply.
WireBytes admin_request(const std::string& sender, const std::string& command, std::vector<std::string> args = {});
WireBytes admin_reply(const std::string& sender, uint64_t request_id, bool ok, const std::string& text,
                      const nlohmann::json& json);
// Parses an AdminRequest (command + args) out of wire bytes.
Expected<messages::AdminRequest> read_admin_request(WireBytes&& bytes);
Expected<nlohmann::json> read_admin_reply(WireBytes&& bytes);
// Asks the actor registered as `name` (from outside any actor: a scoped actor that blocks up to
// `timeout_s`) and returns the JSON of its reply; unavailable when nothing is registered or no reply came.
Expected<nlohmann::json> ask_admin(caf::actor_system& system, caf::atom_value name, const std::string& sender,
                                   const std::string& command, std::vector<std::string> args, double timeout_s);

// Reassembles chunked tensors, one stream per key (e.g. "learner-2/3" or "fragment/3"). When a
// tensor completes, add() returns its decoded floats; until then an empty optional-like result.
class TensorInbox {
 public:
  struct Result {
    bool complete = false;
    std::vector<float> values;     // decoded
    // keep_quantized and a quantized codec: the tensor as it came, not decoded (`values` empty)
    messages::Codec codec = messages::Codec::fp32;
    std::vector<uint8_t> encoded;
  };
  // Errors: whatever the reassembler or decoder says (inconsistent, corrupt, non_finite, ...); the
  // stream is reset on error so that a later retransmission starts clean. Chunks of one sender
  // arrive in order, so a chunk 0 always starts a new tensor: a partial stream of the same key (a
  // sender cut off mid-tensor) is dropped then, and can never splice into the next tensor.
  // keep_quantized: a complete int8/int4 tensor is handed over encoded (its scales and size are
  // checked by whoever decodes or folds it: messages::quantized_norm / accumulate_quantized).
  Expected<Result> add(const std::string& key, const messages::TensorChunk& chunk, bool keep_quantized = false);
  void clear() { streams_.clear(); }
  int64_t streams_cut() const { return streams_cut_; }  // partial streams dropped by a new chunk 0

 private:
  std::map<std::string, messages::Reassembler> streams_;
  int64_t streams_cut_ = 0;
};

// Raw fp32 bytes -> floats (store blobs are fp32, little-endian).
std::vector<float> bytes_to_floats(const std::vector<uint8_t>& bytes);

}  // namespace archipelago::actors

namespace archipelago::actors {
// Seconds on the process-wide monotonic clock: every actor stamps events with it, so times from
// different actors (a kill, a rejoin, a merge) can be compared.
double monotonic_seconds();
}  // namespace archipelago::actors

// Framing: how one sender puts Envelopes on a wire and how one receiver takes tensors off it.
//
// One encoded Envelope is one `WireBytes` (a `std::vector<char>`: the type CAF 0.17.6 serializes
// natively, so the same bytes cross an in-process mailbox, a caf::io link and a Cap'n Proto RPC
// call). An `Outbox` numbers one sender's envelopes and cuts a tensor into FragmentUpdate /
// GlobalFragment / Persist messages of at most kMaxChunkBytes of payload each; a `TensorInbox`
// puts them back together, one stream per key (messages::Reassembler per stream), and decodes the
// tensor once it is complete.
//
// Invariants: an Outbox's sequence numbers strictly increase; a TensorInbox never splices chunks
// of two tensors (a chunk 0 always starts a new one) and resets a stream on any error, so a later
// retransmission starts clean. Free functions are pure (any thread); an Outbox or a TensorInbox
// has one owner. No actor, no socket: the actors (actors/) and the cross-site plane (remote/) both
// frame through this file; receiver.hpp builds the one receive path (bytes in, whole messages out)
// on unwrap and TensorInbox.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "messages/chunking.hpp"
#include "messages/envelope.hpp"

namespace archipelago::messages {

using WireBytes = std::vector<char>;

// Sequence numbers and sender id of one sender's outgoing envelopes.
class Outbox {
 public:
  explicit Outbox(std::string sender_id) : sender_id_(std::move(sender_id)) {}
  // Encodes `body` into wire bytes; counts them. Encoding errors are bugs of the sender.
  Expected<WireBytes> wrap(Message body);
  // Cuts an encoded tensor into chunks and wraps one message per chunk, built by `make_body`.
  Expected<std::vector<WireBytes>> wrap_tensor(Codec codec, uint64_t element_count, const std::vector<uint8_t>& encoded,
                                               const std::function<Message(TensorChunk)>& make_body);
  // The same for a tensor whose encoded bytes lie in several buffers (for_each_chunk), handing each
  // message to `send` as soon as it is wrapped: no copy of the whole tensor is made, and at most
  // one chunk's message exists here at a time.
  // Only chunks [first_chunk, first_chunk + chunk_limit) are sent; returns the tensor's chunk count.
  Expected<uint32_t> stream_tensor(Codec codec, uint64_t element_count, const std::vector<ByteView>& parts,
                                   const std::function<Message(TensorChunk)>& make_body,
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
Expected<DecodedEnvelope> unwrap(WireBytes&& bytes, const DecodeLimits& limits = {});

// Reassembles chunked tensors, one stream per key (e.g. "learner-2/3" or "fragment/3"). When a
// tensor completes, add() returns its decoded floats; until then a result with complete = false.
class TensorInbox {
 public:
  struct Result {
    bool complete = false;
    std::vector<float> values;  // decoded
    // keep_quantized and a quantized codec: the tensor as it came, not decoded (`values` empty)
    Codec codec = Codec::fp32;
    std::vector<uint8_t> encoded;
  };
  // Errors: whatever the reassembler or decoder says (inconsistent, corrupt, non_finite, ...); the
  // stream is reset on error. Chunks of one sender arrive in order, so a chunk 0 always starts a new
  // tensor: a partial stream of the same key (a sender cut off mid-tensor) is dropped then.
  // keep_quantized: a complete int8/int4 tensor is handed over encoded (its scales and size are
  // checked by whoever decodes or folds it: quantized_norm / accumulate_quantized).
  Expected<Result> add(const std::string& key, const TensorChunk& chunk, bool keep_quantized = false);
  void clear() { streams_.clear(); }
  int64_t streams_cut() const { return streams_cut_; }  // partial streams dropped by a new chunk 0

 private:
  std::map<std::string, Reassembler> streams_;
  int64_t streams_cut_ = 0;
};

// Raw fp32 bytes -> floats (store blobs are fp32, little-endian).
std::vector<float> bytes_to_floats(const std::vector<uint8_t>& bytes);

}  // namespace archipelago::messages

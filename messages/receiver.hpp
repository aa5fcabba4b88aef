// Receiving: wire bytes in, whole messages out — the one path by which an owner (an actor, the
// plane) takes Envelopes off its wire.
//
// receive() unwraps and decodes one wire message with limits (framing.hpp, envelope.hpp). A message
// without a tensor is whole at once. A tensor chunk (FragmentUpdate, GlobalFragment, Persist) is
// first shown to the owner's screen, which may refuse it before anything is buffered, then taken
// into the stream of its tensor (one per key: an update's learner and fragment, a global's sender,
// fragment and version, a Persist chunk's ticket, fragment and kind): its message is whole once the
// tensor is, and comes with the tensor decoded (or, for updates when asked, as the codes of an
// int8/int4 tensor). A receiver that writes a commit's bytes elsewhere (the checkpoint store) takes
// Persist chunks by placement instead: each is checked against its tensor's geometry, earlier
// chunks and checksum (ChunkTracker) and handed over with where its bytes go, never buffered.
//
// Invariants: a reassembled stream never splices chunks of two tensors (a chunk 0 starts a new one)
// and is reset on any error, so a retransmission starts clean; a placed stream refuses a chunk it
// already has, keeps what it has on a refused chunk (a retransmission can still complete it), and
// is forgotten once whole. One owner, one thread at a time; no actor, no socket.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.hpp"
#include "messages/chunking.hpp"
#include "messages/envelope.hpp"
#include "messages/framing.hpp"

namespace archipelago::messages {

// A whole tensor as a receiver hands it over: decoded, or the codes of an int8/int4 one.
struct ReceivedTensor {
  Codec codec = Codec::fp32;
  std::vector<float> values;     // decoded
  std::vector<uint8_t> encoded;  // keep_quantized_updates and a quantized codec: as it came (`values` empty)
};

// What receive() made of one wire message that decoded.
struct Received {
  enum class State {
    whole,     // act on `envelope`; a tensor's message comes with its tensor in `tensor`
    not_yet,   // a tensor chunk was taken; its tensor is not whole yet
    placed,    // place_persist: a Persist chunk passed its checks; `placement` says where its bytes go
    screened,  // the owner's screen refused the chunk; nothing was buffered
    refused,   // the chunk or its tensor was refused: `error` says why
  };
  State state = State::whole;
  DecodedEnvelope envelope;
  ReceivedTensor tensor;      // whole, for a tensor's message
  ChunkPlacement placement;   // placed
  Error error{ErrorCode::invalid_argument, ""};  // refused
};

struct ReceiveOptions {
  DecodeLimits limits;
  // A whole int8/int4 FragmentUpdate tensor is handed over as its codes (its scales and size are
  // checked by whoever decodes or folds it: quantized_norm / accumulate_quantized).
  bool keep_quantized_updates = false;
  // Persist chunks are placed, not reassembled (see above).
  bool place_persist = false;
};

class Receiver {
 public:
  // Asked about each tensor chunk that decoded, before it is buffered or placed; false refuses it
  // (the screen does whatever a refusal means to its owner: count it, answer the sender).
  using Screen = std::function<bool(const DecodedEnvelope& envelope, const TensorChunk& chunk)>;

  explicit Receiver(ReceiveOptions options = {}) : options_(options) {}

  // Errors: whatever decode says of bytes that are not a valid envelope (no sender is known then).
  Expected<Received> receive(WireBytes&& bytes, const Screen& screen = {});

  // Forgets the placed streams of one commit ticket (given up by its sender).
  void drop_persist(uint64_t ticket);
  // Forgets every partial stream of Persist chunks, placed or reassembled (a replay starts again).
  void drop_persist();

 private:
  // The tensor chunk of an envelope that decoded: screened, then reassembled or placed.
  void take_chunk(Received& received, const Screen& screen);
  void place(Received& received, const Persist& persist);

  ReceiveOptions options_;
  TensorInbox inbox_;          // FragmentUpdate and GlobalFragment streams
  TensorInbox persist_inbox_;  // Persist streams, reassembled
  std::map<std::tuple<uint64_t, uint32_t, PersistKind>, ChunkTracker> placing_;  // ticket, fragment, kind
};

}  // namespace archipelago::messages

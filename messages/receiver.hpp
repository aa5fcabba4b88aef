// Receiving: wire bytes in, whole messages out — the one path by which an owner (an actor, the
// plane) takes Envelopes off its wire.
//
// dispatch() is how an actor takes its mailbox's bytes: it receives them and hands what they make
// to the owner's Handler, typed: each whole message to the handler of its kind (with its tensor),
// a placed Persist chunk to placed(), a refusal to refused(). The actor never sees bytes, only
// typed messages; an owner not ready for some kinds yet holds their bytes back (hold / held) and
// dispatches them again later.
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

// What an owner does with what it receives. Every hook has a default: a chunk passes the screen,
// a refusal and a kind the owner does not take are dropped (ignored() is told of the latter).
class Handler {
 public:
  virtual ~Handler() = default;
  // Asked about each tensor chunk that decoded, before it is buffered or placed; false refuses it
  // (the handler does whatever a refusal means to its owner: count it, answer the sender).
  virtual bool screen(const DecodedEnvelope& envelope, const TensorChunk& chunk);
  // Bytes that are not a valid envelope (`envelope` null), or a chunk or its tensor refused.
  virtual void refused(const DecodedEnvelope* envelope, const Error& error);
  // place_persist: a Persist chunk that passed its checks, and where its bytes go.
  virtual void placed(const DecodedEnvelope& envelope, const Persist& persist, const ChunkPlacement& placement);
  // An owner not ready for a kind yet: true hands the message's bytes back untouched through held().
  virtual bool hold(const Message& body);
  virtual void held(WireBytes&& bytes);
  // Whole messages, one handler per kind; a tensor's message comes with its whole tensor.
  virtual void on(const DecodedEnvelope& envelope, const Join& join);
  virtual void on(const DecodedEnvelope& envelope, const Welcome& welcome);
  virtual void on(const DecodedEnvelope& envelope, const FragmentUpdate& update, ReceivedTensor&& tensor);
  virtual void on(const DecodedEnvelope& envelope, const GlobalFragment& global, ReceivedTensor&& tensor);
  virtual void on(const DecodedEnvelope& envelope, const Heartbeat& heartbeat);
  virtual void on(const DecodedEnvelope& envelope, const Persist& persist, ReceivedTensor&& tensor);
  virtual void on(const DecodedEnvelope& envelope, const Persisted& persisted);
  virtual void on(const DecodedEnvelope& envelope, const Leave& leave);
  virtual void on(const DecodedEnvelope& envelope, const AdminRequest& request);
  virtual void on(const DecodedEnvelope& envelope, const AdminReply& reply);
  virtual void on(const DecodedEnvelope& envelope, const Fetch& fetch);
  virtual void on(const DecodedEnvelope& envelope, const Restore& restore);
  virtual void on(const DecodedEnvelope& envelope, const CommitEnd& end);
  virtual void on(const DecodedEnvelope& envelope, const AdminCommand& command);
  virtual void on(const DecodedEnvelope& envelope, const SlotReport& report);
  virtual void on(const DecodedEnvelope& envelope, const LearnerControl& control);
  // A whole message of a kind the owner does not take.
  virtual void ignored(const DecodedEnvelope& envelope);
};

class Receiver {
 public:
  // Asked about each tensor chunk that decoded, before it is buffered or placed; false refuses it
  // (the screen does whatever a refusal means to its owner: count it, answer the sender).
  using Screen = std::function<bool(const DecodedEnvelope& envelope, const TensorChunk& chunk)>;

  explicit Receiver(ReceiveOptions options = {}) : options_(options) {}

  // Errors: whatever decode says of bytes that are not a valid envelope (no sender is known then).
  Expected<Received> receive(WireBytes&& bytes, const Screen& screen = {});
  // Receives `bytes` and hands what they make to `handler` (see above). `holding`: the handler may
  // hold some kinds back now (the bytes are then peeked at first, copied).
  void dispatch(WireBytes&& bytes, Handler& handler, bool holding = false);

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

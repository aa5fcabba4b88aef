#include "messages/receiver.hpp"

#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace archipelago::messages {
namespace {

// The tensor chunk a message carries, or nullptr.
const TensorChunk* chunk_of(const Message& body) {
  if (const auto* update = std::get_if<FragmentUpdate>(&body)) return &update->chunk;
  if (const auto* global = std::get_if<GlobalFragment>(&body)) return &global->chunk;
  if (const auto* persist = std::get_if<Persist>(&body)) return &persist->chunk;
  return nullptr;
}

// The stream of the tensor a chunk belongs to.
std::string stream_key(const DecodedEnvelope& envelope) {
  if (const auto* update = std::get_if<FragmentUpdate>(&envelope.body)) {
    return update->learner_id + "/" + std::to_string(update->fragment_id);
  }
  if (const auto* global = std::get_if<GlobalFragment>(&envelope.body)) {
    return envelope.sender_id + "/" + std::to_string(global->fragment_id) + "/" + std::to_string(global->version);
  }
  const auto& persist = std::get<Persist>(envelope.body);
  return std::to_string(persist.ticket) + "/" + std::to_string(persist.fragment_id) +
         (persist.kind == PersistKind::parameters ? "/p" : "/m");
}

}  // namespace

Expected<Received> Receiver::receive(WireBytes&& bytes, const Screen& screen) {
  auto envelope = unwrap(std::move(bytes), options_.limits);
  if (!envelope) return envelope.error();
  Received received;
  received.envelope = std::move(*envelope);
  if (chunk_of(received.envelope.body)) take_chunk(received, screen);
  return received;
}

void Receiver::take_chunk(Received& received, const Screen& screen) {
  const Message& body = received.envelope.body;
  const TensorChunk& chunk = *chunk_of(body);
  if (screen && !screen(received.envelope, chunk)) {
    received.state = Received::State::screened;
    return;
  }
  const auto* persist = std::get_if<Persist>(&body);
  if (persist && options_.place_persist) {
    place(received, *persist);
    return;
  }
  const bool keep_quantized = options_.keep_quantized_updates && std::holds_alternative<FragmentUpdate>(body);
  auto added = (persist ? persist_inbox_ : inbox_).add(stream_key(received.envelope), chunk, keep_quantized);
  if (!added) {
    received.state = Received::State::refused;
    received.error = added.error();
    return;
  }
  if (!added->complete) {
    received.state = Received::State::not_yet;
    return;
  }
  received.tensor = ReceivedTensor{added->codec, std::move(added->values), std::move(added->encoded)};
}

void Receiver::place(Received& received, const Persist& persist) {
  const auto key = std::make_tuple(persist.ticket, persist.fragment_id, persist.kind);
  auto it = placing_.find(key);
  if (it == placing_.end()) it = placing_.emplace(key, ChunkTracker(kMaxTensorBytes)).first;
  auto placement = it->second.accept(persist.chunk);
  if (!placement) {
    received.state = Received::State::refused;
    received.error = placement.error();
    return;
  }
  if (it->second.complete()) placing_.erase(it);
  received.state = Received::State::placed;
  received.placement = *placement;
}

void Receiver::dispatch(WireBytes&& bytes, Handler& handler, bool holding) {
  if (holding) {
    auto peek = unwrap(WireBytes(bytes), options_.limits);
    if (peek && handler.hold(peek->body)) {
      handler.held(std::move(bytes));
      return;
    }
  }
  auto received = receive(std::move(bytes), [&handler](const DecodedEnvelope& envelope, const TensorChunk& chunk) {
    return handler.screen(envelope, chunk);
  });
  if (!received) {
    handler.refused(nullptr, received.error());
    return;
  }
  const DecodedEnvelope& envelope = received->envelope;
  switch (received->state) {
    case Received::State::not_yet:
    case Received::State::screened:
      return;
    case Received::State::refused:
      handler.refused(&envelope, received->error);
      return;
    case Received::State::placed:
      handler.placed(envelope, std::get<Persist>(envelope.body), received->placement);
      return;
    case Received::State::whole:
      break;
  }
  std::visit(
      [&](const auto& body) {
        using T = std::decay_t<decltype(body)>;
        if constexpr (std::is_same_v<T, FragmentUpdate> || std::is_same_v<T, GlobalFragment> ||
                      std::is_same_v<T, Persist>) {
          handler.on(envelope, body, std::move(received->tensor));
        } else {
          handler.on(envelope, body);
        }
      },
      envelope.body);
}

bool Handler::screen(const DecodedEnvelope&, const TensorChunk&) { return true; }
void Handler::refused(const DecodedEnvelope*, const Error&) {}
void Handler::placed(const DecodedEnvelope& envelope, const Persist&, const ChunkPlacement&) { ignored(envelope); }
bool Handler::hold(const Message&) { return false; }
void Handler::held(WireBytes&&) {}
void Handler::on(const DecodedEnvelope& e, const Join&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const Welcome&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const FragmentUpdate&, ReceivedTensor&&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const GlobalFragment&, ReceivedTensor&&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const Heartbeat&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const Persist&, ReceivedTensor&&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const Persisted&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const Leave&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const AdminRequest&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const AdminReply&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const Fetch&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const Restore&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const CommitEnd&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const AdminCommand&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const SlotReport&) { ignored(e); }
void Handler::on(const DecodedEnvelope& e, const LearnerControl&) { ignored(e); }
void Handler::ignored(const DecodedEnvelope&) {}

void Receiver::drop_persist(uint64_t ticket) {
  placing_.erase(placing_.lower_bound(std::make_tuple(ticket, uint32_t{0}, PersistKind::parameters)),
                 placing_.upper_bound(std::make_tuple(ticket, UINT32_MAX, PersistKind::outer_momentum)));
}

void Receiver::drop_persist() {
  placing_.clear();
  persist_inbox_.clear();
}

}  // namespace archipelago::messages

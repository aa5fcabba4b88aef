#include "remote/envelope_kind.hpp"

#include <memory>
#include <variant>

#include "messages/envelope.hpp"

namespace archipelago::remote {

const char* to_string(EnvelopeKind kind) {
  switch (kind) {
    case EnvelopeKind::join: return "join";
    case EnvelopeKind::fragment_update: return "update";
    case EnvelopeKind::fetch: return "fetch";
    case EnvelopeKind::heartbeat: return "heartbeat";
    case EnvelopeKind::slot_report: return "slotReport";
    case EnvelopeKind::leave: return "leave";
    case EnvelopeKind::other: break;
  }
  return "other";
}

Expected<EnvelopeHeader> envelope_header(const uint8_t* data, std::size_t size) {
  messages::DecodeLimits limits;
  limits.check_finite = false;
  std::shared_ptr<const void> borrowed(std::shared_ptr<const void>{}, data);
  auto decoded = messages::decode(messages::ByteView{data, size, borrowed}, limits);
  if (!decoded) return decoded.error();
  EnvelopeHeader header;
  header.name = messages::message_name(decoded->body);
  header.sender_id = decoded->sender_id;
  const auto& body = decoded->body;
  if (std::holds_alternative<messages::Join>(body)) header.kind = EnvelopeKind::join;
  else if (std::holds_alternative<messages::FragmentUpdate>(body)) header.kind = EnvelopeKind::fragment_update;
  else if (std::holds_alternative<messages::Fetch>(body)) header.kind = EnvelopeKind::fetch;
  else if (std::holds_alternative<messages::Heartbeat>(body)) header.kind = EnvelopeKind::heartbeat;
  else if (std::holds_alternative<messages::SlotReport>(body)) header.kind = EnvelopeKind::slot_report;
  else if (std::holds_alternative<messages::Leave>(body)) header.kind = EnvelopeKind::leave;
  return header;
}

}  // namespace archipelago::remote

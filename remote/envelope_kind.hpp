// Which session method an envelope belongs to: the one table that ties remote/plane.capnp's
// Session methods to the envelope kinds of messages/archipelago.capnp. The node side picks the
// method by the kind it sends; the coordinator side refuses an envelope whose kind is not its
// method's. (Which actor a kind may reach at all is actors/authorization.hpp.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace archipelago::remote {

enum class EnvelopeKind { join, fragment_update, fetch, heartbeat, slot_report, leave, other };
const char* to_string(EnvelopeKind kind);

struct EnvelopeHeader {
  EnvelopeKind kind = EnvelopeKind::other;
  std::string name;       // messages::message_name of the body
  std::string sender_id;
};

// Decodes the envelope in place (payloads are not scanned: the role actor checks them).
// Errors: the decoder's (truncated, oversized, corrupt, ...).
Expected<EnvelopeHeader> envelope_header(const uint8_t* data, std::size_t size);

}  // namespace archipelago::remote

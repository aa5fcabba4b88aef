// Conversion between the plain message structs and their generated Cap'n Proto classes.
//
// Private to messages/ (envelope.cpp is the only caller). write_body may throw kj::Exception
// (e.g. text too large for the wire); read_body may throw on malformed input. envelope.cpp catches
// both, so nothing here crosses the public API. read_body checks tags and enum values (unknown_type)
// but not field semantics, which envelope.cpp validates afterwards.
#pragma once

#include <memory>

#include "common/error.hpp"
#include <capnp/message.h>
#include <capnp/orphan.h>

#include "messages/archipelago.capnp.h"
#include "messages/message_types.hpp"

namespace archipelago::messages::detail {

// Writes `message` into `body`. A tensor payload that is 8-byte aligned is referenced, not copied
// (the builder must not outlive it); `external` is then set to the referenced view.
void write_body(capnp::MessageBuilder& builder, wire::Envelope::Body::Builder body,
                const Message& message, const ByteView** external);

// Reads the body; payload views share `owner`.
Expected<Message> read_body(wire::Envelope::Body::Reader body,
                            const std::shared_ptr<const void>& owner);

}  // namespace archipelago::messages::detail

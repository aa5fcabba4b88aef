#include "actors/wire.hpp"
#include "actors/directory.hpp"

#include <chrono>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

namespace archipelago::actors {

using namespace archipelago::messages;

caf::atom_value learner_name(int index) { return caf::atom_from_string("l" + std::to_string(index)); }

WireBytes admin_request(const std::string& sender, const std::string& command, std::vector<std::string> args) {
  Outbox outbox(sender);
  auto bytes = outbox.wrap(AdminRequest{0, command, std::move(args)});
  return bytes ? std::move(*bytes) : WireBytes{};
}

WireBytes admin_reply(const std::string& sender, uint64_t request_id, bool ok, const std::string& text,
                      const nlohmann::json& json) {
  Outbox outbox(sender);
  auto bytes = outbox.wrap(AdminReply{request_id, ok, text, json.dump()});
  return bytes ? std::move(*bytes) : WireBytes{};
}

Expected<AdminRequest> read_admin_request(WireBytes&& bytes) {
  auto envelope = unwrap(std::move(bytes));
  if (!envelope) return envelope.error();
  auto* request = std::get_if<AdminRequest>(&envelope->body);
  if (!request) return make_error(ErrorCode::unknown_type, std::string("expected admin_request, got ") +
                                                               message_name(envelope->body));
  return *request;
}

Expected<nlohmann::json> ask_admin(caf::actor_system& system, caf::atom_value name, const std::string& sender,
                                   const std::string& command, std::vector<std::string> args, double timeout_s) {
  auto target = Directory::get(system, name);
  if (!target) return make_error(ErrorCode::unavailable, "no actor registered as " + caf::to_string(name));
  caf::scoped_actor self{system};
  Expected<nlohmann::json> result = make_error(ErrorCode::unavailable, "no answer");
  self->request(target, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), admin_atom::value,
                admin_request(sender, command, std::move(args)))
      .receive([&](WireBytes& bytes) { result = read_admin_reply(std::move(bytes)); },
               [&](caf::error& error) {
                 result = make_error(ErrorCode::unavailable, caf::to_string(name) + ": " + system.render(error));
               });
  return result;
}

Expected<nlohmann::json> read_admin_reply(WireBytes&& bytes) {
  auto envelope = unwrap(std::move(bytes));
  if (!envelope) return envelope.error();
  auto* reply = std::get_if<AdminReply>(&envelope->body);
  if (!reply) return make_error(ErrorCode::unknown_type, "expected admin_reply");
  if (!reply->ok) return make_error(ErrorCode::unavailable, reply->text);
  auto parsed = nlohmann::json::parse(reply->json, nullptr, false);
  if (parsed.is_discarded()) return make_error(ErrorCode::corrupt, "admin reply is not JSON");
  return parsed;
}

}  // namespace archipelago::actors

namespace archipelago::actors {
double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace archipelago::actors

#include "apps/drill/console_client.hpp"

#include <optional>

#include "actors/wire.hpp"
#include "net/auth.hpp"
#include "remote/client.hpp"
#include "remote/edge.hpp"

namespace archipelago::apps::drill {

ConsoleClient::ConsoleClient(std::string host, std::string token_file)
    : host_(std::move(host)), token_file_(std::move(token_file)) {}

ConsoleClient::~ConsoleClient() = default;

void ConsoleClient::forget() { session_.reset(); }

Expected<nlohmann::json> ConsoleClient::call(int port, messages::AdminVerb verb, const std::string& target, double timeout_s,
                                             const std::string& value) {
  if (!session_) {
    if (auto s = open(port); !s) return s.error();
  }
  messages::AdminCommand command{++request_id_, verb, 0, 0};
  command.target = target;
  command.value = value;
  auto bytes = outbox_.wrap(command);
  if (!bytes) return bytes.error();
  auto answer = session_->request(*bytes, timeout_s);
  if (!answer) {
    forget();
    return answer.error();
  }
  return actors::read_admin_reply(std::move(*answer));
}

Status ConsoleClient::open(int port) {
  auto secret = net::load_token_file(token_file_);
  if (!secret) return secret.error();
  remote::Endpoint endpoint{host_, static_cast<uint16_t>(port), std::nullopt, !remote::is_loopback(host_), {}};
  auto session = remote::AdminClient::open(std::move(endpoint), *secret, 5);
  if (!session) return session.error();
  session_ = std::move(*session);
  return Status::success();
}

}  // namespace archipelago::apps::drill

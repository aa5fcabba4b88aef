// The admin console's client, in process: one admin session (remote::AdminClient, proved with the
// admin token of `token_file`) to a coordinator or syncer shard on `host`, opened on the first
// call and opened again after a call whose session failed (the coordinator restarted).
//
// It may do what `archipelago console` may do, and reads the answers as the console does
// (actors::read_admin_reply). Plaintext unless the host is loopback: the drill's network namespaces
// are not loopback, and the drill tests recovery, not the edge. Used from the drill's one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "messages/framing.hpp"
#include "messages/message_types.hpp"

namespace archipelago::remote {
class AdminClient;
}

namespace archipelago::apps::drill {

class ConsoleClient {
 public:
  ConsoleClient(std::string host, std::string token_file);
  ~ConsoleClient();
  ConsoleClient(const ConsoleClient&) = delete;
  ConsoleClient& operator=(const ConsoleClient&) = delete;

  // Closes the session; the next call opens a new one.
  void forget();
  // `verb` (with `target` and `value` where it takes them) to the process listening on `port`: its
  // JSON answer, or why not.
  Expected<nlohmann::json> call(int port, messages::AdminVerb verb, const std::string& target = {}, double timeout_s = 5,
                                const std::string& value = {});

 private:
  Status open(int port);

  std::string host_;
  std::string token_file_;
  std::unique_ptr<remote::AdminClient> session_;
  messages::Outbox outbox_{"drill"};
  uint64_t request_id_ = 0;
};

}  // namespace archipelago::apps::drill

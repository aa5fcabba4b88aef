#include "apps/console_command.hpp"

#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <caf/openssl/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "apps/config.hpp"
#include "apps/coordinator_command.hpp"
#include "messages/envelope.hpp"
#include "net/auth.hpp"

namespace archipelago::apps {
namespace {

using messages::AdminVerb;

struct CommandHelp {
  AdminVerb verb;
  const char* help;
};

const std::map<std::string, CommandHelp>& commands() {
  static const std::map<std::string, CommandHelp> table = {
      {"status", {AdminVerb::status, "run directory, mode, committed version, held-out loss, bytes up/down, uptime"}},
      {"learners", {AdminVerb::learners, "every learner: id, node, site, state, step, tokens/s, deaths, joins"}},
      {"nodes", {AdminVerb::nodes, "the admitted nodes, learner slots, joins and refused messages"}},
      {"versions", {AdminVerb::versions, "the committed versions in the store, with digests"}},
  };
  return table;
}

std::string help_text() {
  std::ostringstream out;
  for (const auto& [name, c] : commands()) out << "  " << name << std::string(10 - name.size(), ' ') << c.help << "\n";
  out << "  help      this list\n  quit      end the session\n";
  return out.str();
}

}  // namespace

int run_console(const ConsoleArguments& arguments) {
  auto fail = [&](int code, const std::string& message) {
    if (arguments.json) {
      std::printf("%s\n", nlohmann::json{{"ok", false}, {"error", message}}.dump().c_str());
    }
    std::fprintf(stderr, "archipelago console: %s\n", message.c_str());
    return code;
  };
  auto file = read_config_file(arguments.config_file);
  if (!file) return fail(2, file.error().reason);
  auto local = load_config(file->text, file->origin, {});
  if (!local) return fail(2, "invalid configuration: " + local.error().reason);
  auto target = actors::parse_host_port(arguments.target);
  if (!target) return fail(2, arguments.target + ": " + target.error().reason);
  auto token = net::load_admin_token(arguments.admin_token_file, true);
  if (!token) return fail(2, token.error().reason);
  const auto transport = transport_options(local->net);

  caf::actor_system_config config;
  Status configured = actors::configure_transport(config, transport);
  if (!configured) return fail(2, configured.error().reason);
  config.set("logger.console-verbosity", caf::atom("quiet"));
  config.set("logger.file-verbosity", caf::atom("quiet"));
  caf::actor_system system{config};
  auto gateway = transport.tls ? caf::openssl::remote_actor(system, target->host, target->port)
                               : system.middleman().remote_actor(target->host, target->port);
  if (!gateway) return fail(1, "cannot reach the coordinator at " + arguments.target + ": " + system.render(gateway.error()));

  caf::scoped_actor self{system};
  std::string key, refusal;
  caf::actor admin;
  self->request(*gateway, std::chrono::seconds(10), actors::adminjoin_atom::value, std::string((*token)->bytes()))
      .receive(
          [&](bool accepted, std::string& reason, std::string& session_key, caf::actor& handle) {
            if (!accepted) refusal = reason.empty() ? "refused" : reason;
            key = std::move(session_key);
            admin = std::move(handle);
          },
          [&](caf::error& error) { refusal = "admin session request failed: " + system.render(error); });
  if (!refusal.empty() || !admin) {
    return fail(3, "the coordinator refused the admin session: " + (refusal.empty() ? "no admin actor" : refusal));
  }

  actors::Outbox outbox("console");
  uint64_t request_id = 0;
  // Runs one command line; prints its answer. Returns the exit code for -c.
  auto run_one = [&](const std::string& line) -> int {
    std::istringstream words(line);
    std::string name;
    words >> name;
    if (name.empty()) return 0;
    if (name == "help") {
      std::printf("%s", help_text().c_str());
      return 0;
    }
    auto it = commands().find(name);
    if (it == commands().end()) return fail(2, "unknown command '" + name + "' (help lists them)");
    auto bytes = outbox.wrap(messages::AdminCommand{++request_id, it->second.verb});
    if (!bytes) return fail(1, bytes.error().to_string());
    int code = 1;
    self->request(admin, std::chrono::seconds(30), actors::admin_atom::value, key, std::move(*bytes))
        .receive(
            [&](actors::WireBytes& answer) {
              auto envelope = actors::unwrap(std::move(answer));
              const auto* reply = envelope ? std::get_if<messages::AdminReply>(&envelope->body) : nullptr;
              if (!reply) {
                code = fail(1, "malformed answer from the coordinator");
                return;
              }
              if (!reply->ok) {
                code = fail(1, name + ": " + reply->text);
                return;
              }
              auto json = nlohmann::json::parse(reply->json, nullptr, false);
              if (json.is_discarded()) {
                code = fail(1, name + ": the answer is not JSON");
                return;
              }
              std::printf("%s\n", arguments.json ? json.dump().c_str() : json.dump(2).c_str());
              code = 0;
            },
            [&](caf::error& error) { code = fail(1, name + ": " + system.render(error)); });
    std::fflush(stdout);
    return code;
  };

  if (arguments.command) return run_one(*arguments.command);
  std::printf("connected to %s; type help for the commands\n", arguments.target.c_str());
  std::string line;
  while (true) {
    std::printf("archipelago> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "quit" || line == "exit") break;
    run_one(line);
  }
  std::printf("\n");
  return 0;
}

}  // namespace archipelago::apps

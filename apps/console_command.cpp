#include "apps/console_command.hpp"
#include "apps/console_format.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include <editline/readline.h>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "remote/admin.hpp"
#include "remote/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "apps/config.hpp"
#include "apps/coordinator_command.hpp"
#include "diloco/tunables.hpp"
#include "messages/envelope.hpp"
#include "net/auth.hpp"
#include "remote/client.hpp"

namespace archipelago::apps {
namespace {

using messages::AdminVerb;

struct CommandHelp {
  AdminVerb verb;
  const char* usage;
  std::string help;
};

const std::map<std::string, CommandHelp>& commands() {
  static const std::map<std::string, CommandHelp> table = {
      {"status", {AdminVerb::status, "status", "run, mode, committed version, held-out loss, goodput, bytes, uptime"}},
      {"learners", {AdminVerb::learners, "learners", "every learner: id, node, site, state, step, tokens/s, restarts"}},
      {"nodes", {AdminVerb::nodes, "nodes", "the admitted nodes, learner slots, joins and refused messages"}},
      {"versions", {AdminVerb::versions, "versions", "the committed versions in the store: digests, pinned"}},
      {"pin", {AdminVerb::pin, "pin V", "keep version V through retention (audited)"}},
      {"unpin", {AdminVerb::unpin, "unpin V", "let retention drop version V again (audited)"}},
      {"audit", {AdminVerb::audit, "audit [N]", "the newest N (20) entries of the audit log, oldest first"}},
      {"kill", {AdminVerb::kill_syncer, "kill learner ID | node NAME | syncer",
                "as abrupt as a crash: its supervisor restarts a learner or the syncer; a node's process is "
                "SIGKILLed (audited)"}},
      {"restart", {AdminVerb::restart_learner, "restart learner ID", "save its unsent work, start it again (audited)"}},
      {"pause", {AdminVerb::pause, "pause [ID]", "a learner (or all) takes no inner steps until resumed (audited)"}},
      {"resume", {AdminVerb::resume, "resume [ID]", "resume a paused learner (or all) (audited)"}},
      {"checkpoint", {AdminVerb::checkpoint, "checkpoint", "commit what is pending now, without quorum (audited)"}},
      {"events", {AdminVerb::events, "events [N]", "the newest N (20) deaths, restarts, rejections, commands"}},
      {"version", {AdminVerb::version_show, "version show V", "one committed version: blobs, manifest, verified"}},
      {"set", {AdminVerb::set, "set KEY VALUE", diloco::tunable_names() + "; validated, old -> new (audited)"}},
      {"drain", {AdminVerb::drain, "drain", "stop cleanly: in-flight work finishes and is committed (audited)"}},
      {"throttle", {AdminVerb::throttle, "throttle ID FACTOR",
                    "each inner step of learner ID takes FACTOR (1..100) x its compute time; 1 = full speed "
                    "(audited)"}},
      {"corrupt", {AdminVerb::corrupt_update, "corrupt ID",
                   "drills only: learner ID's next update leaves with a flipped bit (nodes with --drill-hooks; "
                   "audited)"}},
  };
  return table;
}

std::string help_text() {
  std::ostringstream out;
  for (const auto& [name, c] : commands()) {
    const std::string usage = c.usage;
    out << "  " << usage << std::string(usage.size() < 24 ? 24 - usage.size() : 1, ' ') << c.help << "\n";
  }
  out << "  help                    this list\n  quit                    end the session\n";
  return out.str();
}

// A command line -> the typed command, or why not.
Expected<messages::AdminCommand> parse_command(const std::string& line, uint64_t request_id) {
  std::istringstream words(line);
  std::string name, argument, extra, more;
  words >> name >> argument >> extra >> more;
  auto it = commands().find(name);
  if (it == commands().end()) return make_error(ErrorCode::invalid_argument, "unknown command '" + name + "' (help lists them)");
  messages::AdminCommand command{request_id, it->second.verb, 0, 0};
  auto usage = [&] { return make_error(ErrorCode::invalid_argument, std::string("usage: ") + it->second.usage); };
  if (command.verb == AdminVerb::set) {
    if (argument.empty() || extra.empty() || !more.empty()) return usage();
    command.key = argument;
    command.value = extra;
    return command;
  }
  if (command.verb == AdminVerb::throttle) {
    if (argument.empty() || extra.empty() || !more.empty()) return usage();
    command.target = argument;
    command.value = extra;
    return command;
  }
  auto number = [&](uint64_t& out) {
    if (argument.empty() || argument.find_first_not_of("0123456789") != std::string::npos || argument.size() > 18) return false;
    out = std::stoull(argument);
    return true;
  };
  // Two-word commands: kill learner ID | kill node NAME | restart learner ID | version show V.
  if (name == "kill" && (argument == "learner" || argument == "node")) {
    if (extra.empty() || !more.empty()) return usage();
    command.verb = argument == "learner" ? AdminVerb::kill_learner : AdminVerb::kill_node;
    command.target = extra;
    return command;
  }
  if (name == "restart") {
    if (argument != "learner" || extra.empty() || !more.empty()) return usage();
    command.target = extra;
    return command;
  }
  if (name == "version") {
    if (argument != "show" || !more.empty()) return usage();
    argument = extra;
    if (!number(command.version)) return usage();
    return command;
  }
  if (!extra.empty()) return usage();
  switch (command.verb) {
    case AdminVerb::pin:
    case AdminVerb::unpin:
      if (!number(command.version)) return usage();
      break;
    case AdminVerb::pause:
    case AdminVerb::resume:
      command.target = argument;  // "" or "all": every learner
      break;
    case AdminVerb::audit:
    case AdminVerb::events: {
      uint64_t count = 20;
      if (!argument.empty() && (!number(count) || count == 0 || count > 10000)) return usage();
      command.count = static_cast<uint32_t>(count);
      break;
    }
    case AdminVerb::kill_syncer:
      if (argument != "syncer") return usage();
      break;
    case AdminVerb::corrupt_update:
      if (argument.empty()) return usage();
      command.target = argument;
      break;
    default:
      if (!argument.empty()) return usage();
  }
  return command;
}

// Tab completion of command names (libedit's readline interface).
char* complete_command(const char* text, int state) {
  static std::vector<std::string> matches;
  static size_t next = 0;
  if (state == 0) {
    matches.clear();
    next = 0;
    const std::string prefix = text;
    for (const auto& [name, _] : commands()) {
      if (name.rfind(prefix, 0) == 0) matches.push_back(name);
    }
    for (const char* extra : {"help", "quit"}) {
      if (std::string(extra).rfind(prefix, 0) == 0) matches.push_back(extra);
    }
  }
  return next < matches.size() ? strdup(matches[next++].c_str()) : nullptr;
}

char** complete(const char* text, int start, int) {
  rl_attempted_completion_over = 1;
  return start == 0 ? rl_completion_matches(text, complete_command) : nullptr;
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
  // A sharded run: every syncer shard's address, shard 0's first (as a node names them).
  std::vector<remote::HostPort> targets;
  std::stringstream addresses(arguments.target);
  for (std::string address; std::getline(addresses, address, ',');) {
    auto target = remote::parse_host_port(address);
    if (!target) return fail(2, address + ": " + target.error().reason);
    targets.push_back(*target);
  }
  if (targets.empty()) return fail(2, "no coordinator address");
  if (arguments.command && arguments.command->rfind("help", 0) != 0) {
    auto checked = parse_command(*arguments.command, 0);  // a typo fails here, before any session
    if (!checked) return fail(2, checked.error().reason);
  }
  auto token = net::load_admin_token(arguments.admin_token_file, true);
  if (!token) return fail(2, token.error().reason);
  const auto transport = transport_options(local->net);

  if (auto status = remote::validate_transport(transport); !status) return fail(2, status.error().reason);
  std::vector<std::unique_ptr<remote::AdminClient>> sessions;
  for (const auto& target : targets) {
    remote::Endpoint endpoint{target.host, target.port, remote::tls_files(transport), arguments.insecure_plaintext,
                              remote::edge_limits(transport)};
    auto session = remote::AdminClient::open(std::move(endpoint), **token, 10);
    if (!session) {
      const std::string where = target.host + ":" + std::to_string(target.port) + ": ";
      if (session.error().code == ErrorCode::conflict) {
        return fail(3, where + "the coordinator refused the admin session: " + session.error().reason);
      }
      return fail(session.error().code == ErrorCode::invalid_argument ? 2 : 1, where + session.error().reason);
    }
    sessions.push_back(std::move(*session));
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
    auto command = parse_command(line, ++request_id);
    if (!command) return fail(2, command.error().reason);
    auto bytes = outbox.wrap(*command);
    if (!bytes) return fail(1, bytes.error().to_string());
    // A learner's or a node's control goes through shard 0 only (the node obeys it once); everything
    // else is asked of every shard, each answering for its own fragments, versions and store.
    const size_t asked = remote::control_action_of(command->verb) ? 1 : sessions.size();
    nlohmann::json answers = nlohmann::json::array();
    for (size_t k = 0; k < asked; ++k) {
      const std::string where = sessions.size() > 1 ? "shard " + std::to_string(k) + ": " : "";
      auto answered = sessions[k]->request(*bytes, 30);
      if (!answered) return fail(1, where + name + ": " + answered.error().reason);
      auto answer = actors::read_admin_reply(std::move(*answered));
      if (!answer) return fail(1, where + name + ": " + answer.error().reason);
      answers.push_back(std::move(*answer));
    }
    nlohmann::json shown = answers.front();
    if (sessions.size() > 1) {
      shown = {{"shards", nlohmann::json::array()}};
      for (size_t k = 0; k < answers.size(); ++k) {
        shown["shards"].push_back({{"shard", k}, {"target", targets[k].host + ":" + std::to_string(targets[k].port)},
                                   {"answer", answers[k]}});
      }
    }
    if (arguments.json) {
      std::printf("%s\n", shown.dump().c_str());
    } else {
      std::printf("%s", format_answer(shown).c_str());
    }
    std::fflush(stdout);
    return 0;
  };

  if (arguments.command) return run_one(*arguments.command);
  // The prompt: libedit's line editing, history (kept in ~/.archipelago_history) and tab completion.
  std::printf("connected to %s%s; help lists the commands, tab completes them\n", arguments.target.c_str(),
              sessions.size() > 1 ? " (every syncer shard; a learner's or node's control goes through shard 0)" : "");
  const char* home = std::getenv("HOME");
  const std::string history = home ? std::string(home) + "/.archipelago_history" : "";
  rl_readline_name = const_cast<char*>("archipelago");
  rl_attempted_completion_function = complete;
  using_history();
  if (!history.empty()) read_history(history.c_str());
  while (char* raw = readline("archipelago> ")) {
    std::string line = raw;
    std::free(raw);
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    add_history(line.c_str());
    if (line == "quit" || line == "exit") break;
    run_one(line);
  }
  if (!history.empty()) write_history(history.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace archipelago::apps

// `archipelago console HOST:PORT`: an operator's session with a running coordinator's admin actor
// (remote/admin.hpp), authenticated with the admin token. `-c CMD` runs one command; without it, a
// prompt reads commands from standard input until `quit` or end of input.
#pragma once

#include <optional>
#include <string>

namespace archipelago::apps {

struct ConsoleArguments {
  std::string target;                          // HOST:PORT (a sharded run: every shard's, comma-separated)
  std::optional<std::string> command;          // -c
  bool json = false;
  std::optional<std::string> admin_token_file;
  std::optional<std::string> config_file;      // [net]: TLS files, timeouts
  bool insecure_plaintext = false;             // allow plaintext to a non-loopback coordinator
};

// A sharded run's console asks every shard and shows each one's answer ({"shards": [...]}); a
// learner's or node's control goes through shard 0 only.
// 0: answered; 1: the coordinator is unreachable or a command failed; 2: bad arguments or an unknown
// command; 3: the coordinator refused the admin session (wrong or missing admin token).
int run_console(const ConsoleArguments& arguments);

}  // namespace archipelago::apps

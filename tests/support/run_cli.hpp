// Runs the archipelago binary as a user would, for CLI tests: a real process bounded by
// `timeout`, its exit code, and its stdout+stderr. ARCHIPELAGO_BINARY is set by the test's CMake.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

namespace archipelago::testing {

struct CliOutcome {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

// The same, with `environment` (NAME=value ...) set for the process alone.
inline CliOutcome run_cli_with_env(const std::string& environment, const std::string& arguments, int timeout_s) {
  // stderr joins stdout so that a failure shows why.
  std::string command = "env " + environment + " timeout " + std::to_string(timeout_s) + " " ARCHIPELAGO_BINARY " " +
                        arguments + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  CliOutcome outcome;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) outcome.out.append(buffer, n);
  int status = pclose(pipe);
  outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return outcome;
}

inline CliOutcome run_cli(const std::string& arguments, int timeout_s) { return run_cli_with_env("", arguments, timeout_s); }

// The JSON summary `--json` prints as the last line of stdout.
inline nlohmann::json last_line_json(const std::string& text) {
  auto end = text.find_last_not_of('\n');
  auto begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return nlohmann::json::parse(text.substr(begin, end - begin + 1));
}

}  // namespace archipelago::testing

// Token files (every refusal has its own case), constant-time comparison, join decisions.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/auth.hpp"

using namespace archipelago;
using namespace archipelago::net;

namespace {

const std::string kToken = "0123456789abcdef-shared-secret";

// A private temporary directory, removed with its files at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/net-auth-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }

  std::string write(const std::string& name, const std::string& contents, mode_t mode = 0600) const {
    const std::string file = path + "/" + name;
    std::ofstream(file, std::ios::binary) << contents;
    ::chmod(file.c_str(), mode);
    return file;
  }
};

}  // namespace

TEST_CASE("load_token picks --token-file over the environment, and says how to give one when neither is set") {
  TempDir dir;
  const std::string flag_file = dir.write("flag", kToken + "-flag\n");
  const std::string env_file = dir.write("env", kToken + "-env\n");

  auto from_flag = load_token(flag_file, env_file);
  REQUIRE(from_flag.ok());
  CHECK(from_flag->bytes() == kToken + "-flag");

  auto from_env = load_token(std::nullopt, env_file);
  REQUIRE(from_env.ok());
  CHECK(from_env->bytes() == kToken + "-env");

  auto neither = load_token(std::nullopt, std::nullopt);
  REQUIRE_FALSE(neither.ok());
  CHECK(neither.error().code == ErrorCode::invalid_argument);
  CHECK(neither.error().reason.find("--token-file") != std::string::npos);
  CHECK(neither.error().reason.find(kTokenFileEnv) != std::string::npos);

  auto empty_env = load_token(std::nullopt, std::string());
  REQUIRE_FALSE(empty_env.ok());
  CHECK(empty_env.error().reason.find("set but empty") != std::string::npos);

  ::setenv(kTokenFileEnv, env_file.c_str(), 1);
  auto process_env = load_token(std::nullopt);
  ::unsetenv(kTokenFileEnv);
  REQUIRE(process_env.ok());
  CHECK(process_env->bytes() == kToken + "-env");
}

TEST_CASE("trailing newlines are stripped, inner bytes kept") {
  TempDir dir;
  struct Case { const char* name; std::string contents; std::string expected; };
  const Case cases[] = {
      {"plain", kToken, kToken},
      {"lf", kToken + "\n", kToken},
      {"crlf", kToken + "\r\n", kToken},
      {"two-lf", kToken + "\n\n", kToken},
      {"inner", kToken + "\nmore", kToken + "\nmore"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto secret = load_token_file(dir.write(c.name, c.contents));
    REQUIRE(secret.ok());
    CHECK(secret->bytes() == c.expected);
  }
}

TEST_CASE("bad token files are refused with a reason that names the problem and never the secret") {
  TempDir dir;
  ::mkdir((dir.path + "/a-directory").c_str(), 0700);
  struct Case { const char* name; std::string path; ErrorCode code; const char* says; };
  const Case cases[] = {
      {"missing", dir.path + "/nope", ErrorCode::not_found, "No such file"},
      {"empty", dir.write("empty", ""), ErrorCode::invalid_argument, "is empty"},
      {"only newline", dir.write("newline", "\n"), ErrorCode::invalid_argument, "is empty"},
      {"too short", dir.write("short", "short-secret\n"), ErrorCode::invalid_argument, "at least 16"},
      {"world readable", dir.write("world", kToken, 0644), ErrorCode::invalid_argument, "chmod 600"},
      {"world writable", dir.write("world-w", kToken, 0602), ErrorCode::invalid_argument, "accessible by others"},
      {"directory", dir.path + "/a-directory", ErrorCode::invalid_argument, "not a regular file"},
      {"oversized", dir.write("big", std::string(kMaxTokenBytes + 1, 'x')), ErrorCode::oversized, "larger than"},
      {"empty path", "", ErrorCode::invalid_argument, "path is empty"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto secret = load_token_file(c.path);
    REQUIRE_FALSE(secret.ok());
    CHECK(secret.error().code == c.code);
    CHECK(secret.error().reason.find(c.says) != std::string::npos);
    CHECK(secret.error().reason.find("short-secret") == std::string::npos);
    CHECK(secret.error().reason.find(kToken) == std::string::npos);
  }
}

TEST_CASE("permission verdicts: others refused, group warned, owner-only fine") {
  CHECK(check_token_permissions(0600) == PermissionVerdict::ok);
  CHECK(check_token_permissions(0400) == PermissionVerdict::ok);
  CHECK(check_token_permissions(0640) == PermissionVerdict::warn_group_readable);
  CHECK(check_token_permissions(0620) == PermissionVerdict::warn_group_readable);
  CHECK(check_token_permissions(0604) == PermissionVerdict::refuse_world_readable);
  CHECK(check_token_permissions(0644) == PermissionVerdict::refuse_world_readable);

  TempDir dir;
  auto group_readable = load_token_file(dir.write("group", kToken, 0640));
  REQUIRE(group_readable.ok());
  CHECK(group_readable->bytes() == kToken);
}

TEST_CASE("tokens_equal is plain equality") {
  using namespace std::string_literals;
  struct Case { std::string a, b; bool equal; };
  const Case cases[] = {
      {kToken, kToken, true},
      {"", "", true},
      {"", "x", false},
      {"x", "", false},
      {"Xbcdef", "abcdef", false},  // first byte differs
      {"abcdeX", "abcdef", false},  // last byte differs
      {"abc", "abcd", false},       // prefix
      {"abc\0"s, "abc"s, false},    // a NUL is a byte like any other
      {"abc\0"s, "abc\0"s, true},
  };
  for (const auto& c : cases) {
    CAPTURE(c.a);
    CAPTURE(c.b);
    CHECK(tokens_equal(c.a, c.b) == c.equal);
    CHECK(tokens_equal(c.b, c.a) == c.equal);
  }
}

TEST_CASE("tokens_equal takes as long for a first-byte mismatch as for a last-byte one") {
  // An early-exit comparison (memcmp, ==) is ~10^5 times faster on a first-byte mismatch of 1 MiB;
  // a constant-time one takes the same time. The minimum of repeated runs filters scheduler noise.
  const std::string secret(1 << 20, 's');
  std::string first = secret, last = secret;
  first.front() = 'x';
  last.back() = 'x';
  auto fastest = [&](const std::string& presented) {
    auto best = std::chrono::steady_clock::duration::max();
    for (int run = 0; run < 15; ++run) {
      const auto start = std::chrono::steady_clock::now();
      const bool equal = tokens_equal(secret, presented);
      best = std::min(best, std::chrono::steady_clock::now() - start);
      REQUIRE_FALSE(equal);
    }
    return std::chrono::duration<double>(best).count();
  };
  const double first_s = fastest(first), last_s = fastest(last);
  MESSAGE("1 MiB compare: first-byte mismatch " << first_s * 1e6 << " us, last-byte " << last_s * 1e6 << " us");
  CHECK(first_s > last_s / 3);
  CHECK(first_s < last_s * 3);
}

TEST_CASE("verify_join: accepted, missing and wrong tokens, reasons free of token bytes") {
  TempDir dir;
  auto secret = load_token_file(dir.write("token", kToken));
  REQUIRE(secret.ok());

  auto ok = verify_join(*secret, kToken);
  CHECK(ok.accepted());
  CHECK(ok.outcome == JoinOutcome::accepted);

  auto missing = verify_join(*secret, "");
  CHECK_FALSE(missing.accepted());
  CHECK(missing.outcome == JoinOutcome::missing_token);

  const std::string guess = "0123456789abcdef-guessed-wrong";
  auto wrong = verify_join(*secret, guess);
  CHECK_FALSE(wrong.accepted());
  CHECK(wrong.outcome == JoinOutcome::wrong_token);
  CHECK(std::string(to_string(wrong.outcome)) == "wrong_token");
  for (const auto* decision : {&ok, &missing, &wrong}) {
    CHECK(decision->reason.find("0123456789") == std::string::npos);
    CHECK_FALSE(decision->reason.empty());
  }
  auto prefix = verify_join(*secret, kToken.substr(0, 20));
  CHECK(prefix.outcome == JoinOutcome::wrong_token);
}

// Join authentication: a shared secret read from a file, compared in constant time.
//
// Every process of a multi-site run (coordinator and nodes) reads the same secret from a file named by
// `--token-file FILE` or, failing that, by the environment variable ARCHIPELAGO_TOKEN_FILE. The secret
// itself never appears on a command line, in a log line or in an error reason. A join is accepted only
// when the presented token equals the secret byte for byte; the comparison takes the same time
// wherever the first differing byte is.
//
// Invariant: a `Secret` always holds at least kMinTokenBytes bytes (it is built only by load_token),
// and its bytes are overwritten when it is destroyed.
// Thread-safety: every function here is pure or reads only the file system; call from any thread. A
// `Secret` is immutable after loading and may be shared read-only between threads.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>

#include "common/error.hpp"

namespace archipelago::net {

inline constexpr const char* kTokenFileEnv = "ARCHIPELAGO_TOKEN_FILE";
inline constexpr const char* kAdminTokenFileEnv = "ARCHIPELAGO_ADMIN_TOKEN_FILE";
inline constexpr const char* kMetricsTokenFileEnv = "ARCHIPELAGO_METRICS_TOKEN_FILE";
inline constexpr std::size_t kMinTokenBytes = 16;    // shorter secrets are guessable
inline constexpr std::size_t kMaxTokenBytes = 4096;  // a token file is not a data file

// The shared join secret. Deliberately not printable: there is no operator<< and no to_string.
class Secret {
 public:
  Secret(const Secret&) = default;
  Secret(Secret&&) = default;
  Secret& operator=(const Secret&) = default;
  Secret& operator=(Secret&&) = default;
  ~Secret();

  std::string_view bytes() const { return bytes_; }
  std::size_t size() const { return bytes_.size(); }

 private:
  friend Expected<Secret> load_token_file(const std::string& path);
  explicit Secret(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;
};

// Whether a token file's permission bits are acceptable. Readable by others (world) is refused;
// readable by the group is accepted with a warning (a shared service group is a common setup).
enum class PermissionVerdict { ok, warn_group_readable, refuse_world_readable };
PermissionVerdict check_token_permissions(mode_t mode);

// Reads the secret from `path`: the file must exist, be a regular file, not be world-readable, and
// hold kMinTokenBytes..kMaxTokenBytes bytes after trailing '\n' / '\r' are stripped. A group-readable
// file is accepted and logged once as a warning (component "auth").
Expected<Secret> load_token_file(const std::string& path);

// Chooses the token file: `flag_path` (from --token-file) wins, else `env_path` (the value of
// ARCHIPELAGO_TOKEN_FILE); with neither, an invalid_argument error says how to give one.
Expected<Secret> load_token(const std::optional<std::string>& flag_path,
                            const std::optional<std::string>& env_path);
// Same, with `env_path` read from the process environment.
Expected<Secret> load_token(const std::optional<std::string>& flag_path);

// The admin console's secret: --admin-token-file FILE, else $ARCHIPELAGO_ADMIN_TOKEN_FILE, read and
// checked like the join token. `required` false: neither given is no secret (std::nullopt), not an error.
Expected<std::optional<Secret>> load_admin_token(const std::optional<std::string>& flag_path, bool required);
// The metrics endpoint's read-only credential: --metrics-token-file FILE, else
// $ARCHIPELAGO_METRICS_TOKEN_FILE, read and checked like the join token; the same rules for `required`.
Expected<std::optional<Secret>> load_metrics_token(const std::optional<std::string>& flag_path, bool required);

// True when a == b. Runs over max(a.size(), b.size()) bytes without an early exit, so the time does
// not depend on where the strings differ (it does depend on the longer length, which is not secret).
bool tokens_equal(std::string_view a, std::string_view b);

// The outcome of one join attempt; `outcome` is what a counter should be keyed by.
enum class JoinOutcome { accepted, missing_token, wrong_token };
const char* to_string(JoinOutcome outcome);

struct JoinDecision {
  JoinOutcome outcome;
  std::string reason;  // for the log line; never contains any byte of either token
  bool accepted() const { return outcome == JoinOutcome::accepted; }
};

JoinDecision verify_join(const Secret& secret, std::string_view presented);

}  // namespace archipelago::net

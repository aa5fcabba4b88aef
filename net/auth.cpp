// Token loading and constant-time comparison. See auth.hpp for the contract.
#include "net/auth.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.hpp"

namespace archipelago::net {

Secret::~Secret() {
  // Best effort: copies made by the allocator on growth are out of reach, but the final buffer is not.
  volatile char* p = bytes_.data();
  for (std::size_t i = 0; i < bytes_.size(); ++i) p[i] = 0;
}

PermissionVerdict check_token_permissions(mode_t mode) {
  if (mode & (S_IROTH | S_IWOTH)) return PermissionVerdict::refuse_world_readable;
  if (mode & (S_IRGRP | S_IWGRP)) return PermissionVerdict::warn_group_readable;
  return PermissionVerdict::ok;
}

namespace {

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mode & 07777));
  return text;
}

// Reads at most `limit` + 1 bytes so an oversized file is detected without reading all of it.
Expected<std::string> read_bounded(int fd, const std::string& path, std::size_t limit) {
  std::string bytes(limit + 1, '\0');
  std::size_t filled = 0;
  while (filled < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + filled, bytes.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(ErrorCode::io, "cannot read token file " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    filled += std::size_t(n);
  }
  bytes.resize(filled);
  return bytes;
}

}  // namespace

Expected<Secret> load_token_file(const std::string& path) {
  if (path.empty()) return make_error(ErrorCode::invalid_argument, "token file path is empty");
  // open + fstat on the same descriptor: the checks apply to the file actually read.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    return make_error(err == ENOENT ? ErrorCode::not_found : ErrorCode::io,
                      "cannot open token file " + path + ": " + std::strerror(err));
  }
  struct FdCloser { int fd; ~FdCloser() { ::close(fd); } } closer{fd};

  struct stat info {};
  if (::fstat(fd, &info) != 0)
    return make_error(ErrorCode::io, "cannot stat token file " + path + ": " + std::strerror(errno));
  if (!S_ISREG(info.st_mode))
    return make_error(ErrorCode::invalid_argument, "token file " + path + " is not a regular file");
  switch (check_token_permissions(info.st_mode)) {
    case PermissionVerdict::refuse_world_readable:
      return make_error(ErrorCode::invalid_argument,
                        "token file " + path + " is accessible by others (mode " + octal_mode(info.st_mode) +
                            "); refusing it: run `chmod 600 " + path + "`");
    case PermissionVerdict::warn_group_readable:
      component_logger("auth")->warn("token file {} is accessible by its group (mode {}); chmod 600 is safer",
                                     path, octal_mode(info.st_mode));
      break;
    case PermissionVerdict::ok: break;
  }

  auto bytes = read_bounded(fd, path, kMaxTokenBytes);
  if (!bytes) return bytes.error();
  std::string& token = *bytes;
  if (token.size() > kMaxTokenBytes)
    return make_error(ErrorCode::oversized, "token file " + path + " is larger than " +
                                                std::to_string(kMaxTokenBytes) + " bytes");
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r')) token.pop_back();
  if (token.empty()) return make_error(ErrorCode::invalid_argument, "token file " + path + " is empty");
  if (token.size() < kMinTokenBytes)
    return make_error(ErrorCode::invalid_argument,
                      "token in " + path + " is " + std::to_string(token.size()) + " bytes; at least " +
                          std::to_string(kMinTokenBytes) + " are required (e.g. `head -c 32 /dev/urandom | base64`)");
  return Secret(std::move(token));
}

Expected<Secret> load_token(const std::optional<std::string>& flag_path,
                            const std::optional<std::string>& env_path) {
  if (flag_path) return load_token_file(*flag_path);
  if (env_path) {
    if (env_path->empty())
      return make_error(ErrorCode::invalid_argument, std::string(kTokenFileEnv) + " is set but empty");
    return load_token_file(*env_path);
  }
  return make_error(ErrorCode::invalid_argument, std::string("no join token: pass --token-file FILE or set ") +
                                                     kTokenFileEnv + " to a file holding the shared secret");
}

Expected<Secret> load_token(const std::optional<std::string>& flag_path) {
  const char* env = std::getenv(kTokenFileEnv);
  return load_token(flag_path, env ? std::optional<std::string>(env) : std::nullopt);
}

namespace {

Expected<std::optional<Secret>> load_optional_token(const std::optional<std::string>& flag_path, const char* env_name,
                                                    const char* what, const char* flag, bool required) {
  std::optional<std::string> path = flag_path;
  if (!path) {
    if (const char* env = std::getenv(env_name)) {
      if (!*env) return make_error(ErrorCode::invalid_argument, std::string(env_name) + " is set but empty");
      path = env;
    }
  }
  if (!path) {
    if (!required) return std::optional<Secret>{};
    return make_error(ErrorCode::invalid_argument,
                      std::string("no ") + what + ": pass " + flag + " FILE or set " + env_name);
  }
  auto secret = load_token_file(*path);
  if (!secret) return secret.error();
  return std::optional<Secret>(std::move(*secret));
}

}  // namespace

Expected<std::optional<Secret>> load_admin_token(const std::optional<std::string>& flag_path, bool required) {
  return load_optional_token(flag_path, kAdminTokenFileEnv, "admin token", "--admin-token-file", required);
}

Expected<std::optional<Secret>> load_metrics_token(const std::optional<std::string>& flag_path, bool required) {
  return load_optional_token(flag_path, kMetricsTokenFileEnv, "metrics token", "--metrics-token-file", required);
}

bool tokens_equal(std::string_view a, std::string_view b) {
  const std::size_t length = a.size() > b.size() ? a.size() : b.size();
  // A length mismatch makes the result false without a branch on the content.
  std::size_t difference = a.size() ^ b.size();
  for (std::size_t i = 0; i < length; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    difference |= static_cast<std::size_t>(x ^ y);
  }
  // Through a volatile so the compiler cannot turn the loop back into an early-exit memcmp.
  volatile std::size_t result = difference;
  return result == 0;
}

const char* to_string(JoinOutcome outcome) {
  switch (outcome) {
    case JoinOutcome::accepted: return "accepted";
    case JoinOutcome::missing_token: return "missing_token";
    case JoinOutcome::wrong_token: return "wrong_token";
  }
  return "unknown";
}

JoinDecision verify_join(const Secret& secret, std::string_view presented) {
  if (presented.empty()) return {JoinOutcome::missing_token, "join presented no token"};
  if (!tokens_equal(secret.bytes(), presented))
    return {JoinOutcome::wrong_token,
            "join presented a token (" + std::to_string(presented.size()) + " bytes) that does not match"};
  return {JoinOutcome::accepted, "token matches"};
}

}  // namespace archipelago::net

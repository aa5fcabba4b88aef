// Errors as values at every module boundary.
//
// `Expected<T>` holds either a value or an `Error` (a code callers can branch on plus a reason a
// human can read). `Status` is `Expected` without a value. No exception crosses a module boundary:
// functions that can fail on bad input return one of these, and callers pass the error up.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace archipelago {

// What went wrong, coarse enough to branch on; the reason string carries the detail.
enum class ErrorCode {
  invalid_argument,  // a bad config value, option or parameter
  not_found,         // a key, version, file or peer that does not exist
  truncated,         // input ended before the structure it announces
  oversized,         // input larger than an explicit limit
  wrong_version,     // a protocol or schema version this build does not speak
  unknown_type,      // a union tag or enum value this build does not know
  inconsistent,      // fields that contradict each other (length vs count, index vs total)
  non_finite,        // NaN or Inf where numbers must be finite
  corrupt,           // checksum mismatch or undecodable stored bytes
  conflict,          // e.g. a version not newer than the latest committed one
  io,                // the operating system or a library refused an operation
  unavailable,       // a dependency that is missing or not running
};

const char* to_string(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string reason;

  std::string to_string() const { return std::string(archipelago::to_string(code)) + ": " + reason; }
};

inline Error make_error(ErrorCode code, std::string reason) { return Error{code, std::move(reason)}; }

template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : state_(std::move(value)) {}
  Expected(Error error) : state_(std::move(error)) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(state_); }
  const T& value() const& { assert(ok()); return std::get<0>(state_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(state_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { assert(!ok()); return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error error) : error_(std::move(error)), ok_(false) {}
  static Status success() { return Status(); }

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { assert(!ok_); return error_; }

 private:
  Error error_{ErrorCode::invalid_argument, ""};
  bool ok_ = true;
};

inline const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::truncated: return "truncated";
    case ErrorCode::oversized: return "oversized";
    case ErrorCode::wrong_version: return "wrong_version";
    case ErrorCode::unknown_type: return "unknown_type";
    case ErrorCode::inconsistent: return "inconsistent";
    case ErrorCode::non_finite: return "non_finite";
    case ErrorCode::corrupt: return "corrupt";
    case ErrorCode::conflict: return "conflict";
    case ErrorCode::io: return "io";
    case ErrorCode::unavailable: return "unavailable";
  }
  return "unknown";
}

}  // namespace archipelago

// Reconnect backoff: capped exponential growth with jitter, deterministic for a given seed.
//
// The n-th delay after a reset has a base of initial·multiplier^n, capped at `max`; the delay is drawn
// uniformly from [base·(1 - jitter_fraction), base]. Jitter only shortens, so the cap holds and
// nodes that have all reached it still spread out instead of retrying together at exactly `max`.
// Jitter keeps many nodes that lost the same coordinator from reconnecting in lockstep; the seed
// (e.g. derived from the node id) makes a run reproducible.
//
// Invariant: every delay lies in [initial·(1 - jitter_fraction), max].
// Thread-safety: a plain value; one owner (a reconnecting client's state) calls it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace archipelago::net {

struct BackoffOptions {
  std::chrono::nanoseconds initial = std::chrono::milliseconds(100);
  std::chrono::nanoseconds max = std::chrono::seconds(10);
  double multiplier = 2.0;       // >= 1
  double jitter_fraction = 0.2;  // in [0, 1)
  std::uint64_t seed = 1;
};

// The error names the offending field.
inline Status validate(const BackoffOptions& options) {
  if (options.initial.count() <= 0) return make_error(ErrorCode::invalid_argument, "backoff.initial must be > 0");
  if (options.max < options.initial)
    return make_error(ErrorCode::invalid_argument, "backoff.max must be >= backoff.initial");
  if (!(options.multiplier >= 1.0) || !std::isfinite(options.multiplier))
    return make_error(ErrorCode::invalid_argument, "backoff.multiplier must be finite and >= 1");
  if (!(options.jitter_fraction >= 0.0 && options.jitter_fraction < 1.0))
    return make_error(ErrorCode::invalid_argument, "backoff.jitter_fraction must be in [0, 1)");
  return Status::success();
}

class Backoff {
 public:
  // Expects options that pass validate(); out-of-range values are clamped rather than trusted.
  explicit Backoff(BackoffOptions options) : options_(sanitize(options)), rng_state_(options.seed) { reset(); }

  // The delay to wait before the next attempt; grows with each call until reset().
  std::chrono::nanoseconds next_delay() {
    const double max_ns = double(options_.max.count());
    const double jittered = base_ns_ * (1.0 - options_.jitter_fraction * next_unit());
    base_ns_ = std::min(base_ns_ * options_.multiplier, max_ns);
    ++attempts_;
    return std::chrono::nanoseconds(std::llround(jittered));
  }

  // After a successful connection: the next delay starts from `initial` again. The random stream
  // continues, so peers that reset together still do not retry together.
  void reset() {
    base_ns_ = double(options_.initial.count());
    attempts_ = 0;
  }

  int attempts() const { return attempts_; }  // next_delay() calls since the last reset
  const BackoffOptions& options() const { return options_; }

 private:
  static BackoffOptions sanitize(BackoffOptions options) {
    if (options.initial.count() <= 0) options.initial = std::chrono::nanoseconds(1);
    if (options.max < options.initial) options.max = options.initial;
    if (!(options.multiplier >= 1.0) || !std::isfinite(options.multiplier)) options.multiplier = 1.0;
    if (!(options.jitter_fraction >= 0.0)) options.jitter_fraction = 0.0;
    if (options.jitter_fraction >= 1.0) options.jitter_fraction = 0.999;
    return options;
  }

  // splitmix64: tiny, and the same sequence on every platform (unlike <random>'s distributions).
  double next_unit() {
    std::uint64_t z = (rng_state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return double(z >> 11) * 0x1.0p-53;  // [0, 1)
  }

  BackoffOptions options_;
  std::uint64_t rng_state_;
  double base_ns_ = 0;
  int attempts_ = 0;
};

}  // namespace archipelago::net

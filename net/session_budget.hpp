// A session's inbound budget: calls and bytes per second, each with a burst, as a peer is allowed
// to spend them on this process's plane thread.
//
// One budget per authenticated session (remote/server.cpp). Each call it makes is charged once, on
// arrival, whatever becomes of it (taken, refused, malformed): what a flood costs is its calls, not
// their fate. The rule is the generic cell rate algorithm (GCRA, virtual scheduling): a charge moves
// the budget's theoretical time by amount / rate; the part beyond `burst` is debt, the delay until
// the charge fits the rate. The plane answers a call in debt only after that delay, so a streaming
// sender (updates) is slowed by its own flow control, and a sender that ignores it runs up debt:
// beyond `max_delay_s` the session is cut, with the reason, before it can starve other sessions.
//
// Invariant: over any interval T, at most burst + rate·T of an amount passes without delay.
// Thread-safety: a plain value; one owner (the plane's thread) calls it.
#pragma once

#include <cstdint>
#include <string>

namespace archipelago::net {

struct RateLimit {
  double per_s = 0;  // > 0: the sustained rate
  double burst = 0;  // >= 0: what may pass at once, above the rate
};

// One amount (calls, bytes) against one limit.
class RateBudget {
 public:
  explicit RateBudget(RateLimit limit) : limit_(limit) {}
  // Charges `amount` at `now_s`; returns the debt in seconds (0: within the burst).
  double charge(double amount, double now_s);

 private:
  RateLimit limit_;
  double theoretical_s_ = -1e300;  // when everything charged so far would have passed at the rate
};

struct SessionLimits {
  RateLimit calls{1000, 1000};             // calls per second, burst
  RateLimit bytes{256.0 * (1 << 20), 64.0 * (1 << 20)};  // envelope bytes per second, burst
  double max_delay_s = 2.0;                // debt beyond this cuts the session
};

struct BudgetDecision {
  double delay_s = 0;  // answer the call after this long (0: at once)
  bool cut = false;    // the session spent beyond its debt bound: end it
  std::string reason;  // why, when cut (names the limit and the rate)
};

class SessionBudget {
 public:
  explicit SessionBudget(const SessionLimits& limits = {})
      : limits_(limits), calls_(limits.calls), bytes_(limits.bytes) {}
  // Charges one call carrying `bytes` at `now_s`.
  BudgetDecision charge(uint64_t bytes, double now_s);

 private:
  SessionLimits limits_;
  RateBudget calls_;
  RateBudget bytes_;
};

}  // namespace archipelago::net

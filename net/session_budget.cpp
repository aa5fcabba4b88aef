#include "net/session_budget.hpp"

#include <algorithm>
#include <cstdio>

namespace archipelago::net {

double RateBudget::charge(double amount, double now_s) {
  theoretical_s_ = std::max(theoretical_s_, now_s) + amount / limit_.per_s;
  return std::max(0.0, theoretical_s_ - now_s - limit_.burst / limit_.per_s);
}

BudgetDecision SessionBudget::charge(uint64_t bytes, double now_s) {
  BudgetDecision d;
  const double call_debt = calls_.charge(1, now_s);
  const double byte_debt = bytes_.charge(static_cast<double>(bytes), now_s);
  d.delay_s = std::max(call_debt, byte_debt);
  if (d.delay_s > limits_.max_delay_s) {
    d.cut = true;
    char text[200];
    if (call_debt >= byte_debt) {
      std::snprintf(text, sizeof text, "more calls than %.0f per second (burst %.0f): %.1f s in debt, bound %.1f s",
                    limits_.calls.per_s, limits_.calls.burst, call_debt, limits_.max_delay_s);
    } else {
      std::snprintf(text, sizeof text, "more bytes than %.0f MiB per second (burst %.0f MiB): %.1f s in debt, bound %.1f s",
                    limits_.bytes.per_s / (1 << 20), limits_.bytes.burst / (1 << 20), byte_debt, limits_.max_delay_s);
    }
    d.reason = text;
  }
  return d;
}

}  // namespace archipelago::net

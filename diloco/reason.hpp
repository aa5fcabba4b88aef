// The reason text of a decision: a printf format with up to three numbers. Internal to diloco/.
#pragma once

#include <cstdio>
#include <string>

namespace archipelago::diloco {

inline std::string reason(const char* fmt, double a, double b = 0, double c = 0) {
  char buffer[160];
  std::snprintf(buffer, sizeof buffer, fmt, a, b, c);
  return buffer;
}

}  // namespace archipelago::diloco

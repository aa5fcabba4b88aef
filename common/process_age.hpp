// How long this process has existed: from the kernel's record of its start (/proc/self/stat, in
// clock ticks since boot) to now on CLOCK_BOOTTIME, the same clock. It covers what a process's own
// clocks miss: exec, loading shared libraries, static initializers. Resolution: one clock tick
// (10 ms with USER_HZ = 100). Negative when /proc cannot be read.
#pragma once

#include <time.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace archipelago {

inline double process_age_seconds() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return -1;
  // The command name (field 2) may hold spaces and parentheses: count fields after its last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) start_ticks = std::stoull(field);
  }
  const long hz = sysconf(_SC_CLK_TCK);
  timespec now{};
  if (start_ticks == 0 || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &now) != 0) return -1;
  return static_cast<double>(now.tv_sec) + now.tv_nsec * 1e-9 - static_cast<double>(start_ticks) / static_cast<double>(hz);
}

}  // namespace archipelago

// The drill's one source of randomness: splitmix64, the same stream on every platform, so a drill
// file and a seed always give the same fault times and targets, the same secrets and the same plot.
// Header-only; each user seeds and owns its own Random (not shared between threads).
#pragma once

#include <cstddef>
#include <cstdint>

namespace archipelago::apps::drill {

struct Random {
  uint64_t state;
  explicit Random(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double unit() { return double(next() >> 11) * 0x1.0p-53; }  // in [0, 1)
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
};

}  // namespace archipelago::apps::drill

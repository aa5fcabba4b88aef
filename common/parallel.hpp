// Splitting a loop over [0, n) across threads, for the passes over whole parameter fragments
// (the syncer's decode, norm and accumulate passes). Every element belongs to one range, so each
// element's arithmetic is the same whatever the thread count: results do not depend on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace archipelago {

// Below this many elements per thread a pass is not worth a thread's start (~20 µs).
inline constexpr int64_t kMinElementsPerThread = int64_t{1} << 16;

// The threads a pass over `n` elements uses: `threads` (0: the hardware's, at most 8), fewer when
// `n` is too small to share.
inline int pass_threads(int64_t n, int threads) {
  if (threads <= 0) threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 8);
  const int64_t useful = std::max<int64_t>(1, n / kMinElementsPerThread);
  return static_cast<int>(std::min<int64_t>(threads, useful));
}

// Calls body(begin, end, part) for `parts` contiguous ranges covering [0, n), part 0 on the calling
// thread; returns when all are done. `body` must only touch its own range (and its own part slot).
template <typename Body>
void parallel_ranges(int64_t n, int parts, Body&& body) {
  parts = std::max(1, parts);
  if (parts == 1) {
    body(int64_t{0}, n, 0);
    return;
  }
  const int64_t step = (n + parts - 1) / parts;
  std::vector<std::thread> workers;
  workers.reserve(static_cast<size_t>(parts - 1));
  for (int part = 1; part < parts; ++part) {
    const int64_t begin = std::min(n, part * step), end = std::min(n, begin + step);
    workers.emplace_back([&body, begin, end, part] { body(begin, end, part); });
  }
  body(int64_t{0}, std::min(n, step), 0);
  for (auto& w : workers) w.join();
}

}  // namespace archipelago

// θ0 per fragment: what a syncer commits as version 1 when it finds its store empty.
//
// One holder is shared by the syncer and by whoever may start a syncer again (a supervisor's
// respawn closure, the run setup). The syncer copies θ0 out only when its store holds no version,
// and releases the holder once the store holds one: from then on every start restores from the
// store, so nobody keeps a model-sized copy that nothing reads. The fragments' sizes stay, for a
// syncer that starts without values and restores. Thread-safe: a respawn may read it from another
// thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "common/error.hpp"

namespace archipelago::actors {

// The sizes of per-fragment values, in fragment order.
inline std::vector<int64_t> numels_of(const std::vector<std::vector<float>>& values) {
  std::vector<int64_t> numels;
  for (const auto& v : values) numels.push_back(static_cast<int64_t>(v.size()));
  return numels;
}

class InitialFragments {
 public:
  explicit InitialFragments(std::vector<std::vector<float>> values)
      : numels_(numels_of(values)), values_(std::move(values)) {}

  // One per fragment; kept after release.
  const std::vector<int64_t>& numels() const { return numels_; }

  // A copy of θ0; not_found once released.
  Expected<std::vector<std::vector<float>>> copy() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (released_) {
      return make_error(ErrorCode::not_found, "the initial parameters were released once a version was durable");
    }
    return values_;
  }

  // Lets θ0 go, for every holder. Idempotent.
  void release() {
    std::vector<std::vector<float>> gone;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = true;
      gone.swap(values_);
    }
  }

  bool released() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return released_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<int64_t> numels_;
  std::vector<std::vector<float>> values_;
  bool released_ = false;
};

}  // namespace archipelago::actors

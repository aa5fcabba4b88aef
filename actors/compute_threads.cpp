#include "actors/compute_threads.hpp"

#include <algorithm>
#include <thread>

#include "training/replica.hpp"

namespace archipelago::actors {

int configure_compute_threads(int threads, int concurrent_learners, const std::string& precision) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int share = threads > 0 ? threads : std::max(1, cores / std::max(1, concurrent_learners));
  return training::set_compute_threads(share, precision);
}

}  // namespace archipelago::actors

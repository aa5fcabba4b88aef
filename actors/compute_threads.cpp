#include "actors/compute_threads.hpp"

#include <algorithm>
#include <thread>

#include "training/replica.hpp"

namespace archipelago::actors {

int learner_thread_share(int threads, int concurrent_learners) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return threads > 0 ? threads : std::max(1, cores / std::max(1, concurrent_learners));
}

int configure_compute_threads(int threads, int concurrent_learners, const std::string& precision) {
  return training::set_compute_threads(learner_thread_share(threads, concurrent_learners), precision);
}

}  // namespace archipelago::actors

#include "actors/compute_threads.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <thread>

#include "common/log.hpp"
#include "training/replica.hpp"

namespace archipelago::actors {

int configure_compute_threads(int threads, int concurrent_learners) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int share = threads > 0 ? threads : std::max(1, cores / std::max(1, concurrent_learners));
  training::set_compute_threads(share);
  // OpenBLAS is reached through LibTorch; look its setter up at run time so that another BLAS
  // (MKL, reference) simply skips this step.
  using SetThreads = void (*)(int);
  if (auto set_blas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set_blas(share);
  } else {
    component_logger("cluster")->debug("no openblas_set_num_threads in this process: BLAS threads left as they are");
  }
  return share;
}

}  // namespace archipelago::actors

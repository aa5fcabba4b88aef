// Sharing the cores between learners in one process.
//
// LibTorch's intra-op thread count is process-wide, and so is OpenBLAS's own pool. With several
// learners calling BLAS concurrently, a multi-threaded OpenBLAS pool oversubscribes the cores and
// its threads spin against each other (measured here: 4 learners of the small model ran ~3.5x
// slower). configure_compute_threads gives each learner its share of the cores, split between the
// two pools as training::set_compute_threads says for the run's precision. Call it once, before
// learners start (any thread).
#pragma once

#include <string>

namespace archipelago::actors {

// One learner's compute threads: threads > 0: exactly that many; 0: max(1, cores / concurrent_learners).
int learner_thread_share(int threads, int concurrent_learners);

// Sets learner_thread_share(threads, concurrent_learners). `precision`: the resolved
// one ("fp32" or "bf16", training::resolve_precision). Returns the count set.
int configure_compute_threads(int threads, int concurrent_learners, const std::string& precision);

}  // namespace archipelago::actors

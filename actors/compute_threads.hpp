// Sharing the cores between learners in one process.
//
// LibTorch's intra-op thread count is process-wide, and so is OpenBLAS's own pool, which
// training::set_compute_threads (at::set_num_threads) does not resize. With several learners
// calling BLAS concurrently, a multi-threaded OpenBLAS pool oversubscribes the cores and its
// threads spin against each other (measured here: 4 learners of the small model ran ~3.5x slower).
// configure_compute_threads gives LibTorch and OpenBLAS the same per-learner share. Call it once,
// before learners start (any thread).
#pragma once

namespace archipelago::actors {

// threads > 0: exactly that many; 0: max(1, cores / concurrent_learners). Returns the count set.
int configure_compute_threads(int threads, int concurrent_learners);

}  // namespace archipelago::actors

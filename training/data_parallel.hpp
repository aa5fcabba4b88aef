// One worker of a data-parallel job on gloo: the baseline Archipelago's byte and goodput claims
// are measured against. Every worker holds the whole model; every step each computes the
// gradient of its own batch (worker r reads learner r's shard, the batches the reference engine's
// ddp mode averages in one process), the workers all-reduce the gradients (ring, fp32, one bucket
// of the whole model) and take the same AdamW step. Rank 0's parameters are broadcast once at the
// start, as a data-parallel wrapper does.
//
// Bytes are measured on the worker's own TCP sockets (kernel counters, common/socket_bytes.hpp):
// the gloo pairs apart from the store connection. A worker that loses a peer fails with the
// collective's error; a non-elastic job restarts every worker (from its last checkpoint).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/error.hpp"
#include "training/corpus.hpp"
#include "training/gloo_group.hpp"
#include "training/reference_engine.hpp"
#include "training/run_summary.hpp"

namespace archipelago::training {

struct WorkerBytes {
  int64_t sent = 0;            // on the all-reduce sockets (gloo pairs), payload acknowledged by the peer
  int64_t received = 0;
  int64_t store_sent = 0;      // on the rendezvous store connection
  int64_t store_received = 0;
  int sockets = 0;             // gloo pair sockets counted
};

// The bytes a data-parallel job sends in `steps` steps of `workers` workers, computed: a ring
// all-reduce of the fp32 gradients, in which each worker sends 2(M−1)/M of them per step. 0 for
// one worker. The figure every "× fewer bytes" is given against when no gloo job was measured.
int64_t ring_allreduce_bytes(int64_t steps, int workers, int64_t parameters);

// This process's bytes so far, the sockets to `store_port` apart.
Expected<WorkerBytes> measure_worker_bytes(int store_port);

// A data-parallel worker's result. RunSummary's bytes_sent is this worker's measured all-reduce
// bytes (sent), bytes_measured true; the job sums its workers.
struct DataParallelResult : RunSummary {
  int rank = 0;
  WorkerBytes bytes;
  uint64_t parameter_digest = 0;  // xxh64 of the final fp32 parameters: equal on every rank
  int64_t broadcast_bytes = 0;    // of the start-up broadcast, part of bytes.sent / received
};

// Progress of rank 0 (every worker calls it; only rank 0 evaluates): `bytes_sent` there is the
// job's measured total, summed over the workers at that point.
using DataParallelProgress = std::function<void(const ProgressPoint&)>;

Expected<DataParallelResult> run_data_parallel_worker(const ReferenceSetup& setup,
                                                      const std::shared_ptr<const Corpus>& corpus,
                                                      GlooGroup& group, const DataParallelProgress& progress);

}  // namespace archipelago::training

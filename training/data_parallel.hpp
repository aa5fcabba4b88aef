// One worker of a data-parallel job on gloo: the baseline Archipelago's byte and goodput claims
// are measured against. Every worker holds the whole model; every step each computes the
// gradient of its own batch (worker r reads learner r's shard, the batches the reference engine's
// ddp mode averages in one process), the workers all-reduce the gradients (ring, fp32, one bucket
// of the whole model) and take the same AdamW step. Rank 0's parameters are broadcast once at the
// start, as a data-parallel wrapper does.
//
// Bytes are measured on the worker's own TCP sockets (kernel counters, common/socket_bytes.hpp):
// the gloo pairs apart from the store connection. A worker that loses a peer fails with the
// collective's error; a non-elastic job restarts every worker from its last checkpoint: rank 0
// writes one at every report (parameters, AdamW state, steps; XXH3-64-checked, written aside,
// synced and renamed), reads it at start and broadcasts it, so the workers need no shared file system. A
// worker's data cursor is its step count, so a resumed job reads the batches it would have read.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "training/corpus.hpp"
#include "training/gloo_group.hpp"
#include "training/reference_engine.hpp"
#include "training/replica.hpp"
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

// The system clock in ms since the epoch: the unit of a job's deadline and of its first step's time,
// compared across the launcher's and the workers' processes.
int64_t unix_ms();

// This process's bytes so far, the sockets to `store_port` apart.
Expected<WorkerBytes> measure_worker_bytes(int store_port);

// A data-parallel worker's result. RunSummary's bytes_sent is this worker's measured all-reduce
// bytes (sent), bytes_measured true; the job sums its workers.
struct DataParallelResult : RunSummary {
  int rank = 0;
  WorkerBytes bytes;
  uint64_t parameter_digest = 0;  // XXH3-64 of the final fp32 parameters: equal on every rank
  int64_t broadcast_bytes = 0;    // of the start-up broadcast, part of bytes.sent / received
  int64_t resumed_from_step = 0;  // the checkpoint's step this worker started from (0: none)
  // Goodput, measured: the wall time of the steps in the final parameters (a step's time on this
  // worker, its all-reduce included; steps after a crashed incarnation's last checkpoint are not
  // in), and when the job's first step began (system clock, ms since the epoch; from the checkpoint
  // in a resumed job).
  double kept_step_s = 0;
  int64_t first_step_at_ms = 0;
};

// The state a data-parallel job resumes from. Pure values; the file's bytes are its own format.
struct DataParallelCheckpoint {
  int64_t steps = 0;
  double initial_heldout_loss = 0;  // the job's, from before its first step
  double kept_step_s = 0;           // DataParallelResult's, up to this checkpoint
  int64_t first_step_at_ms = 0;
  std::vector<float> parameters;
  OptimizerState optimizer;
};
std::string encode_checkpoint(const DataParallelCheckpoint& checkpoint);
// corrupt: a checksum or size that does not match (the reason says which).
Expected<DataParallelCheckpoint> decode_checkpoint(const std::string& bytes);
// The checkpoint at `path`, or none when there is no file there. A file that does not decode is
// corrupt, with the path, the reason and what to do in the message: the workers' rank 0 and the
// launcher, which checks it before it starts an incarnation, refuse it in the same words.
Expected<std::optional<DataParallelCheckpoint>> read_checkpoint(const std::string& path);

// Progress of rank 0 (every worker calls it; only rank 0 evaluates): `bytes_sent` there is the
// job's measured total, summed over the workers at that point.
using DataParallelProgress = std::function<void(const ProgressPoint&)>;

// `checkpoint_path`: rank 0's checkpoint file (empty: none). A corrupt or mismatched checkpoint is
// an error, never a silent start from scratch. `deadline_ms` (system clock, ms since the epoch; 0:
// none) replaces train.max_seconds: a restarted job keeps its first incarnation's end.
Expected<DataParallelResult> run_data_parallel_worker(const ReferenceSetup& setup,
                                                      const std::shared_ptr<const Corpus>& corpus,
                                                      GlooGroup& group, const std::string& checkpoint_path,
                                                      int64_t deadline_ms, const DataParallelProgress& progress);

}  // namespace archipelago::training

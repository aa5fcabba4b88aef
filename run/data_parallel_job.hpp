// `train.mode = "ddp"`: the data-parallel baseline as a real job of `world` worker processes
// (`archipelago ddp-worker`) that all-reduce their gradients every step over gloo, which this
// process meets at its rendezvous store. The same workers run across machines when each is
// started by hand with the store's address (README: "A data-parallel baseline").
//
// Bytes are measured by each worker on its own sockets; the job adds them up. A worker that fails
// stops the whole job, as in any non-elastic data-parallel job: the others are killed, and with
// restarts left every worker starts again from the last checkpoint (rank 0's file, written at
// every report) at a new rendezvous; without, the job fails.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "training/data_parallel.hpp"
#include "training/reference_engine.hpp"
#include "training/run_summary.hpp"

namespace archipelago::run {

struct DataParallelJobOptions {
  std::string binary;                     // the archipelago executable the workers run
  std::filesystem::path config_file;      // the run's whole configuration (run directory's config.toml)
  std::filesystem::path run_dir;          // workers' logs under workers/
  int world = 1;                          // train.learners
  int threads_per_worker = 1;             // LibTorch intra-op threads of each worker
  double timeout_s = 3600;                // the whole job, rendezvous included
  std::filesystem::path checkpoint;       // rank 0's checkpoint file (empty: none, and no restart resumes)
  int max_restarts = 0;                   // whole-job restarts after a worker failed
  double max_seconds = 0;                 // the job's wall-time budget from its start, restarts included (0: none)
};

struct DataParallelRestart {
  double at_s = 0;     // since the job started
  int rank = 0;        // the worker that failed first
  int exit_code = 0;   // its code (128 + signal)
};

struct DataParallelWorkerReport {
  int rank = 0;
  int64_t bytes_sent = 0, bytes_received = 0;              // all-reduce sockets
  int64_t store_bytes_sent = 0, store_bytes_received = 0;  // rendezvous store connection
  int64_t broadcast_bytes = 0;
  int64_t resumed_from_step = 0;
  double kept_step_s = 0;        // training::DataParallelResult's
  int64_t first_step_at_ms = 0;
  uint64_t parameter_digest = 0;
  double wall_s = 0;
};

// bytes_sent: every worker's all-reduce bytes sent, measured (bytes_measured true).
struct DataParallelJobResult : training::RunSummary {
  int64_t bytes_received = 0;
  int64_t store_bytes = 0;          // rendezvous traffic, both ways, all workers (not in bytes_sent)
  bool parameters_agree = false;    // every worker ended with the same parameters (digests)
  std::vector<DataParallelWorkerReport> workers;   // the last incarnation's
  std::vector<DataParallelRestart> restarts;       // whole-job restarts, in order
  // Goodput, measured: rank 0's kept step time ÷ the time from the job's first step to its end
  // (every worker is busy exactly as long: the steps are collective).
  double kept_step_s = 0;
  double allocated_s = 0;
  double goodput() const { return allocated_s > 0 ? kept_step_s / allocated_s : 0; }
};

Expected<DataParallelJobResult> run_data_parallel_job(const DataParallelJobOptions& options,
                                                      const std::function<void(const training::ProgressPoint&)>& progress);

// The pid of the running worker of rank `rank` of the job whose configuration file is `config_file`
// (0: none runs): how a drill or a test picks a worker to kill.
pid_t find_data_parallel_worker(const std::filesystem::path& config_file, int rank);

// What a worker prints: progress lines ("progress " + JSON, rank 0) and, last, its result (one JSON
// line); and their readers (nullopt: not such a line). Pure.
std::string progress_line(const training::ProgressPoint& point);
// A progress point as JSON (a progress line's, and a run's metrics.jsonl line); null for a loss not measured.
nlohmann::json to_json(const training::ProgressPoint& point);
std::optional<training::ProgressPoint> parse_progress_line(const std::string& line);
std::string worker_result_line(const training::DataParallelResult& result);
std::optional<DataParallelWorkerReport> parse_worker_result_line(const std::string& line,
                                                                 training::RunSummary* summary = nullptr);

}  // namespace archipelago::run

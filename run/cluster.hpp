// A local cluster: the whole actor runtime in one process, the engine behind `archipelago train
// --engine actors` and the fixture of the actor tests.
//
// start() prepares data (split, shards, held-out batches), builds the fragment plan and θ0, opens
// the RocksDB store under <run_dir>/store and spawns the supervision tree:
//
//   root supervisor ─┬─ checkpoint_store (detached)
//                    ├─ failure_monitor
//                    ├─ syncer
//                    ├─ evaluator (detached)
//                    └─ learner supervisor ── learner-0 … learner-(M−1) (detached; ddp: one learner
//                                                                       averaging M shards)
// run() then drives the run from the calling thread: fault injection (faults.*), progress samples,
// completion (every learner finished or given up), a final drain and evaluation, and the summary.
// query()/kill()/wait_for() let tests observe and disturb the run; they are called from the thread
// that owns the cluster. The destructor stops every actor and waits for them.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/fwd.hpp>
#include <nlohmann/json.hpp>

#include "actors/accounting.hpp"
#include "actors/runtime_options.hpp"
#include "common/error.hpp"
#include "training/corpus.hpp"
#include "training/run_summary.hpp"

namespace archipelago::run {

struct ProgressSample {
  double elapsed_s = 0;
  uint64_t version = 0;
  int64_t tokens = 0;
  double tokens_per_s = 0;
  double train_loss = 0;      // NaN before the first merge
  double heldout_loss = 0;    // NaN before the first evaluation
  double heldout_bits_per_byte = 0;  // the same in bits per byte of text (NaN before it)
  uint64_t heldout_version = 0;
  int alive = 0;
  int total = 0;
  double goodput = 0;          // merged ÷ allocated so far (the ledger's, diloco/ledger.hpp)
  double in_flight = 0;        // ... computed, not merged yet: the learners' unsent work and updates on their way
  double unaccounted = 0;      // ... what no clock saw
  int64_t bytes_sent = 0;
  int64_t bytes_ddp_equivalent = 0;
  int64_t restarts = 0;
  int64_t rejected = 0;
  nlohmann::json operator_view;  // the metrics endpoint's and status page's figures (operator_sample)
};

// The run's summary (training/run_summary.hpp: rounds = versions committed in this run, bytes
// measured on the links), and what only the actor runtime reports.
struct ClusterResult : training::RunSummary {
  uint64_t start_version = 0;
  uint64_t final_version = 0;
  int64_t versions_committed = 0;   // in this run
  int64_t bytes_up = 0;             // learners -> syncer (pseudo-gradients)
  int64_t bytes_down = 0;           // syncer -> learners (broadcasts) + store -> learners (state fetches)
  int64_t fragment_commits = 0;     // Σ over fragments of the commits that changed it, this run
  double versions_per_fragment_round = 0;  // fragment_commits ÷ (P × the leading learner's inner steps ÷ H)
  actors::Ledger goodput;           // the goodput ledger (diloco/ledger.hpp)
  int64_t restarts = 0;             // learner restarts
  int64_t infrastructure_restarts = 0;  // syncer / store / monitor / evaluator restarts
  int64_t rejected_updates = 0;
  int64_t learner_nonfinite_recoveries = 0;  // learner steps that went NaN/Inf and were undone
  std::vector<double> kill_to_merge_s;  // per injected learner kill: kill -> restarted learner's first merge
  std::vector<ProgressSample> curve;
  nlohmann::json details;           // statuses of every actor at the end, links, per-learner accounts
};

class LocalCluster {
 public:
  static Expected<std::unique_ptr<LocalCluster>> start(actors::RuntimeOptions options,
                                                       std::shared_ptr<const training::Corpus> corpus);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // (admin_atom, AdminRequest{command, args}) to the actor registered as `name`; its JSON reply.
  Expected<nlohmann::json> query(caf::atom_value name, const std::string& command = "status",
                                 std::vector<std::string> args = {}, double timeout_s = 5);
  // Sends exit reason `kill` to the actor registered as `name`; false when none is registered.
  bool kill(caf::atom_value name);
  // Polls `condition` every `poll_s` until it holds (true) or `timeout_s` passes (false).
  bool wait_for(const std::function<bool()>& condition, double timeout_s, double poll_s = 0.05);

  // Drives the run to its end (see the header comment) and returns the summary.
  Expected<ClusterResult> run(const std::function<void(const ProgressSample&)>& progress = {});

  // Any thread: the learners finish their in-flight work and leave, and run() ends as after the
  // budget (the console's `drain`).
  void request_drain();

  double elapsed_s() const;
  double started_s() const;  // monotonic_seconds() when the run started
  int learner_slots() const;
  const actors::SyncerAccounting& accounting_at_start() const;  // a resumed version's (goodput ledger)
  int64_t parameter_count() const;
  caf::actor_system& system();  // for tests that talk to actors directly
  const actors::RuntimeOptions& options() const;

  struct Impl;

 private:
  explicit LocalCluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace archipelago::run

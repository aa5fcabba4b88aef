// Options of the actor runtime: the training option structs plus what only actors need (staleness
// bound, grace window, failure detector, restart policy, evaluation cadence, fault injection).
//
// apps/config.cpp fills this from config/default.toml ([outer], [runtime], [faults] sections).
// Plain values, no CAF and no torch: tests build them directly. Copy freely, from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "diloco/options.hpp"
#include "training/reference_engine.hpp"

namespace caf {
class actor_system_config;
}

namespace archipelago::actors {

class EventLog;      // actors/events.hpp
struct LedgerCarry;  // actors/accounting.hpp

using diloco::DetectorOptions;
using diloco::RestartOptions;
using diloco::ShardOptions;
using diloco::SyncerOptions;

struct FaultOptions {
  double kill_learner_every_s = 0;  // kill a random live learner (exit reason kill) this often; 0 = never
  double kill_syncer_at_s = 0;      // kill the syncer once at this time; 0 = never
  int crash_learner_on_start = -1;  // this learner index fails at every start (restart-intensity demo)
  std::map<int, double> slowdowns;  // learner index -> factor: its steps take that many times longer (stragglers)
  double slow_jitter = 0;           // a straggler's factor per step: normal around its factor, this relative sd (0-1; drawn factor >= 1)
  double drop_outer_gradient = 0;   // reference engine, sync: a pseudo-gradient is lost from its round with this probability
  int nonfinite_learner = -1;       // this learner index gets a NaN in its weights once, at `nonfinite_at_step`
  int64_t nonfinite_at_step = 0;
  uint64_t seed = 7;                // of the kill schedule
};

struct RuntimeOptions {
  training::ReferenceSetup setup;   // model, inner, outer, data, run
  ShardOptions shard;
  SyncerOptions syncer;
  DetectorOptions detector;
  RestartOptions restart;
  FaultOptions faults;
  int eval_every_versions = 8;      // the evaluator scores every N-th committed version (and the last)
  double eval_interval_s = 30;      // ... and the newest one when this long has passed since it last scored (0: off)
  double progress_interval_s = 2.0; // how often the controller samples progress
  double drain_timeout_s = 20.0;    // after the budget, how long learners may wait for their last merges
  std::string run_dir;              // RocksDB store lives in <run_dir>/store
  bool resume = false;              // continue from the store's latest committed version
  bool store_sync = true;           // fsync every commit (tests may turn it off)
  uint32_t keep_versions = 20;      // store retention: newest N committed versions (0 = all)
  int learner_checkpoint_every = 2; // a learner saves its unsent work + AdamW state every N steps (0 = never)
  bool learner_checkpoint_sync = false;  // fdatasync those files (survive power loss, not only a kill)
  // How much lower than the rest of its process a learner's thread runs (its nice increment, 0-19):
  // inner steps yield the cores to the plane, the actors and whatever else shares the machine (a
  // coordinator starting beside nodes, heartbeats under load). 0: the process's own priority.
  int learner_nice = 5;
  // The goodput ledger's wall clock starts here (the system clock's seconds; 0: when the monitor
  // starts), and a restarted coordinator's failure monitor continues the run's ledger from the carry
  // of the version it resumed (null: a fresh ledger). actors/accounting.hpp, LedgerCarry.
  double run_started_unix_s = 0;
  std::shared_ptr<const LedgerCarry> ledger_at_start;
  std::shared_ptr<EventLog> events;  // recent events for operators (null: none kept); shared by copies
  // The run store's fault-injection seam (storage::StoreOptions::fault_hook): tests delay or fail
  // its writes. Empty in production.
  std::function<Status(std::string_view)> store_fault_hook;
};

// Tokens a learner trains on per inner step, from the run's configuration (a node runs from the
// coordinator's): batch × seq_len; ddp: × learners, as its one learner averages every shard's batch.
inline int64_t configured_tokens_per_step(const training::ReferenceSetup& setup) {
  const int64_t per_batch = static_cast<int64_t>(setup.inner.batch_size) * setup.model.seq_len;
  return diloco::data_parallel(setup.run.mode) ? per_batch * setup.run.learners : per_batch;
}

}  // namespace archipelago::actors

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
#include "training/reference_engine.hpp"

namespace caf {
class actor_system_config;
}

namespace archipelago::actors {

class EventLog;      // actors/events.hpp
struct LedgerCarry;  // actors/accounting.hpp

struct SyncerOptions {
  double alpha = 0.5;           // learner merge of a received global fragment: α·local + (1−α)·global
  bool carry_unsent = false;    // instead install θ_G + (θ − θ_ref): keep the steps taken since the last send
  int max_staleness = 4;        // updates of fragment p committed since the learner's base, at most
  int overlap_steps = 2;        // τ: inner steps a fragment's sync may take without stalling anyone
  double grace_gamma = 0.5;     // γ of the adaptive grace window
  double grace_max_s = 2.0;     // upper bound of the grace window
  std::string auth_token = "archipelago-local";  // Join.authToken every learner must present
};

struct DetectorOptions {
  double heartbeat_s = 0.2;     // nominal heartbeat interval of a learner
  double suspect_factor = 3.0;  // timeout = factor · (mean interval + 4 · deviation)
  double min_timeout_s = 2.0;   // never suspect sooner than this
  double max_timeout_s = 30.0;  // a learner silent this long is dead whatever its history says
};

struct RestartOptions {
  int max_restarts = 5;         // R: restarts within `window_s` before a learner is given up
  double window_s = 60.0;       // T
  double backoff_initial_s = 0.05;  // first restart delay; doubles per recent restart
  double backoff_max_s = 5.0;
};

struct FaultOptions {
  double kill_learner_every_s = 0;  // kill a random live learner (exit reason kill) this often; 0 = never
  double kill_syncer_at_s = 0;      // kill the syncer once at this time; 0 = never
  int crash_learner_on_start = -1;  // this learner index fails at every start (restart-intensity demo)
  std::map<int, double> slowdowns;  // learner index -> factor: its steps take that many times longer (stragglers)
  double drop_outer_gradient = 0;   // reference engine, sync: a pseudo-gradient is lost from its round with this probability
  int nonfinite_learner = -1;       // this learner index gets a NaN in its weights once, at `nonfinite_at_step`
  int64_t nonfinite_at_step = 0;
  uint64_t seed = 7;                // of the kill schedule
};

// Which fragments this process's syncer owns (`coordinator --shard I --shards N`): fragment p
// belongs to shard p mod N. A shard opens rounds, accepts updates and serves fetches only for its
// own fragments; its store holds the others at their initial value, which nothing reads. One shard
// (the default) owns every fragment.
struct ShardOptions {
  int index = 0;
  int count = 1;
  // The shard of `count` that owns `fragment`: the one rule every owner lookup uses.
  static int owner(int fragment, int count) { return count <= 1 ? 0 : fragment % count; }
  bool owns(int fragment) const { return owner(fragment, count) == index; }
  // Its fragments among `fragments`, ascending.
  std::vector<int> owned(int fragments) const {
    std::vector<int> out;
    for (int p = 0; p < fragments; ++p) {
      if (owns(p)) out.push_back(p);
    }
    return out;
  }
  // "shard I of N", or "an unsharded run".
  std::string name() const {
    return count > 1 ? "shard " + std::to_string(index) + " of " + std::to_string(count) : "an unsharded run";
  }
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

}  // namespace archipelago::actors

// Goodput and bytes accounting: pure functions over the times and counters the actors report.
//
// The ledger itself (its parts and how they add up) is diloco/ledger.hpp; this file turns the
// actors' reports and status into its inputs and its values into JSON.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "actors/status.hpp"
#include "diloco/ledger.hpp"
#include "messages/message_types.hpp"

namespace archipelago::actors {

using diloco::Ledger;       // diloco/ledger.hpp: the ledger and how its parts are measured
using diloco::LedgerParts;
using diloco::SlotTimes;
using diloco::build_ledger;

// The ledger carried across coordinator restarts: a value every committed version's manifest holds
// (accounting.ledger). Per slot, the run's times so far (`total`: every node process and every
// coordinator incarnation before) as of the slot's last SlotReport (`raw`, as its supervisor sent it).
// A coordinator restarted from that version seeds its failure monitor with it: the same reporter's
// next reports count from `raw` on (what a learner computed while no coordinator ran is in them),
// and the ledger's wall clock runs from `run_started_unix_s`, the run's first start. So the last
// incarnation's ledger covers the whole run, its downtimes included, and its parts still add up.
struct SlotCarry {
  messages::SlotReport total;  // times only (state and counters as `raw`'s)
  messages::SlotReport raw;
};
struct LedgerCarry {
  double run_started_unix_s = 0;
  std::map<std::string, SlotCarry> slots;
};
nlohmann::json to_json(const LedgerCarry& carry);
// A clear error for a carry that is not an object, lacks a field, or holds a negative or non-finite time.
Expected<LedgerCarry> ledger_carry_from_json(const nlohmann::json& j);
double unix_seconds();  // the system clock (comparable across processes of one machine)

// {"goodput", "allocated_s", "badput": {part: share}, "seconds": {part: s}}; shares of allocated time.
nlohmann::json to_json(const Ledger& ledger);

const char* slot_state_name(messages::SlotState state);  // "running", "restarting", "finished", "failed"

// A slot's reported times as a status carries them (the ledger's inputs).
SlotTimesStatus slot_times(const messages::SlotReport& times);

// The ledger of a run from its actors' status: the failure monitor's "slots" (times from the
// supervisors' SlotReports) and the syncer's "learners" (compute merged and rejected), minus what
// the syncer had counted at `syncer_at_start` (a resumed run's earlier processes). `slot_ids`: every
// learner slot of the run; a slot nobody reported on is idle. A syncer shard's ledger (its status
// says its `shard.share` of the model) is that share of every slot's times: the shards' add up.
Ledger ledger_from_status(double wall_s, const std::vector<std::string>& slot_ids, const MonitorStatus& monitor,
                          const SyncerStatus& syncer, const SyncerAccounting& syncer_at_start);

// The run's train loss now: the learners' recent inner steps (their heartbeats, through the monitor),
// or before any heartbeat carried one, the mean train loss of the merged updates; NaN before both.
double recent_train_loss(const MonitorStatus& monitor, const SyncerStatus& syncer);

// What the metrics endpoint and the status page show (apps/metrics_server.hpp), from the actors'
// status replies as a coordinator or a local run samples them: elapsed_s, version, start_version,
// heldout_loss (NaN until scored), merged, rejected (by reason), learner_states, learner_restarts
// (the supervisors'), goodput (to_json of the ledger). A coordinator adds its links and refusals.
nlohmann::json operator_sample(double elapsed_s, uint64_t start_version, const SyncerStatus& syncer,
                               const MonitorStatus& monitor, const EvaluatorStatus& evaluator, const Ledger& ledger);

// Bytes on a local run's learner links, from the syncer's and the store's status, counted where
// they crossed: up = learners -> syncer; down = syncer -> learners + store -> learners (state fetches).
struct LearnerLinkBytes {
  int64_t up = 0, down = 0;
};
LearnerLinkBytes learner_link_bytes(const SyncerStatus& syncer, const StoreStatus& store);

// Bytes a data-parallel job of `workers` workers would send for the same tokens, computed: every
// step each worker sends 2(M−1)/M of its fp32 gradient in a ring all-reduce (what gloo measures,
// run/data_parallel_job.hpp), so 2(M−1) × model bytes per step in all; 0 for one worker, which
// sends nothing.
int64_t ddp_equivalent_bytes(int64_t tokens, int64_t tokens_per_worker_step, int64_t parameters, int workers);

}  // namespace archipelago::actors

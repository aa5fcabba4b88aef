// What a drill observes of one run, as plain data: the recoveries of its faults, what its kills
// read of the stores, the ledgers, and the checks made on them.
//
// Plain structs and no behaviour beyond naming: the runner (apps/drill/runner.hpp) fills them in,
// the invariants (apps/drill/invariants.hpp) judge them, the report (apps/drill/report.hpp) writes
// them out. No processes, no network, no store: tests build them by hand.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace archipelago::apps::drill {

// The runs a drill makes under one schedule. Declared in the order of their names: a map keyed by
// variant lists them as the report always has (ddp, diloco, fault_free).
enum class DrillVariant {
  ddp,         // the DiLoCo cluster where every fault also stalls every other learner (console pause)
  diloco,      // the DiLoCo cluster under the schedule
  fault_free,  // the same cluster with no fault: the reference loss
  gloo,        // a real data-parallel job on gloo under the schedule (apps/drill/gloo_baseline.hpp)
};
// "ddp", "diloco", "fault_free", "ddp_gloo": its name in result.json, the logs and its run directory.
const char* drill_variant_name(DrillVariant variant);

// One fault, carried out, and how the cluster came back from it.
struct Recovery {
  std::string kind;        // learner | node | site | coordinator | shard | freeze | slow | slow_learner | corrupt | cut
  std::string fault;       // the fault's kind
  std::string target;
  double at_s = 0;         // when the fault was applied (run clock)
  double from_s = 0;       // where recovery_s is measured from: the kill (learner), the restart (node,
                           // coordinator: its listening), the SIGCONT (freeze, slow)
  double recovered_s = -1;
  double bound_s = 0;
  std::string evidence;
  // What its kind adds: e.g. a coordinator kill's store_latest_at_kill; a corruption's log_incarnation
  // and log_offset (the coordinator's log, where it stood when the console sent it).
  nlohmann::json detail = nlohmann::json::object();
  bool recovered() const { return recovered_s >= 0; }
  double recovery_s() const { return recovered() ? recovered_s - from_s : -1; }
};

// A restarted coordinator or syncer shard: its store's latest version at the kill, and the
// version the new process said it resumed from (-1: it did not say).
struct Resume {
  std::string target;  // coordinator | shard-K
  uint64_t store_latest = 0;
  int64_t resumed_from = -1;
};

// A syncer shard's outage as shard 0 lived through it: shard 0's committed version at the kill and
// once the shard listened again.
struct ShardOutage {
  std::string target;  // shard-K
  double down_s = 0;   // the kill -> the restarted shard listening
  int64_t shard0_at_kill = 0, shard0_after = 0;
};

// An invariant: whether it held, over how many observations (versions read back, comparisons,
// contributions, faults...), and the evidence in words. One that observed nothing fails: it proved
// nothing.
struct Check {
  std::string name;
  bool passed = false;
  int64_t observations = 0;
  std::string evidence;

  Check(std::string name_, bool holds, int64_t observed, std::string evidence_)
      : name(std::move(name_)), passed(holds && observed > 0), observations(observed),
        evidence(observed > 0 ? std::move(evidence_) : "no observation: " + evidence_) {}
};

using Hashes = std::map<uint64_t, std::vector<std::string>>;  // version -> role/fragment/hash entries

// Digests of versions read at a kill, compared with the store at the next kill or after the run.
struct DigestComparisons {
  int same = 0, changed = 0, lost = 0, dropped = 0;
  int compared() const { return same + changed + lost + dropped; }
};

// What the kills of one store's process read of it: the digests of every version still to be
// compared, and how the comparisons so far came out.
struct StoreMemory {
  Hashes snapshots;
  DigestComparisons digests;
};

// One store read back after the run.
struct StoreObservation {
  struct Version {
    uint64_t version = 0;
    bool verified = false;      // read back with every blob re-hashed
    std::string failure;        // why not, when not verified
    std::string manifest_json;  // its manifest: contributors and the accounting
  };
  std::string error;              // not empty: the store could not be opened or listed, and nothing else was read
  std::vector<Version> versions;  // as the store lists them
  std::optional<DigestComparisons> digests;  // after the last comparison; none when no kill read this store
};

// One line of a store's process's commit log (<run_dir>/commits.jsonl, actors/syncer.hpp): a
// version it committed once the store said it was durable, and which incarnation committed it.
struct LoggedCommit {
  int line = 0;             // 1-based, in the file
  std::string error;        // not empty: the line is no commit line (and nothing else is set)
  uint64_t version = 0;
  std::string incarnation;  // "pid@syncer_started_unix_ms": consecutive lines of one process share it
};

// One refusal of an update as a coordinator logged it (actors/syncer.cpp's "rejected ..." lines).
struct LoggedRefusal {
  int64_t offset = 0;      // of its line, in bytes from the log's start
  std::string logged_at;   // the line's timestamp
  std::string learner;     // empty: a message no learner could be named for
  std::string reason;      // the reject class: malformed, non_finite, stale, ...
};

struct LossPoint {
  double t_s;
  double version;
  double loss;
};

struct RunResult {
  DrillVariant variant = DrillVariant::diloco;
  bool driven = false;
  std::string error;
  double origin_s = 0;  // the run clock at the first commit every learner contributed to: the schedule's zero
  std::vector<LossPoint> loss;
  std::vector<Recovery> recoveries;
  nlohmann::json final_summary;
  double initial_loss = NAN, final_loss = NAN;
  double wall_s = 0;
  int kills = 0;
  double coordinator_down_s = 0;
  std::vector<Check> checks;
  std::vector<nlohmann::json> skipped;  // scheduled faults not carried out: at_s, fault, target, why
  double goodput = NAN;
  std::map<std::string, double> parts;  // seconds: the last coordinator's ledger, which covers the whole run
  double allocated_s = 0;
  double ledger_wall_s = 0;   // allocated ÷ slots: the run's time as the ledger counts it
  double cluster_wall_s = 0;  // the first coordinator's start → the last one's summary, on the drill's clock
};

// `v` with `digits` decimals: how every number reads in evidence, logs and the report.
std::string fixed(double v, int digits = 2);

}  // namespace archipelago::apps::drill

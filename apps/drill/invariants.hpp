// The invariants a drill checks on what it observed, as pure functions: plain observations in
// (apps/drill/observations.hpp), a Check out (its name, whether it held, over how many
// observations, and the evidence in words). No process, store or clock is touched here, so each
// one is unit-tested with a violating and a good observation (tests/apps/drill_invariants_test.cpp).
//
// Two checks read what the coordinators wrote themselves: the commit log each one appends to in its
// run directory, and the refusals in its log. The store's key order lists versions increasing
// whatever was committed, and a refusal counter may rise for any update: neither is evidence.
//
// A function returning std::optional gives nothing when the run had no fault of its kind: the
// drill then makes no such check. The runner (apps/drill/runner.hpp) calls them once its run is
// over, in the order result.json lists them; run_drill adds the two that compare runs.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/drill/observations.hpp"

namespace archipelago::apps::drill {

// ---- the coordinators' own records, as the checks read them ----

// The lines of a commit log, in file order (empty lines skipped).
std::vector<LoggedCommit> read_commit_log(const std::string& text);
// The refusals in a coordinator's log, in log order.
std::vector<LoggedRefusal> read_refusals(const std::string& log);

// ---- the stores (`prefix`: "" for shard 0 or the only coordinator, "shard_K_" for shard K) ----

// Every version read at an earlier kill against the store now (`now_stored`): the same digests,
// or dropped by retention (older than the oldest kept), never changed or lost. A dropped or lost
// one is compared no more.
void compare_snapshots(const Hashes& now_stored, StoreMemory& memory);

// The versions as the store's process committed them, not as the store lists them (its key order
// would make them increase by construction): `commit_log` is the text of its run directory's
// commits.jsonl, the lines of every incarnation in the order written. The logged versions strictly
// increase within and across incarnations, every one is in the store, every stored version is read
// back with every blob verified, and the store's newest is the final summary's final_version.
// Observations: the logged commits. A stored version no line names (recorded just before a kill,
// the line never written) is counted in the evidence, not a failure.
Check versions_strictly_increasing_and_verified(const std::string& commit_log, const StoreObservation& store,
                                                uint64_t final_version, const std::string& prefix);

// The digests of the versions seen at each kill of the store's process never changed.
Check digests_never_change(const DigestComparisons& digests, const std::string& prefix);

// No update applied twice: per learner and fragment, the steps of every merged contribution (the
// manifests' contributors) add up to no more than the data positions its accepted work spans
// (received_until in the accounting), and received_until never goes back. `summary`: the final
// summary of the store's process, for the duplicates its syncer refused.
Check no_update_applied_twice(const StoreObservation& store, const nlohmann::json& summary, const std::string& prefix);

// ---- the recoveries (`origin_s`: the run clock at the schedule's zero, for the evidence) ----

// Every fault on learners (all but coordinator and shard kills): each victim restarted (or resumed)
// and merged a contribution again within its bound.
std::optional<Check> killed_learners_back_within_bound(const std::vector<Recovery>& recoveries, double origin_s);

// Every injected corruption matched, one to one, to the syncer's refusal of its learner's update as
// malformed, and no malformed refusal left unexplained. An injection is a corrupt recovery, with
// where the coordinator's log stood when the console sent it (detail log_incarnation, log_offset);
// its match is the first refusal of that learner, reason malformed, at or after that byte of that
// incarnation's log. `coordinator_logs`[i]: the log (stderr) of the coordinator's incarnation i.
// Observations: the injections and the unexplained refusals. Nothing when there was neither.
std::optional<Check> corrupted_updates_refused(const std::vector<Recovery>& recoveries,
                                               const std::vector<std::string>& coordinator_logs, double origin_s);

// Every restarted coordinator (shard) resumed from its store's latest version at the kill.
std::optional<Check> coordinator_resumed_from_last_committed(const std::vector<Resume>& resumes);
std::optional<Check> shard_resumed_from_last_committed(const std::vector<Resume>& resumes);

// Every restarted coordinator (shard) committed a new version within `bound_s` of listening.
std::optional<Check> coordinator_next_commit_within_bound(const std::vector<Recovery>& recoveries, double bound_s,
                                                          double origin_s);
std::optional<Check> shard_next_commit_within_bound(const std::vector<Recovery>& recoveries, double bound_s,
                                                    double origin_s);

// Shard 0 committed new versions during every other shard's outage.
std::optional<Check> other_shards_committed_while_one_was_down(const std::vector<ShardOutage>& outages);

// ---- the ledger and the loss ----

// The goodput ledger is honest across coordinator kills: the last coordinator's ledger covers the
// run from the first one's start (within the start-up it may not count), and no part is negative
// (merged work never outruns the compute the learners measured).
Check ledger_covers_the_run(const RunResult& run);

// The held-out loss fell: `initial` (scored as `source` says) -> `final`.
Check loss_below_start(double initial, double final, const std::string& source);

// The DiLoCo run's final loss is within `margin` of the fault-free run's (`reference`).
Check loss_within_margin_of_fault_free(double final, double reference, double margin);

// Every fault scheduled in the faulted runs was carried out (or the drill file allows skips).
Check no_scheduled_fault_skipped(const std::map<DrillVariant, RunResult>& runs, bool allow_skipped);

}  // namespace archipelago::apps::drill

#include "apps/drill/invariants.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "diloco/version_manifest.hpp"

namespace archipelago::apps::drill {
namespace {

using nlohmann::json;

// ledger_covers_the_run: the cluster's time the ledger may not count, at most: the first coordinator's
// start-up before its clock runs (data, model, held-out score) and the last one's final evaluation.
constexpr double kLedgerStartupS = 10;

const char* yes_no(bool b) { return b ? "yes" : "no"; }

std::string resume_evidence(const std::vector<Resume>& resumes, bool named, bool& all_resumed) {
  std::string evidence;
  all_resumed = true;
  for (const auto& r : resumes) {
    all_resumed = all_resumed && r.resumed_from == static_cast<int64_t>(r.store_latest);
    evidence += (evidence.empty() ? "" : "; ") + (named ? r.target + ": " : std::string()) + "store latest " +
                std::to_string(r.store_latest) + " -> resumed from " + std::to_string(r.resumed_from);
  }
  return evidence;
}

// The restarts of `kind` (coordinator | shard) that committed within their bound, and the late ones
// in words (each named by `name_of`).
template <class NameOf>
std::pair<int, std::string> next_commits(const std::vector<Recovery>& recoveries, const std::string& kind,
                                         double origin_s, NameOf name_of, int& restarts) {
  int ok = 0;
  std::string late;
  restarts = 0;
  for (const auto& r : recoveries) {
    if (r.kind != kind) continue;
    restarts += 1;
    if (r.recovered() && r.recovery_s() < r.bound_s) ok += 1;
    else late += " " + name_of(r) + " at " + fixed(r.at_s - origin_s, 1) + " s: " + (r.recovered() ? fixed(r.recovery_s()) + " s" : "never");
  }
  return {ok, late};
}

}  // namespace

void compare_snapshots(const Hashes& now_stored, StoreMemory& memory) {
  const uint64_t oldest = now_stored.empty() ? 0 : now_stored.begin()->first;
  auto& digests = memory.digests;
  for (auto it = memory.snapshots.begin(); it != memory.snapshots.end();) {
    auto found = now_stored.find(it->first);
    if (found == now_stored.end()) {
      (it->first < oldest ? digests.dropped : digests.lost) += 1;
      it = memory.snapshots.erase(it);
      continue;
    }
    (found->second == it->second ? digests.same : digests.changed) += 1;
    ++it;
  }
}

Check versions_strictly_increasing_and_verified(const StoreObservation& store, uint64_t final_version,
                                                const std::string& prefix) {
  const std::string name = prefix + "versions_strictly_increasing_and_verified";
  if (!store.error.empty()) return Check(name, false, 0, store.error);
  const auto& versions = store.versions;
  bool increasing = true;
  int verified = 0;
  std::string failures;
  uint64_t previous = 0;
  for (const auto& v : versions) {
    if (v.version <= previous) increasing = false;
    previous = v.version;
    if (v.verified) {
      verified += 1;
    } else if (failures.size() < 200) {
      failures += " v" + std::to_string(v.version) + ": " + v.failure;
    }
  }
  const bool complete = !versions.empty() && versions.back().version == final_version;
  return Check(name, increasing && verified == static_cast<int>(versions.size()) && complete,
               static_cast<int64_t>(versions.size()),
               std::to_string(versions.size()) + " versions " +
                   (versions.empty() ? "" : std::to_string(versions.front().version) + ".." + std::to_string(versions.back().version)) +
                   ", strictly increasing: " + yes_no(increasing) + ", " + std::to_string(verified) +
                   " read back with every blob verified; newest = the final summary's final_version " +
                   std::to_string(final_version) + ": " + yes_no(complete) + failures);
}

Check digests_never_change(const DigestComparisons& d, const std::string& prefix) {
  return Check(prefix + "digests_never_change", d.changed == 0 && d.lost == 0, d.same + d.changed + d.lost,
               std::to_string(d.same) + " comparisons of a version read at a coordinator kill with the store at the next "
                   "kill or after the run held the same digests, " + std::to_string(d.changed) + " changed, " +
                   std::to_string(d.lost) + " lost" +
                   (d.dropped ? ", " + std::to_string(d.dropped) + " dropped by retention before a comparison" : std::string()));
}

Check no_update_applied_twice(const StoreObservation& store, const json& summary, const std::string& prefix) {
  std::map<std::pair<std::string, int>, int64_t> steps, until;
  bool monotone = true;
  int contributions = 0;
  for (const auto& version : store.versions) {
    auto m = diloco::VersionManifest::decode(version.manifest_json);
    if (!m) continue;  // the store check reports a version it cannot read
    for (const auto& c : m->contributors) {
      steps[{c.learner, c.fragment}] += c.steps;
      contributions += 1;
    }
    if (m->accounting.contains("learners")) {
      for (const auto& [id, r] : m->accounting["learners"].items()) {
        const auto ru = r.value("received_until", std::vector<int64_t>{});
        for (size_t p = 0; p < ru.size(); ++p) {
          auto& u = until[{id, static_cast<int>(p)}];
          if (ru[p] < u) monotone = false;
          u = std::max(u, ru[p]);
        }
      }
    }
  }
  int over = 0;
  std::string worst;
  for (const auto& [key, n] : steps) {
    const auto found = until.find(key);
    const int64_t span = found != until.end() ? found->second : 0;
    if (n > span) {
      over += 1;
      if (worst.empty()) worst = "; " + key.first + " fragment " + std::to_string(key.second) + ": " + std::to_string(n) +
                                 " steps merged > " + std::to_string(span);
    }
  }
  const json by_reason = summary.is_object() ? summary.value("rejected_by_reason", json::object()) : json::object();
  const int64_t duplicates = by_reason.is_object() && by_reason.contains("duplicate") && by_reason["duplicate"].is_number()
                                 ? by_reason["duplicate"].get<int64_t>()
                                 : 0;
  return Check(prefix + "no_update_applied_twice", over == 0 && monotone && !until.empty(), contributions,
               std::to_string(contributions) + " merged contributions over " + std::to_string(steps.size()) +
                   " learner-fragment pairs: merged steps <= their data span in " + std::to_string(steps.size() - over) +
                   "; received_until never decreased: " + yes_no(monotone) + "; duplicates refused by the syncer: " +
                   std::to_string(duplicates) + worst);
}

std::optional<Check> killed_learners_back_within_bound(const std::vector<Recovery>& recoveries, double origin_s) {
  int ok = 0, total = 0;
  std::string late;
  for (const auto& r : recoveries) {
    if (r.kind == "shard" || r.kind == "coordinator") continue;
    total += 1;
    if (r.recovered() && r.recovery_s() <= r.bound_s) ok += 1;
    else late += " " + r.kind + " " + r.target + " at " + fixed(r.at_s - origin_s, 1) + " s: " +
                 (r.recovered() ? fixed(r.recovery_s()) + " s > " + fixed(r.bound_s, 0) + " s" : "never");
  }
  if (total == 0) return std::nullopt;
  return Check("killed_learners_back_within_bound", ok == total, total,
               std::to_string(ok) + " of " + std::to_string(total) +
                   " faults on learners (kill, node SIGKILL, site loss, freeze, slowdown, link cut, corrupted update): every "
                   "victim restarted (or resumed) and merged a contribution again within its bound" + late);
}

std::optional<Check> corrupted_updates_refused(const std::vector<Recovery>& recoveries, double origin_s) {
  int corrupt = 0, refused = 0;
  std::string evidence;
  for (const auto& r : recoveries) {
    if (r.kind != "corrupt") continue;
    corrupt += 1;
    const bool seen = r.detail.contains("malformed_after");
    refused += seen;
    evidence += " " + r.target + " at " + fixed(r.at_s - origin_s, 1) + " s: " +
                (seen ? "malformed " + r.detail.value("malformed_before", json()).dump() + " -> " +
                            r.detail["malformed_after"].dump() + " after " +
                            fixed(r.detail.value("refused_after_s", 0.0)) + " s"
                      : "no refusal seen");
  }
  if (corrupt == 0) return std::nullopt;
  return Check("corrupted_updates_refused", refused == corrupt, corrupt,
               std::to_string(refused) + " of " + std::to_string(corrupt) +
                   " updates sent with a flipped payload bit were refused by the syncer (reason malformed: the chunk's "
                   "checksum);" + evidence);
}

std::optional<Check> coordinator_resumed_from_last_committed(const std::vector<Resume>& resumes) {
  if (resumes.empty()) return std::nullopt;
  bool all_resumed = true;
  std::string evidence = resume_evidence(resumes, false, all_resumed);
  return Check("coordinator_resumed_from_last_committed", all_resumed, static_cast<int64_t>(resumes.size()), evidence);
}

std::optional<Check> shard_resumed_from_last_committed(const std::vector<Resume>& resumes) {
  if (resumes.empty()) return std::nullopt;
  bool all_resumed = true;
  std::string evidence = resume_evidence(resumes, true, all_resumed);
  return Check("shard_resumed_from_last_committed", all_resumed, static_cast<int64_t>(resumes.size()), evidence);
}

std::optional<Check> coordinator_next_commit_within_bound(const std::vector<Recovery>& recoveries, double bound_s,
                                                          double origin_s) {
  int restarts = 0;
  auto [ok, late] = next_commits(recoveries, "coordinator", origin_s, [](const Recovery&) { return std::string("coordinator"); },
                                 restarts);
  if (restarts == 0) return std::nullopt;
  return Check("coordinator_next_commit_within_bound", ok == restarts, restarts,
               std::to_string(ok) + " of " + std::to_string(restarts) + " restarts committed a new version < " +
                   fixed(bound_s, 1) + " s after listening" + late);
}

std::optional<Check> shard_next_commit_within_bound(const std::vector<Recovery>& recoveries, double bound_s,
                                                    double origin_s) {
  int restarts = 0;
  auto [ok, late] = next_commits(recoveries, "shard", origin_s, [](const Recovery& r) { return r.target; }, restarts);
  if (restarts == 0) return std::nullopt;
  return Check("shard_next_commit_within_bound", ok == restarts, restarts,
               std::to_string(ok) + " of " + std::to_string(restarts) + " restarted shards committed a new version < " +
                   fixed(bound_s, 1) + " s after listening" + late);
}

std::optional<Check> other_shards_committed_while_one_was_down(const std::vector<ShardOutage>& outages) {
  if (outages.empty()) return std::nullopt;
  int kept_committing = 0;
  std::string evidence;
  for (const auto& o : outages) {
    kept_committing += o.shard0_after > o.shard0_at_kill ? 1 : 0;
    evidence += (evidence.empty() ? "" : "; ") + o.target + " down " + fixed(o.down_s) + " s: shard 0 " +
                std::to_string(o.shard0_at_kill) + " -> " + std::to_string(o.shard0_after);
  }
  const int n = static_cast<int>(outages.size());
  return Check("other_shards_committed_while_one_was_down", kept_committing == n, n,
               std::to_string(kept_committing) + " of " + std::to_string(n) +
                   " shard outages saw shard 0 commit new versions meanwhile: " + evidence);
}

Check ledger_covers_the_run(const RunResult& run) {
  if (run.allocated_s <= 0) return Check("ledger_covers_the_run", false, 0, "the last coordinator's summary has no ledger");
  auto part = [&](const std::string& name) {
    auto it = run.parts.find(name);
    return it == run.parts.end() ? 0.0 : it->second;
  };
  std::string worst = "merged";
  for (const auto& [name, v] : run.parts) {
    if (v < part(worst)) worst = name;
  }
  const double floor = -0.01 * run.allocated_s;
  const double gap = run.cluster_wall_s - run.ledger_wall_s;
  const bool covers = gap >= -1 && gap <= kLedgerStartupS;
  return Check("ledger_covers_the_run", covers && part(worst) >= floor, static_cast<int64_t>(run.parts.size()),
               "allocated " + fixed(run.allocated_s, 1) + " s = " + fixed(run.ledger_wall_s, 1) + " s per slot; the cluster ran " +
                   fixed(run.cluster_wall_s, 1) + " s from the first coordinator's start (difference " + fixed(gap, 1) +
                   " s, at most " + fixed(kLedgerStartupS, 0) + " s: the first start's model build and the last one's final "
                   "evaluation); " + std::to_string(run.kills) + " kills; smallest part " + worst + " " +
                   fixed(part(worst), 2) + " s (floor " + fixed(floor, 2) + " s)");
}

Check loss_below_start(double initial, double final, const std::string& source) {
  return Check("loss_below_start", std::isfinite(final) && final < initial,
               std::isfinite(initial) && std::isfinite(final) ? 2 : 0,
               "held-out loss " + fixed(initial, 4) + " (" + source + ") -> " + fixed(final, 4));
}

Check loss_within_margin_of_fault_free(double final, double reference, double margin) {
  return Check("loss_within_margin_of_fault_free", std::isfinite(final) && final <= reference * (1 + margin),
               std::isfinite(final) && std::isfinite(reference) ? 2 : 0,
               "final held-out loss " + fixed(final, 4) + " vs fault-free " + fixed(reference, 4) + " (margin " +
                   fixed(100 * margin, 0) + " %: at most " + fixed(reference * (1 + margin), 4) + ")");
}

Check no_scheduled_fault_skipped(const std::map<DrillVariant, RunResult>& runs, bool allow_skipped) {
  std::string evidence, faulted;
  size_t skipped = 0, due = 0;  // due: carried out (each leaves a recovery record) or skipped
  for (const auto& [variant, r] : runs) {
    if (variant == DrillVariant::fault_free) continue;
    const std::string name = drill_variant_name(variant);
    faulted += (faulted.empty() ? "" : " and ") + name;
    due += r.recoveries.size() + r.skipped.size();
    for (const auto& s : r.skipped) {
      ++skipped;
      evidence += (evidence.empty() ? "" : "; ") + name + ": " + s.value("fault", std::string()) + " " +
                  s.value("target", std::string()) + " at " + fixed(s.value("at_s", 0.0), 1) + " s (" +
                  s.value("why", std::string()) + ")";
    }
  }
  return Check("no_scheduled_fault_skipped", skipped == 0 || allow_skipped, static_cast<int64_t>(due),
               skipped == 0 ? "all " + std::to_string(due) + " faults due in the " + faulted + " runs carried out"
                            : std::to_string(skipped) + " of " + std::to_string(due) + " faults due skipped" +
                                  (allow_skipped ? " (allowed: drill.allow_skipped)" : "") + ": " + evidence);
}

}  // namespace archipelago::apps::drill

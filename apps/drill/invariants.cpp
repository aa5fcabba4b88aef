#include "apps/drill/invariants.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
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

// "pid@syncer_started_unix_ms": one process's syncer, whatever its pid is reused for later.
std::string incarnation_of(const json& line) {
  return std::to_string(line["pid"].get<int64_t>()) + "@" + std::to_string(line["syncer_started_unix_ms"].get<int64_t>());
}

// The text after `needle` in `line` up to `end` (npos: to the end); false when `needle` is not there.
bool field_after(const std::string& line, const std::string& needle, const std::string& end, std::string& field,
                 size_t& rest) {
  const size_t at = line.find(needle);
  if (at == std::string::npos) return false;
  const size_t begin = at + needle.size();
  const size_t stop = end.empty() ? std::string::npos : line.find(end, begin);
  if (!end.empty() && stop == std::string::npos) return false;
  field = line.substr(begin, stop == std::string::npos ? std::string::npos : stop - begin);
  rest = stop == std::string::npos ? line.size() : stop + end.size();
  return true;
}

// The reject class of an error logged as "CODE: reason" (actors/syncer_rejects.cpp, reject_reason_of).
std::string reason_of_error(const std::string& error) {
  return error.rfind("non_finite:", 0) == 0 ? "non_finite" : "malformed";
}

}  // namespace

std::vector<LoggedCommit> read_commit_log(const std::string& text) {
  std::vector<LoggedCommit> commits;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    LoggedCommit c;
    c.line = number;
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("version") || !j["version"].is_number_unsigned() || !j.contains("pid") ||
        !j["pid"].is_number_integer() || !j.contains("syncer_started_unix_ms") ||
        !j["syncer_started_unix_ms"].is_number_integer()) {
      c.error = "is no commit: " + line.substr(0, 80);
    } else {
      c.version = j["version"].get<uint64_t>();
      c.incarnation = incarnation_of(j);
    }
    commits.push_back(std::move(c));
  }
  return commits;
}

std::vector<LoggedRefusal> read_refusals(const std::string& log) {
  std::vector<LoggedRefusal> refusals;
  size_t begin = 0;
  while (begin < log.size()) {
    size_t end = log.find('\n', begin);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(begin, end - begin);
    LoggedRefusal r;
    r.offset = static_cast<int64_t>(begin);
    if (!line.empty() && line[0] == '[') r.logged_at = line.substr(1, line.find(']') - 1);
    std::string field;
    size_t rest = 0;
    if (field_after(line, "rejected a fragment update from ", " (fragment ", r.learner, rest)) {
      const size_t close = line.find("): ", rest);
      if (close != std::string::npos) {
        r.reason = line.substr(close + 3);
        refusals.push_back(r);
      }
    } else if (field_after(line, "rejected an update from ", ": ", r.learner, rest)) {
      r.reason = reason_of_error(line.substr(rest));
      refusals.push_back(r);
    } else if (field_after(line, "rejected a message: ", "", field, rest)) {
      r.reason = reason_of_error(field);
      refusals.push_back(r);
    }
    begin = end + 1;
  }
  return refusals;
}

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

Check versions_strictly_increasing_and_verified(const std::string& commit_log, const StoreObservation& store,
                                                uint64_t final_version, const std::string& prefix) {
  const std::string name = prefix + "versions_strictly_increasing_and_verified";
  if (!store.error.empty()) return Check(name, false, 0, store.error);
  std::map<uint64_t, const StoreObservation::Version*> stored;
  for (const auto& v : store.versions) stored[v.version] = &v;

  const auto lines = read_commit_log(commit_log);
  bool increasing = true, all_stored = true;
  std::string failures, ranges;
  size_t incarnations = 0;
  uint64_t previous = 0;
  std::set<uint64_t> logged;
  auto note = [&](const std::string& what) {
    if (failures.size() < 300) failures += "; " + what;
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const LoggedCommit& c = lines[i];
    if (!c.error.empty()) {
      increasing = false;
      note("line " + std::to_string(c.line) + " " + c.error);
      continue;
    }
    const bool first_of_incarnation = i == 0 || c.incarnation != lines[i - 1].incarnation;
    if (first_of_incarnation) {
      incarnations += 1;
      ranges += std::string(ranges.empty() ? "" : ", ") + "v" + std::to_string(c.version);
    }
    const bool last_of_incarnation = i + 1 == lines.size() || c.incarnation != lines[i + 1].incarnation;
    if (last_of_incarnation && !first_of_incarnation) ranges += "..v" + std::to_string(c.version);
    if (c.version <= previous) {
      increasing = false;
      note("incarnation " + std::to_string(incarnations) + " (" + c.incarnation + ") committed v" +
           std::to_string(c.version) + " after v" + std::to_string(previous));
    }
    previous = std::max(previous, c.version);
    logged.insert(c.version);
    if (!stored.count(c.version)) {
      all_stored = false;
      note("v" + std::to_string(c.version) + " logged as committed, not in the store");
    }
  }
  int verified = 0, unlogged = 0;
  for (const auto& v : store.versions) {
    if (v.verified) verified += 1;
    else note("v" + std::to_string(v.version) + ": " + v.failure);
    unlogged += logged.count(v.version) ? 0 : 1;
  }
  const bool complete = !store.versions.empty() && store.versions.back().version == final_version;
  const auto commits = static_cast<int64_t>(lines.size());
  return Check(name, increasing && all_stored && verified == static_cast<int>(store.versions.size()) && complete, commits,
               std::to_string(commits) + " commits in the commit log from " + std::to_string(incarnations) +
                   " incarnation(s) (" + ranges + "), strictly increasing within and across them: " + yes_no(increasing) +
                   "; every logged version in the store: " + yes_no(all_stored) + "; " + std::to_string(verified) + " of " +
                   std::to_string(store.versions.size()) + " stored versions read back with every blob verified, " +
                   std::to_string(unlogged) + " of them in no log line (allowed: the store may record a version just "
                   "before a kill ends its process); newest stored = the final summary's final_version " + std::to_string(final_version) + ": " + yes_no(complete) + failures);
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

std::optional<Check> corrupted_updates_refused(const std::vector<Recovery>& recoveries,
                                               const std::vector<std::string>& coordinator_logs, double origin_s) {
  std::vector<std::vector<LoggedRefusal>> refusals;
  for (const auto& log : coordinator_logs) refusals.push_back(read_refusals(log));
  std::vector<std::vector<bool>> explained;
  for (const auto& in_log : refusals) explained.emplace_back(in_log.size(), false);
  int injected = 0, matched = 0;
  std::string evidence;
  for (const auto& r : recoveries) {
    if (r.kind != "corrupt") continue;
    injected += 1;
    const int incarnation = r.detail.value("log_incarnation", -1);
    const int64_t offset = r.detail.value("log_offset", int64_t{-1});
    evidence += " " + r.target + " at " + fixed(r.at_s - origin_s, 1) + " s: ";
    if (incarnation < 0 || incarnation >= static_cast<int>(refusals.size()) || offset < 0) {
      evidence += "no coordinator log to look in;";
      continue;
    }
    const auto& in_log = refusals[incarnation];
    size_t found = in_log.size();
    for (size_t i = 0; i < in_log.size() && found == in_log.size(); ++i) {
      if (!explained[incarnation][i] && in_log[i].offset >= offset && in_log[i].learner == r.target &&
          in_log[i].reason == "malformed") {
        found = i;
      }
    }
    if (found == in_log.size()) {
      evidence += "no refusal of its update as malformed in coordinator." + std::to_string(incarnation) +
                  "'s log after byte " + std::to_string(offset) + ";";
      continue;
    }
    explained[incarnation][found] = true;
    matched += 1;
    evidence += "refused as malformed, coordinator." + std::to_string(incarnation) + "'s log at " +
                in_log[found].logged_at + " (byte " + std::to_string(in_log[found].offset) + ");";
  }
  int unexplained = 0;
  for (size_t k = 0; k < refusals.size(); ++k) {
    for (size_t i = 0; i < refusals[k].size(); ++i) {
      if (refusals[k][i].reason != "malformed" || explained[k][i]) continue;
      unexplained += 1;
      if (unexplained <= 3) {
        evidence += " a malformed refusal no injected corruption explains: coordinator." + std::to_string(k) + " at " +
                    refusals[k][i].logged_at + " (" + (refusals[k][i].learner.empty() ? "no learner" : refusals[k][i].learner) +
                    ");";
      }
    }
  }
  if (injected == 0 && unexplained == 0) return std::nullopt;
  return Check("corrupted_updates_refused", matched == injected && unexplained == 0, injected + unexplained,
               std::to_string(matched) + " of " + std::to_string(injected) +
                   " updates sent with a flipped payload bit matched, one to one, to the syncer's refusal of that "
                   "learner's update as malformed (its chunk's checksum) after the injection in the same coordinator's "
                   "log; " + std::to_string(unexplained) + " malformed refusals without an injection;" + evidence);
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

#include "apps/drill/runner.hpp"

#include <signal.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "actors/syncer.hpp"
#include "apps/config.hpp"
#include "apps/drill/invariants.hpp"
#include "apps/drill/store_audit.hpp"

namespace archipelago::apps::drill {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A file's text ("" when there is none).
std::string text_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

Runner::Runner(const DrillConfig& c, DrillVariant variant, std::vector<Fault> schedule, fs::path dir, std::string binary,
               double duration_s, std::optional<int> kill_limit, uint64_t seed, const SiteNetwork* net)
    : c_(c), schedule_(std::move(schedule)), duration_s_(duration_s), kill_limit_(kill_limit),
      cluster_(c, std::move(dir), std::move(binary), net, seed, clock_), observer_(clock_, cluster_, result_.loss),
      injector_(c, variant, clock_, cluster_, observer_, result_, [this] { write_progress(); }) {
  result_.variant = variant;
}

void Runner::run() {
  cluster_.prepare();
  clock_.started = std::chrono::steady_clock::now();
  if (!drive()) {
    cluster_.stop_all();
    return;
  }
  result_.driven = true;
  finish();
}

bool Runner::drive() {
  cluster_.start_coordinator();
  observer_.follow_coordinator();
  if (cluster_.await_listening(cluster_.coordinator(), 120) < 0) {
    result_.error = "the coordinator did not start listening:\n" + cluster_.coordinator().err();
    return false;
  }
  for (int k = 1; k < c_.shards; ++k) {
    cluster_.start_shard(k);
    if (cluster_.await_listening(cluster_.shard(k), 120) < 0) {
      result_.error = "syncer shard " + std::to_string(k) + " did not start listening:\n" + cluster_.shard(k).err();
      return false;
    }
  }
  cluster_.start_nodes();
  // Every learner joined and merged once: the drill's clock for faults starts at that commit.
  const int total = c_.nodes * c_.learners_per_node;
  const double deadline = clock_.now() + 180;
  while (true) {
    observer_.read_progress();
    observer_.poll_learners();
    const int contributing = observer_.contributing();
    if (contributing == total) break;
    if (clock_.now() > deadline || !cluster_.coordinator().running()) {
      result_.error = "the cluster did not come up (" + std::to_string(contributing) + " of " + std::to_string(total) +
                      " learners merged):\n" + cluster_.coordinator().err();
      return false;
    }
    sleep_s(0.2);
  }
  result_.origin_s = clock_.now();
  size_t next = 0;
  double next_learners = 0, next_status = 0;
  while (true) {
    const double t = clock_.now() - result_.origin_s;
    observer_.read_progress();
    if (!cluster_.coordinator().running()) {
      result_.error = "the coordinator exited unexpectedly:\n" + cluster_.coordinator().err();
      return false;
    }
    // A killed shard is restarted inside the fault's apply(): here every shard runs.
    for (int k = 1; k < c_.shards; ++k) {
      if (!cluster_.shard(k).running()) {
        result_.error = "syncer shard " + std::to_string(k) + " exited unexpectedly:\n" + cluster_.shard(k).err();
        return false;
      }
    }
    if (clock_.now() >= next_status) {
      observer_.poll_status();
      next_status = clock_.now() + 0.5;
    }
    if (injector_.in_progress()) {
      injector_.advance();
    } else if (injector_.waiting()) {  // a fault due whose victim is not there yet: the next ones wait behind it
      if (!injector_.retry_waiting()) return false;
    } else if (next < schedule_.size() && t >= schedule_[next].at_s && !kills_done()) {
      Fault f = schedule_[next++];
      if (!injector_.apply(f)) return false;
    } else if (clock_.now() >= next_learners) {
      observer_.poll_learners();
      next_learners = clock_.now() + 1.0;
    }
    const bool out_of_time = t >= duration_s_;
    if (out_of_time && injector_.waiting()) injector_.give_up_waiting();
    if ((out_of_time || kills_done()) && !injector_.in_progress() && !injector_.waiting()) break;
    // Out of time with a fault in progress: the run goes on at most until that fault's bound, so the
    // loss comparison stays between runs of about the same length; past it, the recovery failed.
    if ((out_of_time || kills_done()) && injector_.give_up_if_overdue()) break;
    if (t >= duration_s_ + 120) {  // a fault that would not end: stop anyway, its recovery failed
      injector_.abandon();
      break;
    }
    sleep_s(injector_.in_progress() ? 0.1 : 0.05);
  }
  cluster_.undo_faults();
  return true;
}

// What a long run has done so far (a soak stopped early still leaves its count behind).
void Runner::write_progress() {
  std::map<std::string, std::pair<int, int>> counts;  // kind -> (faults, recovered)
  for (const auto& r : result_.recoveries) {
    counts[r.kind].first += 1;
    counts[r.kind].second += r.recovered() ? 1 : 0;
  }
  json recovered = json::object();
  for (const auto& [kind, n] : counts) recovered[kind] = {{"n", n.first}, {"recovered", n.second}};
  std::ofstream(cluster_.dir() / "progress.json")
      << json{{"t_s", clock_.now() - result_.origin_s}, {"kills", result_.kills}, {"faults", result_.recoveries.size()},
              {"by_kind", recovered}, {"version", observer_.last_version()}}.dump()
      << "\n";
}

void Runner::finish() {
  observer_.poll_status();
  result_.wall_s = clock_.now() - result_.origin_s;
  observer_.close_console();
  cluster_.coordinator().signal(SIGTERM);
  for (int k = 1; k < c_.shards; ++k) cluster_.shard(k).signal(SIGTERM);
  const int code = cluster_.coordinator().wait(120);
  shard_summaries_.assign(c_.shards, json::object());
  for (int k = 1; k < c_.shards; ++k) {
    const int shard_code = cluster_.shard(k).wait(120);
    shard_summaries_[k] = summary_of(cluster_.shard(k));
    if (shard_code != 0 || !shard_summaries_[k].is_object()) {
      result_.error = "syncer shard " + std::to_string(k) + " did not stop cleanly (exit " + std::to_string(shard_code) +
                      "):\n" + cluster_.shard(k).err();
      result_.driven = false;
      return;
    }
  }
  for (int i = 0; i < c_.nodes; ++i) cluster_.node(i).wait(30);
  observer_.read_progress();
  result_.final_summary = summary_of(cluster_.coordinator());
  const json& s = result_.final_summary;
  if (code != 0 || !s.is_object()) {
    result_.error = "the coordinator did not stop cleanly (exit " + std::to_string(code) + "):\n" +
                    cluster_.coordinator().err();
    result_.driven = false;
    return;
  }
  // The last coordinator's ledger goes on from the carry of the version it resumed: it covers the
  // whole run, every earlier incarnation and the time no coordinator ran (actors/accounting.hpp).
  // A sharded run's is the sum of its shards' ledgers, each its share of the slots' time.
  result_.cluster_wall_s = clock_.now() - cluster_.first_coordinator_s();
  for (int k = 0; k < c_.shards; ++k) {
    const json& summary = k == 0 ? s : shard_summaries_[k];
    if (!summary.contains("goodput_seconds") || !summary["goodput_seconds"].is_object()) continue;
    for (const auto& [part, v] : summary["goodput_seconds"].items()) {
      if (!v.is_number()) continue;
      result_.parts[part] += v.get<double>();
      result_.allocated_s += v.get<double>();
    }
  }
  result_.ledger_wall_s = result_.allocated_s / (c_.nodes * c_.learners_per_node);
  result_.goodput = result_.allocated_s > 0 ? result_.parts["merged"] / result_.allocated_s : NAN;
  if (s["heldout_loss"].is_number()) result_.final_loss = s["heldout_loss"].get<double>();
  if (s["resumed_from_version"].is_null() && s["initial_heldout_loss"].is_number()) {
    result_.initial_loss = s["initial_heldout_loss"].get<double>();
  }
  if (c_.shards > 1) score_assembled_model();
  check_store(cluster_.dir() / "run" / "store", result_.final_summary, injector_.stores()[0], "");
  for (int k = 1; k < c_.shards; ++k) {
    check_store(cluster_.dir() / ("run-shard-" + std::to_string(k)) / "store", shard_summaries_[k], injector_.stores()[k],
                "shard_" + std::to_string(k) + "_");
  }
  check_recoveries();
  result_.checks.push_back(ledger_covers_the_run(result_));
}

// A sharded run's shards score nothing (each holds only its fragments): the model assembled from
// every shard's latest version and the initial one (version 1 everywhere) are scored by `eval` on
// the first 20 000 bytes of the corpus text.
void Runner::score_assembled_model() {
  auto config = load_config(std::nullopt, "drill.sets", c_.sets);  // validated before the drill started
  if (!config) return;
  const auto& data = config->data;  // "kjv" is cached as <cache_dir>/kjv.txt (training/corpus.hpp)
  const std::string text = data.corpus == "kjv" ? (fs::path(data.cache_dir) / "kjv.txt").string() : data.corpus;
  auto score = [&](const std::string& name, bool initial) -> double {
    std::vector<std::string> a{"eval", "--json", "--text", text, "--max-bytes", "20000"};
    for (int k = 0; k < c_.shards; ++k) {
      a.push_back("--run-dir");
      a.push_back((cluster_.dir() / (k == 0 ? std::string("run") : "run-shard-" + std::to_string(k))).string());
      if (initial) {
        a.push_back("--version");
        a.push_back("1");
      }
    }
    auto eval = spawn(cluster_.binary(), name, a, cluster_.dir(), 0);
    if (eval->wait(300) != 0) return NAN;
    const json j = summary_of(*eval);
    return j.is_object() && j["loss"].is_number() ? j["loss"].get<double>() : NAN;
  };
  result_.final_loss = score("eval-assembled", false);
  result_.initial_loss = score("eval-initial", true);
}

// One store's checks (shard 0's or the only coordinator's: no prefix; shard k's: "shard_k_").
void Runner::check_store(const fs::path& dir, const json& summary, StoreMemory& memory, const std::string& prefix) {
  const uint64_t final_version = summary.value("final_version", uint64_t{0});
  const StoreObservation store = read_store_after_run(dir, memory);
  const std::string commit_log = text_of(dir.parent_path() / actors::kCommitLogFile);
  result_.checks.push_back(versions_strictly_increasing_and_verified(commit_log, store, final_version, prefix));
  if (!store.error.empty()) return;
  if (store.digests) result_.checks.push_back(digests_never_change(*store.digests, prefix));
  result_.checks.push_back(no_update_applied_twice(store, summary, prefix));
}

void Runner::check_recoveries() {
  auto add = [&](std::optional<Check> check) {
    if (check) result_.checks.push_back(std::move(*check));
  };
  const auto& recoveries = result_.recoveries;
  const double origin_s = result_.origin_s;
  add(killed_learners_back_within_bound(recoveries, origin_s));
  std::vector<std::string> coordinator_logs;
  for (int i = 0; i < cluster_.coordinator_incarnations(); ++i) {
    coordinator_logs.push_back(text_of(cluster_.dir() / ("coordinator." + std::to_string(i) + ".err")));
  }
  add(corrupted_updates_refused(recoveries, coordinator_logs, origin_s));
  add(shard_resumed_from_last_committed(injector_.shard_resumes()));
  add(shard_next_commit_within_bound(recoveries, c_.coordinator_bound_s, origin_s));
  add(other_shards_committed_while_one_was_down(injector_.shard_outages()));
  add(coordinator_resumed_from_last_committed(injector_.coordinator_resumes()));
  add(coordinator_next_commit_within_bound(recoveries, c_.coordinator_bound_s, origin_s));
}

void Runner::check_loss(double theta0_loss) {
  if (!result_.driven || !result_.final_summary.is_object()) return;
  std::string source = "θ0 scored by this run's coordinator";
  if (c_.shards > 1) {
    source = "`eval` of version 1 of every shard (θ0), against the model assembled from every shard's latest, on "
             "the corpus's first 20 000 bytes";
  } else if (!result_.final_summary.value("resumed_from_version", json()).is_null() || !std::isfinite(result_.initial_loss)) {
    if (std::isfinite(theta0_loss)) {
      result_.initial_loss = theta0_loss;
      source = "θ0 (same seed) scored by the fault-free run";
    } else if (!result_.loss.empty()) {
      result_.initial_loss = result_.loss.front().loss;
      source = "the first version this run scored (v" + fixed(result_.loss.front().version, 0) + ")";
    }
  }
  result_.checks.push_back(loss_below_start(result_.initial_loss, result_.final_loss, source));
}

RunResult Runner::take() {
  result_.skipped = injector_.skipped();
  return std::move(result_);
}

}  // namespace archipelago::apps::drill

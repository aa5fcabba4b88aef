#include "apps/drill/faults.hpp"

#include <signal.h>

#include <algorithm>
#include <cstdlib>

#include "apps/drill/site_network.hpp"
#include "apps/drill/store_audit.hpp"

namespace archipelago::apps::drill {
namespace {

using nlohmann::json;
using messages::AdminVerb;

// The version a restarted coordinator or shard says it resumed from (-1: it did not say).
int64_t resumed_version(const ChildProcess& process) {
  const std::string err = process.err();
  const std::string needle = "resuming from committed version ";
  auto at = err.find(needle);
  return at == std::string::npos ? -1 : std::atoll(err.c_str() + at + needle.size());
}

}  // namespace

FaultInjector::FaultInjector(const DrillConfig& c, DrillVariant variant, const RunClock& clock, DrillCluster& cluster,
                             ClusterObserver& observer, RunResult& result, std::function<void()> on_recorded)
    : c_(c), variant_(variant), clock_(clock), cluster_(cluster), observer_(observer), result_(result),
      on_recorded_(std::move(on_recorded)), stores_(c.shards) {}

bool FaultInjector::apply(const Fault& scheduled) {
  Fault f = scheduled;
  Tracking t;
  t.r.fault = f.kind;
  t.r.at_s = clock_.now();
  if (waiting_ && waiting_->fault.kind == f.kind && waiting_->fault.target == f.target) {
    t.r.detail["deferred_s"] = clock_.now() - waiting_->since_s;
    t.r.detail["deferred_why"] = waiting_->why;
  }
  observer_.poll_learners();
  auto node_index = [&](const std::string& target) { return std::atoi(target.c_str() + 5); };
  // The scheduled victim is not there: another one takes the fault, and the record says so.
  auto retarget = [&](const std::string& to, const std::string& why) {
    t.r.detail["retargeted_from"] = f.target;
    t.r.detail["retarget_why"] = why;
    f.target = to;
  };
  const bool learner_fault = f.kind == "kill_learner" || f.kind == "slow_learner" || f.kind == "corrupt_update";
  const auto scheduled_row = learner_fault ? observer_.learner(f.target) : json();
  const std::string state = scheduled_row.is_object() ? scheduled_row.value("state", "not known") : "not known";
  if (learner_fault && state != "alive") {
    const std::string to = another_alive_learner(f.target);
    if (to.empty()) return defer(f, "no learner alive (" + f.target + ": " + state + ")");
    retarget(to, f.target + " was " + state);
  }
  if (f.kind == "kill_node" || f.kind == "freeze_node" || f.kind == "slow_node") {
    const int n = node_index(f.target);
    if (f.target.rfind("node-", 0) != 0 || n < 0 || n >= c_.nodes) return skip(f, "no such node");
    const bool there = n >= 0 && n < c_.nodes && cluster_.node_started(n) && cluster_.node(n).running() &&
                       !observer_.learners_on(f.target).empty();
    if (!there) {
      const int to = another_running_node(n);
      if (to < 0) return defer(f, "no node running with learners (" + f.target + " not)");
      retarget("node-" + std::to_string(to), f.target + " was not running with learners");
    }
  }
  t.r.target = f.target;
  // A fault aimed at one learner: it must be alive; its merges so far are the baseline of its recovery.
  auto aim_at_learner = [&](const char* kind, double bound_s) {
    auto row = observer_.learner(f.target);
    if (row.empty() || row.value("state", "") != "alive") return json();
    t.r.kind = kind;
    t.r.bound_s = bound_s;
    t.merged_at[f.target] = row.value("contributions_merged", int64_t{0});
    return row;
  };
  if (f.kind == "kill_learner") {
    auto row = aim_at_learner("learner", c_.learner_bound_s);
    if (row.empty()) return defer(f, f.target + " not alive");
    t.restarts_at[f.target] = row.value("restarts", 0);
    auto answer = stall_and_command(AdminVerb::kill_learner, f.target);
    if (!answer) return skip(f, "console: " + answer.error().reason);
    t.r.at_s = t.r.from_s = clock_.now();
    t.r.evidence = "console 'kill learner " + f.target + "': " + answer->dump();
    result_.kills += 1;
  } else if (f.kind == "slow_learner") {
    if (aim_at_learner("slow_learner", c_.freeze_bound_s).empty()) return defer(f, f.target + " not alive");
    // A synchronous job runs at its slowest member's pace: the ddp-like run slows every learner.
    std::string answers;
    t.throttled = throttle(variant_ == DrillVariant::ddp ? observer_.all_learners() : std::vector<std::string>{f.target},
                           c_.slow_factor, answers);
    if (t.throttled.empty()) return skip(f, "console: " + answers);
    t.r.at_s = clock_.now();
    t.restart_at_s = t.r.at_s + c_.slow_s;
    t.r.evidence = "console 'throttle " + f.target + " " + fixed(c_.slow_factor, 1) + "' for " + fixed(c_.slow_s, 1) +
                   " s: " + answers;
  } else if (f.kind == "corrupt_update") {
    if (aim_at_learner("corrupt", c_.learner_bound_s).empty()) return defer(f, f.target + " not alive");
    t.malformed_at = refused("malformed");
    if (t.malformed_at < 0) return skip(f, "no status from the coordinator");
    // Where the coordinator's log stands: its refusal of the corrupted update can only come later.
    t.r.detail["log_incarnation"] = cluster_.coordinator_incarnations() - 1;
    t.r.detail["log_offset"] = cluster_.coordinator().err().size();
    auto answer = stall_and_command(AdminVerb::corrupt_update, f.target);
    if (!answer) return skip(f, "console: " + answer.error().reason);
    t.r.at_s = t.r.from_s = clock_.now();
    t.r.detail["malformed_before"] = t.malformed_at;
    t.r.evidence = "console 'corrupt " + f.target + "': " + answer->dump();
  } else if (f.kind == "cut_site") {
    const SiteNetwork* net = cluster_.network();
    if (!net) return skip(f, "no network namespaces");
    t.site = std::atoi(f.target.c_str() + 5);
    std::vector<std::string> ids;
    for (int n = t.site; n < c_.nodes; n += c_.sites) {
      auto on = observer_.learners_on("node-" + std::to_string(n));
      ids.insert(ids.end(), on.begin(), on.end());
    }
    if (ids.empty()) return defer(f, "no learners known on " + f.target);
    for (const auto& id : ids) t.merged_at[id] = observer_.learner(id).value("contributions_merged", int64_t{0});
    stall_others(ids);
    if (auto st = net->cut(t.site); !st) {
      release_stall();
      return skip(f, st.error().reason);
    }
    t.r.kind = "cut";
    t.r.bound_s = c_.node_bound_s;
    t.r.at_s = clock_.now();
    t.restart_at_s = t.r.at_s + c_.cut_s;
    t.r.evidence = "ip link set s" + std::to_string(t.site) + " down (the hub's end of " + f.target + "'s veth) for " +
                   fixed(c_.cut_s, 1) + " s";
  } else if (f.kind == "kill_node" || f.kind == "freeze_node" || f.kind == "slow_node" || f.kind == "kill_site") {
    if (f.kind == "kill_site") {
      const int site = std::atoi(f.target.c_str() + 5);
      for (int i = site; i < c_.nodes; i += c_.sites) t.nodes.push_back(i);
    } else {
      t.nodes.push_back(node_index(f.target));
    }
    std::vector<std::string> ids;
    for (int n : t.nodes) {
      if (n < 0 || n >= c_.nodes || !cluster_.node_started(n) || !cluster_.node(n).running()) {
        return defer(f, "node-" + std::to_string(n) + " not running");
      }
      auto on = observer_.learners_on("node-" + std::to_string(n));
      if (on.empty()) return defer(f, "no learners known on node-" + std::to_string(n));
      ids.insert(ids.end(), on.begin(), on.end());
    }
    for (const auto& id : ids) {
      auto row = observer_.learner(id);
      t.merged_at[id] = row.value("contributions_merged", int64_t{0});
      t.joins_at[id] = row.value("joins", 0);
    }
    stall_others(ids);
    auto each = [&](int s) {
      for (int n : t.nodes) cluster_.node(n).signal(s);
    };
    std::string pids;
    for (int n : t.nodes) pids += (pids.empty() ? "" : ", ") + std::to_string(cluster_.node(n).pid());
    if (f.kind == "kill_node" || f.kind == "kill_site") {
      t.r.kind = f.kind == "kill_site" ? "site" : "node";
      t.r.bound_s = c_.node_bound_s;
      each(SIGKILL);
      for (int n : t.nodes) cluster_.node(n).wait(10);
      t.r.at_s = clock_.now();
      t.restart_at_s = t.r.at_s + c_.node_restart_after_s;
      t.r.evidence = "SIGKILL pid " + pids;
      result_.kills += static_cast<int>(t.nodes.size());
    } else if (f.kind == "freeze_node") {
      t.r.kind = "freeze";
      t.r.bound_s = c_.freeze_bound_s;
      each(SIGSTOP);
      t.r.at_s = clock_.now();
      t.restart_at_s = t.r.at_s + c_.freeze_s;
      t.r.evidence = "SIGSTOP pid " + pids + " for " + fixed(c_.freeze_s, 1) + " s";
    } else {
      t.r.kind = "slow";
      t.r.bound_s = c_.freeze_bound_s;
      t.r.at_s = clock_.now();
      t.restart_at_s = t.r.at_s + c_.slow_s;
      t.toggle_at_s = t.r.at_s;
      t.r.evidence = "SIGSTOP/SIGCONT, stopped " + fixed(100 * c_.slow_duty, 0) + " % of every 0.5 s, for " +
                     fixed(c_.slow_s, 1) + " s";
    }
  } else if (f.kind == "kill_shard") {
    return kill_shard(f, t);
  } else if (f.kind == "kill_coordinator") {
    return kill_coordinator(t);
  }
  waiting_.reset();
  say_redirected(t.r);
  pending_ = t;
  return true;
}

void FaultInjector::say_redirected(Recovery& r) {
  std::string said;
  if (r.detail.contains("deferred_s")) {
    said += "deferred " + fixed(r.detail["deferred_s"].get<double>(), 1) + " s (" + r.detail["deferred_why"].get<std::string>() + "); ";
  }
  if (r.detail.contains("retargeted_from")) {
    said += "retargeted from " + r.detail["retargeted_from"].get<std::string>() + " (" +
            r.detail["retarget_why"].get<std::string>() + "); ";
  }
  r.evidence = said + r.evidence;
}

bool FaultInjector::defer(const Fault& f, const std::string& why) {
  if (!waiting_) waiting_ = Waiting{f, clock_.now(), 0, why};
  waiting_->next_try_s = clock_.now() + 0.5;
  return true;
}

bool FaultInjector::retry_waiting() {
  if (!waiting_ || clock_.now() < waiting_->next_try_s) return true;
  return apply(waiting_->fault);
}

void FaultInjector::give_up_waiting() {
  if (!waiting_) return;
  skip(waiting_->fault, "not delivered before the drill's end: waited " + fixed(clock_.now() - waiting_->since_s, 1) +
                            " s (" + waiting_->why + ")");
  waiting_.reset();
}

std::string FaultInjector::another_alive_learner(const std::string& target) const {
  const auto ids = observer_.all_learners();  // in id order
  std::vector<std::string> alive;
  for (const auto& id : ids) {
    const auto row = observer_.learner(id);
    if (id != target && row.is_object() && row.value("state", "") == "alive") alive.push_back(id);
  }
  if (alive.empty()) return "";
  auto after = std::find_if(alive.begin(), alive.end(), [&](const std::string& id) { return id > target; });
  return after == alive.end() ? alive.front() : *after;
}

int FaultInjector::another_running_node(int node) const {
  for (int step = 1; step < c_.nodes; ++step) {
    const int n = ((node < 0 ? 0 : node) + step) % c_.nodes;
    if (cluster_.node_started(n) && cluster_.node(n).running() && !observer_.learners_on("node-" + std::to_string(n)).empty())
      return n;
  }
  return -1;
}

// SIGKILL of the coordinator (shard 0): its store is read as the kill left it, it restarts on its
// run directory after coordinator_restart_after_s, must resume from that latest version and commit
// a new one within coordinator_bound_s of listening.
bool FaultInjector::kill_coordinator(Tracking& t) {
  waiting_.reset();  // the coordinator is always there to kill
  t.r.kind = "coordinator";
  t.r.bound_s = c_.coordinator_bound_s;
  observer_.poll_status();
  stall_others({});
  cluster_.coordinator().signal(SIGKILL);
  cluster_.coordinator().wait(10);
  t.r.at_s = clock_.now();
  result_.kills += 1;
  auto latest = read_store_after_kill(cluster_.dir() / "run" / "store", stores_[0]);
  if (!latest) {
    result_.error = "cannot open the store after the coordinator kill: " + latest.error().reason;
    return false;
  }
  const uint64_t before = *latest;
  t.r.detail["store_latest_at_kill"] = before;
  sleep_s(std::max(0.0, t.r.at_s + c_.coordinator_restart_after_s - clock_.now()));
  const double restarted_at = clock_.now();
  cluster_.start_coordinator();
  observer_.follow_coordinator();
  const double listening = cluster_.await_listening(cluster_.coordinator(), 60);
  if (listening < 0) {
    result_.error = "the restarted coordinator did not listen:\n" + cluster_.coordinator().err();
    return false;
  }
  t.r.from_s = listening;
  t.r.detail["process_start_to_listening_s"] = listening - restarted_at;
  t.r.detail["down_s"] = listening - t.r.at_s;
  result_.coordinator_down_s += listening - t.r.at_s;
  const int64_t resumed = resumed_version(cluster_.coordinator());
  t.r.detail["resumed_from_version"] = resumed;
  coordinator_resumes_.push_back({"coordinator", before, resumed});
  release_stall(30);
  await_next_commit([&] { return observer_.ask(AdminVerb::status, {}, 2); }, cluster_.coordinator(), before, listening, t.r);
  t.r.evidence = "SIGKILL; restart listening " + fixed(listening - t.r.at_s) + " s after the kill; resumed from " +
                 std::to_string(resumed) + " (store latest " + std::to_string(before) + ")";
  say_redirected(t.r);
  record(t.r);
  return true;
}

// SIGKILL of syncer shard k >= 1: its store is read as the kill left it, it restarts on its run
// directory after coordinator_restart_after_s, must resume from that latest version and commit a
// new one within coordinator_bound_s of listening, and shard 0 must have committed meanwhile (the
// other shards' fragments never wait for a dead one). Recorded as a recovery of kind "shard".
bool FaultInjector::kill_shard(const Fault& f, Tracking& t) {
  const int k = std::atoi(f.target.c_str() + 6);  // "shard-K"
  if (f.target.rfind("shard-", 0) != 0 || k < 1 || k >= c_.shards) return skip(f, "no such shard");
  if (!cluster_.shard_started(k) || !cluster_.shard(k).running()) return defer(f, f.target + " not running");
  waiting_.reset();
  ChildProcess& shard = cluster_.shard(k);
  t.r.kind = "shard";
  t.r.bound_s = c_.coordinator_bound_s;
  observer_.read_progress();
  const int64_t others_at_kill = observer_.last_version();
  shard.signal(SIGKILL);
  shard.wait(10);
  t.r.at_s = clock_.now();
  result_.kills += 1;
  auto latest = read_store_after_kill(cluster_.dir() / ("run-shard-" + std::to_string(k)) / "store", stores_[k]);
  if (!latest) {
    result_.error = "cannot open shard " + std::to_string(k) + "'s store after its kill: " + latest.error().reason;
    return false;
  }
  const uint64_t before = *latest;
  t.r.detail["store_latest_at_kill"] = before;
  sleep_s(std::max(0.0, t.r.at_s + c_.coordinator_restart_after_s - clock_.now()));
  const double restarted_at = clock_.now();
  cluster_.start_shard(k);
  ChildProcess& restarted = cluster_.shard(k);
  const double listening = cluster_.await_listening(restarted, 60);
  if (listening < 0) {
    result_.error = "restarted syncer shard " + std::to_string(k) + " did not listen:\n" + restarted.err();
    return false;
  }
  t.r.from_s = listening;
  t.r.detail["process_start_to_listening_s"] = listening - restarted_at;
  t.r.detail["down_s"] = listening - t.r.at_s;
  const int64_t resumed = resumed_version(restarted);
  t.r.detail["resumed_from_version"] = resumed;
  shard_resumes_.push_back({f.target, before, resumed});
  // Shard 0 went on while shard k was down.
  observer_.read_progress();
  const int64_t others_now = observer_.last_version();
  t.r.detail["shard_0_versions_while_down"] = others_now - others_at_kill;
  shard_outages_.push_back({f.target, listening - t.r.at_s, others_at_kill, others_now});
  ConsoleClient shard_console(cluster_.host(), cluster_.admin_token().string());  // the drill's own session is to shard 0
  await_next_commit([&] { return shard_console.call(cluster_.shard_port(k), AdminVerb::status, {}, 2); }, restarted, before,
                    listening, t.r);
  t.r.evidence = "SIGKILL; restart listening " + fixed(listening - t.r.at_s) + " s after the kill; resumed from " +
                 std::to_string(resumed) + " (store latest " + std::to_string(before) + ")";
  say_redirected(t.r);
  record(t.r);
  return true;
}

void FaultInjector::await_next_commit(const std::function<Expected<json>()>& status, ChildProcess& process, uint64_t before,
                                      double listening, Recovery& r) {
  const double deadline = listening + std::max(30.0, 5 * c_.coordinator_bound_s);
  while (clock_.now() < deadline) {
    auto answer = status();
    if (answer && (*answer).value("committed_version", uint64_t{0}) > before) {
      r.recovered_s = clock_.now();
      r.detail["next_version"] = (*answer)["committed_version"];
      return;
    }
    if (!process.running()) return;
    sleep_s(0.05);
  }
}

bool FaultInjector::skip(const Fault& f, const std::string& why) {
  skipped_.push_back({{"at_s", clock_.now()}, {"fault", f.kind}, {"target", f.target}, {"why", why}});
  return true;
}

void FaultInjector::record(const Recovery& r) {
  result_.recoveries.push_back(r);
  on_recorded_();
}

bool FaultInjector::advance() {
  if (!pending_ || !advance(*pending_)) return false;
  release_stall();
  record(pending_->r);
  pending_.reset();
  return true;
}

bool FaultInjector::give_up_if_overdue() {
  if (!pending_ || pending_->restart_at_s >= 0 || clock_.now() <= pending_->r.from_s + pending_->r.bound_s) return false;
  pending_->r.evidence += "; not back within its bound when the run ended";
  result_.recoveries.push_back(pending_->r);
  pending_.reset();
  return true;
}

void FaultInjector::abandon() {
  if (pending_) result_.recoveries.push_back(pending_->r);
  pending_.reset();
}

// Advances the fault in progress; true when it is over (recovered or out of time).
bool FaultInjector::advance(Tracking& t) {
  auto each = [&](int signal) {
    for (int n : t.nodes) cluster_.node(n).signal(signal);
  };
  if ((t.r.kind == "node" || t.r.kind == "site") && t.restart_at_s >= 0 && clock_.now() >= t.restart_at_s) {
    for (int n : t.nodes) cluster_.start_node(n);
    t.r.from_s = clock_.now();
    t.restart_at_s = -1;
  }
  if (t.r.kind == "freeze" && t.restart_at_s >= 0 && clock_.now() >= t.restart_at_s) {
    each(SIGCONT);
    t.r.from_s = clock_.now();
    t.restart_at_s = -1;
  }
  if (t.r.kind == "slow" && t.restart_at_s >= 0) {
    if (clock_.now() >= t.restart_at_s) {
      each(SIGCONT);
      t.r.from_s = clock_.now();
      t.restart_at_s = -1;
    } else if (clock_.now() >= t.toggle_at_s) {
      t.stopped = !t.stopped;
      each(t.stopped ? SIGSTOP : SIGCONT);
      t.toggle_at_s = clock_.now() + 0.5 * (t.stopped ? c_.slow_duty : 1 - c_.slow_duty);
    }
    return false;
  }
  if (t.r.kind == "slow_learner" && t.restart_at_s >= 0 && clock_.now() >= t.restart_at_s) {
    std::string answers;
    throttle(t.throttled, 1, answers);  // one restarted meanwhile is at full speed already
    t.r.from_s = clock_.now();
    t.restart_at_s = -1;
  }
  if (t.r.kind == "cut" && t.restart_at_s >= 0 && clock_.now() >= t.restart_at_s) {
    if (auto st = cluster_.network()->restore(t.site); !st) {
      t.r.evidence += "; restore failed: " + st.error().reason;
      return true;  // never recovered
    }
    t.r.from_s = clock_.now();
    t.restart_at_s = -1;
  }
  if (t.restart_at_s >= 0) return false;
  if (t.r.kind == "corrupt" && t.malformed_at >= 0) {
    // First the syncer's refusal of the corrupted update; then the victim's next merged contribution.
    const int64_t n = refused("malformed");
    if (n > t.malformed_at) {
      t.r.detail["malformed_after"] = n;
      t.r.detail["refused_after_s"] = clock_.now() - t.r.at_s;
      t.malformed_at = -1;
      observer_.poll_learners();
      for (auto& [id, merged] : t.merged_at) merged = observer_.learner(id).value("contributions_merged", merged);
    }
    return clock_.now() > t.r.from_s + std::max(60.0, 3 * t.r.bound_s);
  }
  observer_.poll_learners();
  // Phase 1: the victim's new incarnation (learner: its supervisor's restart; node: a rejoin after
  // the restart); freeze/slow: the same process goes on. Phase 2: its next merged contribution.
  for (const auto& [id, merged] : t.merged_at) {
    if (t.done.count(id)) continue;
    auto row = observer_.learner(id);
    if (row.empty()) continue;
    const bool alive = row.value("state", "") == "alive";
    if (!t.restarted.count(id)) {
      bool back = alive;
      if (t.r.kind == "learner") back = back && row.value("restarts", 0) > t.restarts_at[id];
      if (t.r.kind == "node" || t.r.kind == "site") back = back && row.value("joins", 0) > t.joins_at[id];
      if (back) {
        t.restarted.insert(id);
        t.merged_at[id] = row.value("contributions_merged", int64_t{0});
      }
      continue;
    }
    if (row.value("contributions_merged", int64_t{0}) > t.merged_at[id]) t.done.insert(id);
  }
  if (!t.r.detail.contains("down_s") && t.restarted.size() == t.merged_at.size() &&
      (t.r.kind == "learner" || t.r.kind == "node" || t.r.kind == "site")) {
    t.r.detail["down_s"] = clock_.now() - t.r.at_s;  // the fault -> every victim alive again (the rejoin seen)
    t.rejoined_s = clock_.now();
  }
  if (t.done.size() == t.merged_at.size()) {
    t.r.recovered_s = clock_.now();
    // A node's learners: their rejoin seen -> each merged again (the target: one fragment round).
    if (t.rejoined_s >= 0 && (t.r.kind == "node" || t.r.kind == "site")) {
      t.r.detail["rejoin_to_merged_s"] = t.r.recovered_s - t.rejoined_s;
    }
    return true;
  }
  return clock_.now() > t.r.from_s + std::max(60.0, 3 * t.r.bound_s);
}

void FaultInjector::stall_others(const std::vector<std::string>& victims) {
  if (variant_ != DrillVariant::ddp) return;
  for (const auto& id : observer_.all_learners()) {
    if (std::find(victims.begin(), victims.end(), id) != victims.end()) continue;
    if (observer_.ask(AdminVerb::pause, id)) stalled_.push_back(id);
  }
}

void FaultInjector::release_stall(double patience_s) {
  if (variant_ != DrillVariant::ddp) return;
  const double deadline = clock_.now() + patience_s;
  std::vector<std::string> left = stalled_;
  while (!left.empty()) {
    std::vector<std::string> again;
    for (const auto& id : left) {
      if (!observer_.ask(AdminVerb::resume, id)) again.push_back(id);
    }
    left = again;
    if (left.empty() || clock_.now() >= deadline) break;
    sleep_s(0.05);
  }
  stalled_.clear();
}

Expected<json> FaultInjector::stall_and_command(AdminVerb verb, const std::string& victim) {
  stall_others({victim});
  auto answer = observer_.ask(verb, victim);
  if (!answer) release_stall();
  return answer;
}

std::vector<std::string> FaultInjector::throttle(const std::vector<std::string>& ids, double factor, std::string& answers) {
  std::vector<std::string> done;
  for (const auto& id : ids) {
    auto answer = observer_.ask(AdminVerb::throttle, id, 5, fixed(factor, 3));
    if (answer) done.push_back(id);
    answers += (answers.empty() ? "" : "; ") + id + ": " + (answer ? answer->dump() : answer.error().reason);
  }
  return done;
}

int64_t FaultInjector::refused(const std::string& reason) {
  auto status = observer_.ask(AdminVerb::status, {}, 2);
  if (!status) return -1;
  const json rejected = status->value("rejected", json::object());
  return rejected.is_object() ? rejected.value(reason, int64_t{0}) : int64_t{0};
}

}  // namespace archipelago::apps::drill

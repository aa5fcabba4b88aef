// The faults of one drill run, carried out on its cluster and followed until the cluster is back.
//
// One fault at a time: apply() carries out the next fault of the schedule (on another victim when
// its own is not there, or later when none is; a console refusal is recorded as skipped), advance() follows it phase by phase — the victim's
// new incarnation (a restarted learner, a rejoined node), then its next merged contribution — and
// undoes what has an end (SIGCONT after a freeze, the link up after a cut, full speed after a
// throttle). Coordinator and shard kills are carried out whole inside apply(): kill, read the store
// as the kill left it, restart, wait for the next commit. Each fault ends as one Recovery in the
// run's result. In the ddp-like run every fault also stalls every other learner (console pause)
// until it ends. Owned by the runner (apps/drill/runner.hpp), called from the drill's one thread.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/drill/cluster.hpp"
#include "apps/drill/observations.hpp"
#include "apps/drill/observer.hpp"
#include "apps/drill/schedule.hpp"

namespace archipelago::apps::drill {

class FaultInjector {
 public:
  // Recoveries, kills, the coordinator's down time and fatal errors go to `result`;
  // `on_recorded` runs each time a fault's recovery is recorded (the runner's progress file).
  FaultInjector(const DrillConfig& c, DrillVariant variant, const RunClock& clock, DrillCluster& cluster,
                ClusterObserver& observer, RunResult& result, std::function<void()> on_recorded);

  // Carries out `fault`. A victim that is not there now (a learner restarting, a node being started
  // again) is replaced by another eligible one, the recovery record saying whom it was aimed at and
  // why (detail "retargeted_from"); with none eligible the fault waits (waiting()) and is retried
  // until one is, the record saying how long (detail "deferred_s"). A console refusal is recorded as
  // skipped. False: the run cannot go on (a restarted coordinator or shard did not listen, its store
  // could not be read): result.error says why.
  bool apply(const Fault& fault);
  bool in_progress() const { return pending_.has_value(); }
  // A fault that waits for an eligible victim; retry_waiting() tries it again (every 0.5 s at most).
  bool waiting() const { return waiting_.has_value(); }
  bool retry_waiting();
  // The run is over: a fault still waiting is recorded as skipped, not delivered before the end.
  void give_up_waiting();
  // Advances the fault in progress; true when it ended (recovered or out of time) and was recorded.
  bool advance();
  // The run is over: a fault in progress with nothing left to undo and past its bound is recorded
  // as not back; true if so.
  bool give_up_if_overdue();
  // The run is over for good: a fault in progress is recorded as it stands.
  void abandon();

  const std::vector<nlohmann::json>& skipped() const { return skipped_; }
  // What the kills read of each store: [0] the coordinator's (shard 0's), [k] shard k's.
  std::vector<StoreMemory>& stores() { return stores_; }
  const std::vector<Resume>& coordinator_resumes() const { return coordinator_resumes_; }
  const std::vector<Resume>& shard_resumes() const { return shard_resumes_; }
  const std::vector<ShardOutage>& shard_outages() const { return shard_outages_; }

 private:
  // A fault in progress.
  struct Tracking {
    Recovery r;
    std::map<std::string, int64_t> merged_at;  // learner -> contributions_merged when the phase began
    std::map<std::string, int> joins_at, restarts_at;
    std::set<std::string> restarted;           // learners whose new incarnation was seen
    std::set<std::string> done;
    std::vector<int> nodes;  // the fault's node processes
    double restart_at_s = -1;  // node: when to start it again; freeze/slow: when to SIGCONT; slow learner:
                               // when to end its throttle; cut: when to restore the link
    bool stopped = false;      // slow: currently SIGSTOPped
    double toggle_at_s = 0;
    std::vector<std::string> throttled;  // slow learner: the learners the console throttled
    int64_t malformed_at = -1;           // corrupt: the syncer's malformed refusals before it; -1 once seen
    int site = -1;                       // cut
    double rejoined_s = -1;              // learner, node, site: when every victim was seen back
  };

  bool advance(Tracking& t);
  bool kill_coordinator(Tracking& t);
  bool kill_shard(const Fault& f, Tracking& t);
  bool skip(const Fault& f, const std::string& why);
  // No eligible victim now: `f` waits (its first wait's time and reason are kept across retries).
  bool defer(const Fault& f, const std::string& why);
  // Another learner alive in the last poll, after `target` in id order (wrapping); "" if none.
  std::string another_alive_learner(const std::string& target) const;
  // Another node process running with learners known on it, after `node` (wrapping); -1 if none.
  int another_running_node(int node) const;
  void record(const Recovery& r);
  // Prefixes a recovery's evidence with its deferral and retargeting, when it had either.
  static void say_redirected(Recovery& r);
  // A restarted process's next committed version after `before`, its `status` polled at 50 ms:
  // sets r.recovered_s and r.detail["next_version"] when seen (for at most max(30 s, 5 bounds)).
  void await_next_commit(const std::function<Expected<nlohmann::json>()>& status, ChildProcess& process, uint64_t before,
                         double listening, Recovery& r);

  // ddp-like stall: every learner but the fault's victims takes no steps until they are back.
  void stall_others(const std::vector<std::string>& victims);
  // After a coordinator restart a paused learner can be resumed only once it rejoined: retried.
  void release_stall(double patience_s = 0);
  // A console command aimed at one learner, the others stalled first in the ddp-like run (and
  // released again when the command fails).
  Expected<nlohmann::json> stall_and_command(messages::AdminVerb verb, const std::string& victim);
  // Throttles `ids` to `factor` through the console; the ones it reached.
  std::vector<std::string> throttle(const std::vector<std::string>& ids, double factor, std::string& answers);
  // The syncer's refusals of `reason` so far (status), or -1 when the coordinator did not answer.
  int64_t refused(const std::string& reason);

  const DrillConfig& c_;
  DrillVariant variant_;
  const RunClock& clock_;
  DrillCluster& cluster_;
  ClusterObserver& observer_;
  RunResult& result_;
  std::function<void()> on_recorded_;
  std::optional<Tracking> pending_;
  struct Waiting {
    Fault fault;
    double since_s = 0, next_try_s = 0;
    std::string why;
  };
  std::optional<Waiting> waiting_;
  std::vector<std::string> stalled_;
  std::vector<nlohmann::json> skipped_;
  std::vector<StoreMemory> stores_;
  std::vector<Resume> coordinator_resumes_, shard_resumes_;
  std::vector<ShardOutage> shard_outages_;
};

}  // namespace archipelago::apps::drill

// Recovery after a restart, with real processes (the `archipelago` binary, as tests/multisite
// starts it): a coordinator and two nodes of two learners each train the tiny preset on loopback.
//
//   coordinator: SIGKILL, then a new coordinator process on the same run directory and port; the
//                nodes reconnect by themselves. Timed to the new process's first new committed
//                version (its summary's first_commit_s), from the kill and from the new process's
//                start (fork), with the steps between: kill -> reaped, start -> "listening on".
//   node:        SIGKILL of node-b; once the coordinator declared its learners dead, a new node-b
//                process. Timed from its start to the first merge of its learners' work (the
//                summary's first_merge_after_join_s).
// Run three times by bench_multisite: every process on every core (the coordinator's start competes
// with the four learners for this machine's cores), the same with the learners at the process's own
// priority (runtime.learner_nice = 0), and the coordinator on core 0 with the nodes on the others (as
// on a machine of its own, the way a run across sites places it).
// Every time is CLOCK_MONOTONIC (std::chrono::steady_clock here, monotonic_seconds() in the
// processes), so times taken in different processes compare. Run from one thread.
#pragma once

#include <string>
#include <vector>

namespace multisite_bench {

struct RestartTimes {
  bool ok = false;
  std::string error;  // with the processes' logs when something did not happen in time
  double kill_to_dead_s = -1;
  double coordinator_start_to_listening_s = -1;
  double coordinator_start_to_commit_s = -1;
  double coordinator_kill_to_commit_s = -1;
  double node_start_to_merge_s = -1;
  std::string coordinator_startup;  // the restarted coordinator's own startup timings (its log lines)
};

// `coordinator_cores` and `node_cores`: the CPUs the coordinator and the node processes may run on
// (empty: any). Disjoint sets stand for a coordinator on a machine of its own. `learner_nice`: the
// nodes' runtime.learner_nice.
RestartTimes measure_restarts(const std::vector<int>& coordinator_cores = {}, const std::vector<int>& node_cores = {},
                              int learner_nice = 5);

}  // namespace multisite_bench

// The options of the DiLoCo rules: the syncer's merge and staleness bounds, the failure detector,
// the restart policy and the syncer shards. Plain values filled from config/default.toml's [outer]
// and [runtime] sections (apps/config.cpp); copy freely, from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace archipelago::diloco {

struct SyncerOptions {
  double alpha = 0.5;           // learner merge of a received global fragment: α·local + (1−α)·global
  bool carry_unsent = false;    // instead install θ_G + (θ − θ_ref): keep the steps taken since the last send
  int max_staleness = 4;        // updates of fragment p committed since the learner's base, at most
  int overlap_steps = 2;        // τ: inner steps a fragment's sync may take without stalling anyone
  double grace_gamma = 0.5;     // γ of the adaptive grace window
  double grace_max_s = 2.0;     // upper bound of the grace window
  // sync: a round waits for its last learner at most max(min_wait, factor × the median spread of the
  // recent rounds, first update to last) after its first update, then merges without the rest: a
  // learner that joins, beats and never sends cannot hold every round.
  double sync_round_wait_factor = 4.0;
  double sync_round_min_wait_s = 30.0;
  std::string auth_token = "archipelago-local";  // Join.authToken every learner must present
};

struct DetectorOptions {
  double heartbeat_s = 0.2;     // nominal heartbeat interval of a learner
  double suspect_factor = 3.0;  // timeout = factor · (mean interval + 4 · deviation)
  double min_timeout_s = 2.0;   // never suspect sooner than this
  double max_timeout_s = 30.0;  // a learner silent this long is dead whatever its history says
  double stall_factor = 20.0;   // a beating learner without an inner step for factor · its step time
  double stall_min_s = 30.0;    //   (and at least this long) is reported stalled, not declared dead
};

struct RestartOptions {
  int max_restarts = 5;         // R: restarts within `window_s` before a learner is given up
  double window_s = 60.0;       // T
  double backoff_initial_s = 0.05;  // first restart delay; doubles per recent restart
  double backoff_max_s = 5.0;
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

}  // namespace archipelago::diloco

// A node process of a multi-site run: learners under a local supervisor, connected to a
// coordinator (run/coordinator.hpp) through the cross-site plane (remote/client.hpp; node side
// of remote/remote_protocol.hpp).
//
//             ┌──────────────── backoff (net::Backoff: capped, exponential, jittered) ──────────┐
//             v                                                                                 │
//   disconnected ──dial + proof + Gateway.join accepted──> connected ──────────session ends──────┘
//        │                                                          │
//        └── refused: unauthenticated ──> run() fails               └── stop (coordinator) / SIGTERM:
//                                                                       learners drain and leave ──> done
//
// The first accepted join brings the run's configuration; the node builds data shards and the
// model layout from it and starts its learners (slots [first, first + learners)). Each session
// registers three local facades under the names learners look up (syncer, store, monitor); a
// facade sends what a learner gives it through the session's uplink ShapedLink (the [links]
// bandwidth and latency from this site to the coordinator's) to the plane's link (the session's proxy), and
// the session's watcher delivers the coordinator's replies as that facade. When a session ends,
// its facades end: learners see their syncer down, keep training, and rejoin through the next
// session's facades (which the node asks for the same learner slots). Learners never wait for the
// network; only their updates made while disconnected may be refused as stale.
// Call from one thread; run() returns when every learner has finished.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "remote/remote_protocol.hpp"
#include "actors/runtime_options.hpp"
#include "common/error.hpp"
#include "training/run_summary.hpp"
#include "net/auth.hpp"
#include "training/corpus.hpp"

namespace archipelago::run {

// What a node trains with, derived by the application from the coordinator's configuration.
struct NodeConfig {
  actors::RuntimeOptions runtime;
  std::shared_ptr<const training::Corpus> corpus;
};

// What a node takes from a restarted coordinator whose configuration changed only run-control keys.
struct RunControl {
  std::vector<std::string> keys;  // the keys that changed
  double max_seconds = 0;         // the offered train.max_seconds (0: no limit)
};

struct NodeOptions {
  // The coordinator; of a sharded run, every syncer shard's, shard 0's first (it gives the learner
  // slots). Learners then see one syncer, store and monitor (remote/shard_router.hpp).
  std::vector<remote::HostPort> coordinators;
  std::string name;                            // for logs and link accounting (default: HOST-PID)
  std::string site = "local";
  std::string device = "cpu";                  // reported in the join (train.device)
  int learners = 1;
  std::shared_ptr<const net::Secret> secret;
  remote::TransportOptions transport;
  double give_up_after_s = 0;                  // fail when disconnected this long (0: never)
  // The run's configuration and SentencePiece model ("" for byte-level), as the coordinator sent them.
  std::function<Expected<NodeConfig>(const std::string& config_toml, const std::string& tokenizer_model)> configure;
  // A coordinator that comes back with another configuration (`offered`, against the `running` one):
  // what to take when only run-control keys changed, or conflict naming the key that changes what is
  // trained (the node then stops). Unset: any change is a conflict.
  std::function<Expected<RunControl>(const std::string& running, const std::string& offered)> reconfigure;
};

// What a node's run reports: what every run reports (training::RunSummary: its learner slots, the
// inner steps they computed, wall time, bytes it sent on its links) and what only a node knows. It
// becomes JSON only where it is printed (to_json: --json).
struct NodeSummary : training::RunSummary {
  std::string node, site;
  nlohmann::json coordinator;  // its address, or the shards' addresses (a sharded run)
  int first_learner = 0;
  int64_t restarts = 0;
  int finished = 0, failed = 0;
  int64_t sessions = 0, reconnects = 0;
  nlohmann::json refused;  // messages refused on its links, by reason
  int64_t bytes_received = 0;
  double uplink_bandwidth_mbit = 0, uplink_latency_ms = 0;
  std::string stopped_by;
  nlohmann::json learner_digests;  // per learner and fragment, as last asked while it ran: {version, digest}
  nlohmann::json shards;           // a sharded run: per shard, its link (null otherwise)
  nlohmann::json routed;           // a sharded run: the shard router's counters (null otherwise)
};
nlohmann::json to_json(const NodeSummary& s);

class Node {
 public:
  static Expected<std::unique_ptr<Node>> start(NodeOptions options);
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Errors: refused by the coordinator as unauthenticated (ErrorCode::conflict), a bad
  // configuration from it, or give_up_after_s exceeded (unavailable).
  Expected<NodeSummary> run(const std::function<bool()>& stop_requested,
                               const std::function<void(const nlohmann::json&)>& progress = {});

  struct Impl;

 private:
  explicit Node(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace archipelago::run

// `archipelago node`: a node process hosting learners for a coordinator (run/node.hpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace archipelago::apps {

struct NodeArguments {
  std::string coordinator;             // HOST:PORT; a sharded run: every shard's, comma-separated, shard 0 first
  int learners = 1;
  std::string site = "local";
  std::optional<std::string> name;     // default host:pid
  std::optional<std::string> device;   // overrides train.device of the coordinator's configuration
  std::optional<std::string> token_file;
  std::optional<std::string> config_file;  // local [net] settings (TLS files, timeouts)
  std::vector<std::string> overrides;  // --set: applied locally and on top of the coordinator's configuration
  std::optional<std::string> log_file;
  std::string state_dir;              // learner checkpoints (empty: none)
  double give_up_after_s = 0;
  bool json = false;
  bool insecure_plaintext = false;  // allow plaintext off loopback (the proof and updates in clear)
  bool drill_hooks = false;           // obey corrupt_update (recovery drills only)
};

// 0: finished (budget spent, or the coordinator or a signal stopped it); 2: bad arguments;
// 3: refused by the coordinator (wrong or missing token); 1: any other failure.
int run_node(const NodeArguments& arguments);

}  // namespace archipelago::apps

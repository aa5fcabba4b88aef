// `archipelago train`: one run on this machine, from the embedded default configuration.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace archipelago::apps {

struct TrainArguments {
  std::optional<std::string> config_file;
  std::vector<std::string> overrides;  // --set section.key=value, in order
  std::optional<std::string> engine;   // --engine, overrides train.engine
  std::optional<std::string> device;   // --device, overrides train.device
  std::optional<std::string> corpus;   // --corpus, overrides data.corpus
  std::optional<std::string> init_from;  // --init-from, overrides model.init_from
  std::string run_dir;                 // empty: archipelago-runs/<run-id>
  std::string resume_dir;              // --resume: continue the run in this directory (actors engine)
  bool json = false;                   // print the JSON summary as the last line of stdout
  bool sample = true;                  // a short sample of the final version under the summary (actors engine)
  std::optional<std::string> admin_listen;      // HOST:PORT of the admin console (actors engine; none: off)
  std::optional<std::string> admin_token_file;  // its secret (else $ARCHIPELAGO_ADMIN_TOKEN_FILE)
  std::optional<std::string> metrics_token_file;  // the read-only credential of /metrics off loopback
  std::optional<std::string> metrics_listen;    // HOST:PORT of /metrics and the status page (none: off)
};

// Returns the process exit code: 0 on success, 2 on bad configuration, 1 on a failed run.
int run_train(const TrainArguments& arguments);

}  // namespace archipelago::apps

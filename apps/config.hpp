// The run configuration: the embedded config/default.toml, overlaid by a user file and by
// `--set section.key=value` overrides, validated and mapped onto the training option structs.
//
// Every key must exist in the default file and keep its type (an integer is accepted where a float
// is expected); anything else is rejected with an error naming the key. Pure; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "actors/runtime_options.hpp"
#include "training/options.hpp"
#include "training/tokenizer.hpp"

namespace archipelago::apps {

// [net]: how coordinator and node processes connect (mapped onto remote::TransportOptions).
struct NetOptions {
  double heartbeat_interval_s = 0.5;
  double connection_timeout_s = 3.0;
  double join_timeout_s = 10.0;
  double reconnect_initial_s = 0.2;
  double reconnect_max_s = 5.0;
  bool tls = false;
  std::string tls_certificate, tls_key, tls_ca;
  // The limits at the edge of the cross-site plane (remote/edge.hpp).
  int64_t max_message_mib = 16;
  int64_t max_connections = 256;
  int64_t max_connections_per_address = 16;
  double handshake_timeout_s = 5.0;
  double first_byte_timeout_s = 1.0;  // the door (remote/edge.hpp): before a proof ...
  int64_t max_unauthenticated = 64;
  int64_t pre_auth_kib = 8;
  int64_t max_pending_mib = 256;
  double session_calls_per_s = 1000;   // what one session may send: calls per second ...
  double session_call_burst = 1000;    // ... at once above that rate
  double session_mib_per_s = 256;      // envelope MiB per second ...
  double session_burst_mib = 64;       // ... at once above that rate
  double session_max_delay_s = 2.0;    // a session this far in debt is cut
  double slot_grace_s = 30.0;          // a dropped node's learner slots are held for it this long
};

struct Config {
  training::ModelConfig model;
  training::InnerOptions inner;
  training::OuterOptions outer;
  training::DataOptions data;
  training::RunOptions run;
  // Actor-runtime sections ([outer] extras, [runtime], [faults]); plain structs, no CAF.
  actors::SyncerOptions syncer;
  actors::DetectorOptions detector;
  actors::RestartOptions restart;
  actors::FaultOptions faults;
  int eval_every_versions = 8;
  double eval_interval_s = 30;
  double progress_interval_s = 2.0;
  double drain_timeout_s = 20.0;
  bool store_sync = true;
  int keep_versions = 20;
  int learner_checkpoint_every = 2;
  bool learner_checkpoint_sync = false;
  int learner_nice = 5;
  diloco::Engine engine = diloco::Engine::actors;
  std::string log_level = "info";
  int64_t log_max_file_mib = 64;  // the log file's rotation (common/log.hpp)
  int64_t log_max_files = 4;
  NetOptions net;
  std::string toml;  // the effective configuration, as TOML, for the run directory
};

// The text of config/default.toml compiled into the binary.
const std::string& default_config_text();

// A --config file: its text (nullopt when there is no file) and the name errors give it.
struct ConfigFile {
  std::optional<std::string> text;
  std::string origin = "config";
};
// Reads `path` when given; not_found with the path named when it cannot be read.
Expected<ConfigFile> read_config_file(const std::optional<std::string>& path);

// `file_text`: the contents of --config (nullopt for none); `origin` names it in errors.
Expected<Config> load_config(const std::optional<std::string>& file_text, const std::string& origin,
                             const std::vector<std::string>& overrides);

// The keys a coordinator may change at a restart without changing what is trained: the run's length
// in time (train.max_seconds), evaluation and progress cadence, the store's fsync and retention, every
// [log] key and every [net] key (each process has its own). A node takes them and goes on.
// train.max_tokens is not one: with inner.total_steps = 0 it sets the learning-rate schedule.
const std::vector<std::string>& run_control_keys();
// What `offered` (a restarted coordinator's effective configuration) changes against `running` (the
// one a node trains with): the run-control keys, in order, and its train.max_seconds; conflict naming
// the first other key it changes (added or removed keys too); invalid_argument when either does not
// parse.
struct RunControlChange {
  std::vector<std::string> keys;
  double max_seconds = 0;
};
Expected<RunControlChange> run_control_change(const std::string& running, const std::string& offered);

// The actor runtime's options for a run of `c` in `run_dir`.
actors::RuntimeOptions to_runtime_options(const Config& c, const std::string& run_dir, bool resume);

// A run directory's copy of its SentencePiece tokenizer (<run_dir>/tokenizer.model), written when
// the run starts: the run's tokenizer even after the file data.tokenizer named has moved.
std::string run_tokenizer_path(const std::string& run_dir);
// Keeps the run's SentencePiece model in its directory (nothing for byte-level); conflict when the
// directory already holds a different tokenizer (a run cannot change tokenizer midway), inconsistent
// when its vocabulary is not the model's, invalid_argument when model.init_from's export was made
// with another tokenizer.
Status record_run_tokenizer(const std::string& run_dir, const training::Tokenizer& tokenizer, const Config& config);
// Which syncer shard a run directory belongs to (<run_dir>/shard.json, {"index": I, "count": N};
// none: an unsharded run, 0 of 1). invalid_argument: a damaged file.
Expected<actors::ShardOptions> read_run_shard(const std::string& run_dir);
// Writes shard.json for a run started as shard I of N (nothing for an unsharded run); conflict when
// the directory already belongs to another shard, or to an unsharded run that committed versions.
Status record_run_shard(const std::string& run_dir, int index, int count);
// The --set override that points data.tokenizer at the SentencePiece model in `path`.
std::string tokenizer_override(const std::string& path);

// The options of the run that `run_dir` holds, from the configuration it was started with
// (<run_dir>/config.toml, as `train --resume` reads it, with the run's own tokenizer.model). not_found: no such file; invalid_argument:
// a configuration that does not parse or validate, with the key named.
Expected<actors::RuntimeOptions> stored_run_options(const std::string& run_dir);

}  // namespace archipelago::apps

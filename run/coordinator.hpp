// The coordinator process of a multi-site run: the root supervisor with the checkpoint store,
// failure monitor, syncer and evaluator of a local cluster (run/cluster.hpp), without learners,
// plus the published gateway that admits nodes (remote/gateway.hpp).
//
//   start(): data, model layout, θ0; opens <run_dir>/store. A store with a committed version is
//            resumed from it (the syncer restores it; nothing committed is ever rewritten), an
//            empty one starts at version 1. Spawns the tree and publishes the gateway on
//            listen.host:listen.port (port 0: any free port, see port()).
//   run():   drives the run from the calling thread until train.max_seconds (from this start),
//            train.max_tokens (merged tokens of the whole run) or stop_requested(); then tells
//            every node to stop (their learners send their last updates and leave), commits what
//            arrives within runtime.drain_timeout_s, scores the final committed version and returns
//            the summary (CoordinatorSummary; its JSON keys are listed in README.md, "Across sites").
// The destructor stops every actor and closes the port. Call from one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "remote/remote_protocol.hpp"
#include "actors/runtime_options.hpp"
#include "diloco/ledger.hpp"
#include "common/error.hpp"
#include "net/auth.hpp"
#include "net/sites.hpp"
#include "training/corpus.hpp"
#include "training/run_summary.hpp"

namespace archipelago::run {

struct CoordinatorOptions {
  actors::RuntimeOptions runtime;                      // run_dir must be set; resume is decided by the store
  std::shared_ptr<const net::Secret> secret;   // the join secret (net::load_token)
  std::shared_ptr<const net::Secret> admin_secret;  // the admin console's secret (null: no admin sessions)
  remote::HostPort listen{"127.0.0.1", 0};
  std::string site = "local";                  // this process's site (cross-site accounting, links)
  remote::TransportOptions transport;
  std::string config_toml;                     // the effective configuration, sent to nodes
  std::string tokenizer_model;                 // data.tokenizer's SentencePiece model, sent to nodes ("" bytes)
  std::string topology_toml;                   // [sites] / [links] text, sent to nodes ("" when none)
  std::shared_ptr<const net::SiteTopology> topology;
};

// A learner as the coordinator's syncer last saw it.
struct CoordinatorLearner {
  int64_t joins = 0;
  bool active = false;
  int64_t contributions_merged = 0;
  double first_merge_after_join_s = -1;
  double joined_s = -1;
};

// What a coordinator's run reports: what every run reports (training::RunSummary: mode, learner
// slots, parameters, versions committed as rounds, tokens merged in this process, held-out losses,
// wall time, bytes on the node links) and what only a coordinator knows. It becomes JSON only where
// it is written (to_json: summary.json and --json).
struct CoordinatorSummary : training::RunSummary {
  std::string run_dir;
  int shard = 0, shards = 1;
  std::string listen;  // host:port
  bool tls = false;
  std::string site;
  std::vector<int64_t> fragment_numel;
  std::string codec, downlink_codec;
  int64_t bytes_up = 0, bytes_down = 0;  // measured on the node links: what the nodes sent here, what went to them
  std::vector<int64_t> fragment_commits;
  uint64_t start_version = 0, final_version = 0;
  std::optional<uint64_t> resumed_from_version;
  std::map<std::string, CoordinatorLearner> learner_records;
  double heldout_bits_per_byte = 0;
  uint64_t bytes_cross_site = 0, bytes_links_total = 0;
  nlohmann::json links = nlohmann::json::array();  // per node: bytes each way, messages, its site
  nlohmann::json cross_site_vs_data_parallel;      // null: no tokens merged
  nlohmann::json remote = nlohmann::json::object();  // the gateway's counters (joins, refusals, edge)
  int64_t rejected_updates = 0;
  std::map<std::string, int64_t> rejected_by_reason;
  std::string stopped_by;
  double first_commit_s = -1;  // monotonic: when this process first saw a new committed version
  diloco::Ledger ledger;
};
nlohmann::json to_json(const CoordinatorSummary& s);

class Coordinator {
 public:
  static Expected<std::unique_ptr<Coordinator>> start(CoordinatorOptions options,
                                                      std::shared_ptr<const training::Corpus> corpus);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  uint16_t port() const;
  Expected<CoordinatorSummary> run(const std::function<bool()>& stop_requested,
                                   const std::function<void(const nlohmann::json&)>& progress = {});

  struct Impl;

 private:
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace archipelago::run

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
//            the summary (JSON; the keys are listed in README.md, "Across sites").
// The destructor stops every actor and closes the port. Call from one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "remote/remote_protocol.hpp"
#include "actors/runtime_options.hpp"
#include "common/error.hpp"
#include "net/auth.hpp"
#include "net/sites.hpp"
#include "training/corpus.hpp"

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

class Coordinator {
 public:
  static Expected<std::unique_ptr<Coordinator>> start(CoordinatorOptions options,
                                                      std::shared_ptr<const training::Corpus> corpus);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  uint16_t port() const;
  Expected<nlohmann::json> run(const std::function<bool()>& stop_requested,
                               const std::function<void(const nlohmann::json&)>& progress = {});

  struct Impl;

 private:
  explicit Coordinator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace archipelago::run

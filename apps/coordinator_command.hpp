// `archipelago coordinator` and the pieces `archipelago node` shares with it: the stop signals and
// the [net] / [sites] parts of a configuration.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remote/remote_protocol.hpp"
#include "apps/config.hpp"
#include "net/sites.hpp"

namespace archipelago::apps {

struct CoordinatorArguments {
  std::optional<std::string> config_file;
  std::vector<std::string> overrides;  // --set section.key=value
  std::string listen = "127.0.0.1:4242";
  std::string run_dir;                 // required; the same directory resumes
  std::optional<std::string> token_file;
  std::optional<std::string> admin_token_file;
  std::optional<std::string> metrics_token_file;  // the read-only credential of /metrics off loopback
  std::optional<std::string> metrics_listen;    // HOST:PORT of /metrics and the status page (none: off)  // the console's secret (else $ARCHIPELAGO_ADMIN_TOKEN_FILE; none: no console)
  std::optional<std::string> site;     // default: the [sites] coordinator, else "local"
  int shard = 0, shards = 1;           // this process is syncer shard `shard` of `shards`
  bool json = false;
  bool insecure_plaintext = false;  // allow plaintext off loopback (the proof and updates in clear)
};

// 0: stopped cleanly; 2: bad arguments or configuration; 1: the run failed.
int run_coordinator(const CoordinatorArguments& arguments);

// SIGTERM / SIGINT set a flag instead of killing the process: the commands stop gracefully.
void install_stop_signals();
bool stop_signal_received();

remote::TransportOptions transport_options(const NetOptions& net);

// The [sites]/[links] topology of a configuration file's text: nullptr when it has no [sites].
Expected<std::shared_ptr<const net::SiteTopology>> topology_of(const std::string& text, const std::string& origin);

}  // namespace archipelago::apps

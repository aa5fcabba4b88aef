#include "apps/coordinator_command.hpp"

#include <chrono>
#include <csignal>
#include <future>
#include <thread>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <toml++/toml.h>

#include "run/coordinator.hpp"
#include "apps/metrics_server.hpp"
#include "common/log.hpp"
#include "common/process_age.hpp"
#include "net/auth.hpp"
#include "training/corpus.hpp"

namespace archipelago::apps {
namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t stop_flag = 0;
void on_stop_signal(int) { stop_flag = 1; }

}  // namespace

void install_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

bool stop_signal_received() { return stop_flag != 0; }

remote::TransportOptions transport_options(const NetOptions& net) {
  remote::TransportOptions t;
  t.heartbeat_interval_s = net.heartbeat_interval_s;
  t.connection_timeout_s = net.connection_timeout_s;
  t.join_timeout_s = net.join_timeout_s;
  t.reconnect_initial_s = net.reconnect_initial_s;
  t.reconnect_max_s = net.reconnect_max_s;
  t.tls = net.tls;
  t.tls_certificate = net.tls_certificate;
  t.tls_key = net.tls_key;
  t.tls_ca = net.tls_ca;
  t.limits.max_message_bytes = static_cast<uint64_t>(net.max_message_mib) << 20;
  t.limits.max_connections = static_cast<int>(net.max_connections);
  t.limits.max_connections_per_address = static_cast<int>(net.max_connections_per_address);
  t.limits.handshake_timeout_s = net.handshake_timeout_s;
  t.limits.first_byte_timeout_s = net.first_byte_timeout_s;
  t.limits.max_unauthenticated = static_cast<int>(net.max_unauthenticated);
  t.limits.pre_auth_message_bytes = static_cast<uint64_t>(net.pre_auth_kib) << 10;
  t.limits.max_pending_bytes = static_cast<uint64_t>(net.max_pending_mib) << 20;
  t.limits.session.calls = {net.session_calls_per_s, net.session_call_burst};
  t.limits.session.bytes = {net.session_mib_per_s * (1 << 20), net.session_burst_mib * (1 << 20)};
  t.limits.session.max_delay_s = net.session_max_delay_s;
  t.slot_grace_s = net.slot_grace_s;
  return t;
}

Expected<std::shared_ptr<const net::SiteTopology>> topology_of(const std::string& text, const std::string& origin) {
  try {
    if (!toml::parse(std::string_view(text)).contains("sites")) return std::shared_ptr<const net::SiteTopology>{};
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::invalid_argument, origin + ": " + std::string(e.description()));
  }
  auto topology = net::parse_sites(text, origin);
  if (!topology) return topology.error();
  return std::make_shared<const net::SiteTopology>(std::move(*topology));
}

int run_coordinator(const CoordinatorArguments& arguments) {
  const double at_main_s = process_age_seconds();  // exec, shared libraries and static initializers
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "archipelago coordinator: %s\n", message.c_str());
    return code;
  };
  auto file = read_config_file(arguments.config_file);
  if (!file) return fail(2, file.error().reason);
  const std::optional<std::string>& file_text = file->text;
  const std::string& origin = file->origin;
  auto config = load_config(file_text, origin, arguments.overrides);
  if (!config) return fail(2, "invalid configuration: " + config.error().reason);
  // A restarted coordinator of a run whose tokenizer is trained at start (bpe:N) takes the run's own
  // copy instead of training again: the vocabulary its versions were made with, whatever the cache holds.
  if (!arguments.run_dir.empty() && training::trained_vocabulary(config->data.tokenizer) > 0 &&
      fs::exists(run_tokenizer_path(arguments.run_dir))) {
    auto overrides = arguments.overrides;
    overrides.push_back(tokenizer_override(run_tokenizer_path(arguments.run_dir)));
    config = load_config(file_text, origin, overrides);
    if (!config) return fail(2, "invalid configuration: " + config.error().reason);
  }
  auto topology = topology_of(file_text.value_or(""), origin);
  if (!topology) return fail(2, "invalid [sites]/[links]: " + topology.error().reason);
  std::string site = arguments.site.value_or("");
  if (site.empty()) site = *topology && (*topology)->coordinator() ? (*topology)->coordinator()->name : "local";
  if (*topology && !(*topology)->find(site)) return fail(2, "--site " + site + " is not a site of " + origin);
  auto listen = remote::parse_host_port(arguments.listen);
  if (!listen) return fail(2, "--listen " + listen.error().reason);
  auto secret = net::load_token(arguments.token_file);
  if (!secret) return fail(2, secret.error().reason);
  auto admin_secret = net::load_admin_token(arguments.admin_token_file, false);
  if (!admin_secret) return fail(2, admin_secret.error().reason);
  if (arguments.run_dir.empty()) return fail(2, "--run-dir is required (the same directory resumes the run)");
  if (arguments.shards < 1 || arguments.shard < 0 || arguments.shard >= arguments.shards) {
    return fail(2, "--shard " + std::to_string(arguments.shard) + " of --shards " + std::to_string(arguments.shards) +
                       ": a shard is 0 .. shards-1");
  }
  if (arguments.shards > 1 && !diloco::shardable(config->run.mode)) {
    return fail(2, std::string("syncer shards need train.mode decoupled or async (each fragment commits on its own), not ") +
                       diloco::mode_name(config->run.mode));
  }

  std::error_code ec;
  fs::create_directories(arguments.run_dir, ec);
  if (ec) return fail(1, "cannot create run directory " + arguments.run_dir + ": " + ec.message());
  init_logging({"coordinator", config->log_level, (fs::path(arguments.run_dir) / "coordinator.log").string(),
                static_cast<uint64_t>(config->log_max_file_mib) << 20, static_cast<int>(config->log_max_files)});
  auto log = component_logger("coordinator");
  if (!fs::exists(fs::path(arguments.run_dir) / "config.toml")) {
    std::ofstream(fs::path(arguments.run_dir) / "config.toml") << config->toml;
  }
  const double at_logging_s = process_age_seconds();
  const auto corpus_began = std::chrono::steady_clock::now();
  auto corpus = training::load_corpus(config->data);
  if (!corpus) return fail(1, "corpus: " + corpus.error().reason);
  if (auto recorded = record_run_tokenizer(arguments.run_dir, corpus->tokenizer, *config); !recorded) return fail(2, recorded.error().reason);
  if (auto recorded = record_run_shard(arguments.run_dir, arguments.shard, arguments.shards); !recorded) {
    return fail(2, recorded.error().reason);
  }
  log->info("corpus loaded in {:.3f} s", std::chrono::duration<double>(std::chrono::steady_clock::now() - corpus_began).count());

  run::CoordinatorOptions options;
  options.runtime = to_runtime_options(*config, arguments.run_dir, false);
  options.runtime.shard = {arguments.shard, arguments.shards};
  options.secret = std::make_shared<const net::Secret>(std::move(*secret));
  if (*admin_secret) options.admin_secret = std::make_shared<const net::Secret>(std::move(**admin_secret));
  options.listen = *listen;
  options.site = site;
  options.transport = transport_options(config->net);
  options.transport.insecure_plaintext = arguments.insecure_plaintext;
  options.config_toml = config->toml;
  options.tokenizer_model = corpus->tokenizer.model();
  if (*topology) {
    // Nodes get the topology tables only, never the rest of this file.
    auto table = toml::parse(std::string_view(*file_text));
    toml::table sites;
    sites.insert("sites", *table.get("sites"));
    if (auto* links = table.get("links")) sites.insert("links", *links);
    std::ostringstream out;
    out << sites;
    options.topology_toml = out.str();
  }
  options.topology = *topology;
  std::optional<remote::HostPort> metrics_at;
  if (arguments.metrics_listen) {
    auto parsed = remote::parse_host_port(*arguments.metrics_listen);
    if (!parsed) return fail(2, "--metrics-listen " + parsed.error().reason);
    metrics_at = *parsed;
  }
  auto board = std::make_shared<MetricsBoard>();
  std::unique_ptr<MetricsServer> metrics;
  if (metrics_at) {
    auto reader = net::load_metrics_token(arguments.metrics_token_file, false);
    if (!reader) return fail(2, reader.error().reason);
    auto reader_secret = *reader ? std::make_shared<const net::Secret>(std::move(**reader)) : nullptr;
    auto started = MetricsServer::start(metrics_at->host, metrics_at->port, board, reader_secret, options.admin_secret,
                                         options.secret);
    if (!started) return fail(2, started.error().reason);
    metrics = std::move(*started);
  }
  install_stop_signals();
  auto coordinator = run::Coordinator::start(std::move(options), std::make_shared<const training::Corpus>(std::move(*corpus)));
  if (!coordinator) {
    const auto code = coordinator.error().code;
    return fail(code == ErrorCode::invalid_argument || code == ErrorCode::not_found ? 2 : 1, coordinator.error().reason);
  }
  std::printf("coordinator listening on %s:%u\n", listen->host.c_str(), (*coordinator)->port());
  log->info("startup: listening {:.3f} s after the process started: main at {:.3f} s, configuration and logging by {:.3f} s",
            process_age_seconds(), at_main_s, at_logging_s);
  if (metrics) std::printf("metrics and status page on http://%s:%u/\n", metrics_at->host.c_str(), metrics->port());
  std::fflush(stdout);
  auto summary = (*coordinator)->run(stop_signal_received, [board](const nlohmann::json& p) {
    board->update(p);
    std::printf("progress elapsed_s=%.1f version=%llu tokens=%lld alive=%d nodes=%zu heldout_loss=%s bytes_cross_site=%lld\n",
                p.value("elapsed_s", 0.0), static_cast<unsigned long long>(p.value("version", uint64_t{0})),
                static_cast<long long>(p.value("tokens", int64_t{0})), p.value("alive", 0),
                p.value("nodes", size_t{0}), p["heldout_loss"].is_number() && std::isfinite(p["heldout_loss"].get<double>()) ? p["heldout_loss"].dump().c_str() : "\u2014",
                static_cast<long long>(p.value("bytes_cross_site", int64_t{0})));
    std::fflush(stdout);
  });
  if (!summary) {
    log->error("{}", summary.error().reason);
    return 1;
  }
  // The summary is the run's result: it is written before the actors are stopped. Stopping them is
  // bounded: every committed version is in RocksDB already (which needs no clean close), so a
  // teardown that hangs is reported and cut short instead of keeping the process alive.
  const nlohmann::json summary_json = run::to_json(*summary);
  std::ofstream(fs::path(arguments.run_dir) / "summary.json") << summary_json.dump(2) << "\n";
  auto shown = [](double loss) { return std::isfinite(loss) ? loss : 0.0; };
  std::printf("coordinator stopped (%s): versions %llu -> %llu, held-out loss %.4f -> %.4f, %lld cross-site bytes\n",
              summary->stopped_by.c_str(), static_cast<unsigned long long>(summary->start_version),
              static_cast<unsigned long long>(summary->final_version), shown(summary->initial_heldout_loss),
              shown(summary->heldout_loss), static_cast<long long>(summary->bytes_cross_site));
  if (arguments.json) std::printf("%s\n", summary_json.dump().c_str());
  std::fflush(stdout);
  std::promise<void> stopped;
  std::thread watchdog([done = stopped.get_future(), log]() mutable {
    if (done.wait_for(std::chrono::seconds(30)) == std::future_status::ready) return;
    log->error("the actors did not stop within 30 s of the run's end: exiting without waiting for them");
    log->flush();
    std::fflush(stdout);
    std::_Exit(0);
  });
  coordinator->reset();
  stopped.set_value();
  watchdog.join();
  return 0;
}

}  // namespace archipelago::apps

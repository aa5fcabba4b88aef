#include "apps/node_command.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "actors/authorization.hpp"
#include "run/node.hpp"
#include "apps/config.hpp"
#include "apps/coordinator_command.hpp"
#include "common/files.hpp"
#include "common/log.hpp"
#include "net/auth.hpp"
#include "training/corpus.hpp"

#include <toml++/toml.h>

namespace archipelago::apps {
namespace {

// What a node takes from its coordinator's configuration: the training keys. Never the keys that
// name this machine's files or its network ([net], data.cache_dir) — those stay the node's own —
// and a data.corpus that is a path only where the node names its own copy (a coordinator must not
// make a node read whatever file it names).
// The coordinator's SentencePiece model, written once as <cache_dir>/tokenizer-<hash>.model (this
// node's data cache); the override that points data.tokenizer at it ("bytes" for byte-level).
Expected<std::string> keep_tokenizer(const std::string& cache_dir, const std::string& model) {
  if (model.empty()) return std::string("data.tokenizer=\"bytes\"");
  auto tokenizer = training::Tokenizer::from_model(model, "the coordinator's tokenizer");
  if (!tokenizer) return tokenizer.error();
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  const std::string path = (std::filesystem::path(cache_dir) / ("tokenizer-" + tokenizer->hash() + ".model")).string();
  if (!std::filesystem::exists(path, ec)) {
    if (auto written = write_file_atomically(path, model); !written) return written.error();
  }
  return tokenizer_override(path);
}

Expected<std::string> training_keys(const std::string& coordinator_toml, const Config& local) {
  toml::table table;
  try {
    table = toml::parse(std::string_view(coordinator_toml));
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::invalid_argument, std::string("the coordinator's configuration: ") + std::string(e.description()));
  }
  table.erase("net");
  if (auto* data = table["data"].as_table()) {
    data->erase("cache_dir");
    const auto corpus = (*data)["corpus"].value<std::string>();
    if (corpus && *corpus != "kjv") {
      if (local.data.corpus == "kjv") {
        return make_error(ErrorCode::invalid_argument, "the coordinator trains on a local corpus ('" + *corpus +
                                                           "'): give this node its own copy with --set data.corpus=PATH");
      }
      data->erase("corpus");
    }
  }
  std::ostringstream out;
  out << table;
  return out.str();
}

}  // namespace


int run_node(const NodeArguments& arguments) {
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "archipelago node: %s\n", message.c_str());
    return code;
  };
  auto file = read_config_file(arguments.config_file);
  if (!file) return fail(2, file.error().reason);
  std::vector<std::string> overrides = arguments.overrides;
  if (arguments.device) overrides.push_back("train.device=" + *arguments.device);
  auto local = load_config(file->text, file->origin, overrides);
  if (!local) return fail(2, "invalid configuration: " + local.error().reason);
  std::vector<remote::HostPort> coordinators;
  std::stringstream addresses(arguments.coordinator);
  for (std::string address; std::getline(addresses, address, ',');) {
    auto coordinator = remote::parse_host_port(address);
    if (!coordinator) return fail(2, "--coordinator " + coordinator.error().reason);
    coordinators.push_back(*coordinator);
  }
  if (coordinators.empty()) return fail(2, "--coordinator: no address");
  auto secret = net::load_token(arguments.token_file);
  if (!secret) return fail(2, secret.error().reason);
  init_logging({"node", local->log_level, arguments.log_file.value_or(""),
                static_cast<uint64_t>(local->log_max_file_mib) << 20, static_cast<int>(local->log_max_files)});
  auto log = component_logger("node");
  if (arguments.drill_hooks) {
    actors::set_drill_hooks(true);
    log->warn("drill hooks on: the coordinator's operator may corrupt this node's updates (recovery drills only)");
  }

  run::NodeOptions options;
  options.coordinators = std::move(coordinators);
  options.name = arguments.name.value_or("");
  options.site = arguments.site;
  options.learners = arguments.learners;
  options.device = local->run.device;
  options.secret = std::make_shared<const net::Secret>(std::move(*secret));
  options.transport = transport_options(local->net);
  options.transport.insecure_plaintext = arguments.insecure_plaintext;
  options.give_up_after_s = arguments.give_up_after_s;
  // The run's configuration comes from the coordinator; this node's --set / --device apply on top.
  const std::string state_dir = arguments.state_dir;
  const Config node_local = *local;
  options.configure = [overrides, state_dir, node_local](const std::string& config_toml,
                                                         const std::string& tokenizer_model) -> Expected<run::NodeConfig> {
    auto training = training_keys(config_toml, node_local);
    if (!training) return training.error();
    auto own = overrides;  // this node's files, before its --set (which wins)
    // The run's tokenizer came with its configuration: kept under its content hash in the data cache.
    auto tokenizer = keep_tokenizer(node_local.data.cache_dir, tokenizer_model);
    if (!tokenizer) return tokenizer.error();
    own.insert(own.begin(), *tokenizer);
    own.insert(own.begin(), "data.cache_dir=" + node_local.data.cache_dir);
    if (node_local.data.corpus != "kjv") own.insert(own.begin(), "data.corpus=" + node_local.data.corpus);
    auto config = load_config(*training, "the coordinator's configuration", own);
    if (!config) return config.error();
    auto corpus = training::load_corpus(config->data);
    if (!corpus) return make_error(corpus.error().code, "corpus: " + corpus.error().reason);
    return run::NodeConfig{to_runtime_options(*config, state_dir, false),
                              std::make_shared<const training::Corpus>(std::move(*corpus))};
  };
  options.reconfigure = [](const std::string& running, const std::string& offered) -> Expected<run::RunControl> {
    auto change = run_control_change(running, offered);
    if (!change) return change.error();
    return run::RunControl{std::move(change->keys), change->max_seconds};
  };
  install_stop_signals();
  auto node = run::Node::start(std::move(options));
  if (!node) return fail(2, node.error().reason);
  auto summary = (*node)->run(stop_signal_received, [](const nlohmann::json& p) {
    std::printf("progress elapsed_s=%.1f connected=%s steps=%lld restarts=%d\n", p.value("elapsed_s", 0.0),
                p.value("connected", false) ? "true" : "false", static_cast<long long>(p.value("steps", int64_t{0})),
                p.value("restarts", 0));
    std::fflush(stdout);
  });
  node->reset();
  if (!summary) {
    const bool refused = summary.error().code == ErrorCode::conflict;
    return fail(refused ? 3 : 1, summary.error().reason);
  }
  std::printf("node stopped (%s): %lld steps, %lld bytes sent, %lld received\n", summary->stopped_by.c_str(),
              static_cast<long long>(summary->steps), static_cast<long long>(summary->bytes_sent),
              static_cast<long long>(summary->bytes_received));
  if (arguments.json) std::printf("%s\n", run::to_json(*summary).dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace archipelago::apps

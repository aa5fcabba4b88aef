#include "apps/config.hpp"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "common/files.hpp"
#include "diloco/tunables.hpp"
#include "training/exported_model.hpp"
#include "training/tokenizer.hpp"

namespace archipelago::apps {

extern const char* const kDefaultConfigToml;  // generated from config/default.toml

namespace {

Error config_error(const std::string& key, const std::string& reason) {
  return make_error(ErrorCode::invalid_argument, key + ": " + reason);
}

const char* type_name(toml::node_type type) {
  switch (type) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a number";
    case toml::node_type::boolean: return "true or false";
    case toml::node_type::table: return "a table";
    default: return "a value of another type";
  }
}

// Puts `value` at `key` of `target` if the default has that key with a compatible type.
Status assign(toml::table& target, const toml::table& defaults, const std::string& section,
              const std::string& key, const toml::node& value) {
  const std::string name = section + "." + key;
  const toml::node* expected = defaults.at_path(name).node();
  if (!expected) return config_error(name, "unknown key (see config/default.toml for every key)");
  auto expected_type = expected->type();
  auto type = value.type();
  toml::table* table = target[section].as_table();
  if (expected_type == toml::node_type::floating_point && type == toml::node_type::integer) {
    table->insert_or_assign(key, static_cast<double>(value.as_integer()->get()));
    return {};
  }
  if (expected_type != type) {
    return config_error(name, std::string("expected ") + type_name(expected_type) + ", got " + type_name(type));
  }
  table->insert_or_assign(key, value);
  return {};
}

Status overlay(toml::table& target, const toml::table& defaults, const toml::table& user, const std::string& origin) {
  for (const auto& [section, node] : user) {
    const std::string section_name(section.str());
    if (section_name == "sites" || section_name == "links") continue;  // the topology: net::parse_sites reads it
    if (!defaults.contains(section_name)) return config_error(origin + ": " + section_name, "unknown section");
    const toml::table* entries = node.as_table();
    if (!entries) return config_error(origin + ": " + section_name, "expected a [section] table");
    for (const auto& [key, value] : *entries) {
      auto status = assign(target, defaults, section_name, std::string(key.str()), value);
      if (!status) return make_error(ErrorCode::invalid_argument, origin + ": " + status.error().reason);
    }
  }
  return {};
}

// "section.key=value": the value is parsed as TOML; a bare word where a string is expected is a string.
Status apply_override(toml::table& target, const toml::table& defaults, const std::string& text) {
  auto eq = text.find('=');
  auto dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    return make_error(ErrorCode::invalid_argument, "--set " + text + ": expected section.key=value");
  }
  const std::string section = text.substr(0, dot);
  const std::string key = text.substr(dot + 1, eq - dot - 1);
  const std::string raw = text.substr(eq + 1);
  const toml::node* expected = defaults.at_path(section + "." + key).node();
  if (!expected) return config_error(section + "." + key, "unknown key (see config/default.toml for every key)");
  toml::table parsed;
  try {
    parsed = toml::parse("value = " + raw);
  } catch (const toml::parse_error&) {
    if (!expected->is_string()) return config_error(section + "." + key, "cannot parse '" + raw + "'");
    parsed.insert_or_assign("value", raw);
  }
  if (expected->is_string() && !parsed["value"].is_string()) parsed.insert_or_assign("value", raw);
  return assign(target, defaults, section, key, *parsed.get("value"));
}

struct Reader {
  const toml::table& table;
  std::string get_string(const char* path) const { return table.at_path(path).value<std::string>().value(); }
  int64_t get_int(const char* path) const { return table.at_path(path).value<int64_t>().value(); }
  double get_double(const char* path) const { return table.at_path(path).value<double>().value(); }
  bool get_bool(const char* path) const { return table.at_path(path).value<bool>().value(); }
};

Status one_of(const std::string& key, const std::string& value, std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* option : allowed) {
    if (value == option) return {};
    list += list.empty() ? option : std::string(", ") + option;
  }
  return config_error(key, "'" + value + "' is not one of " + list);
}

Status at_least(const std::string& key, double value, double minimum) {
  if (value >= minimum) return {};
  std::ostringstream out;
  out << "must be >= " << minimum << ", got " << value;
  return config_error(key, out.str());
}

Status at_most(const std::string& key, double value, double maximum) {
  if (value <= maximum) return {};
  std::ostringstream out;
  out << "must be <= " << maximum << ", got " << value;
  return config_error(key, out.str());
}

Status in_open_range(const std::string& key, double value, double low, double high) {
  if (value > low && value < high) return {};
  std::ostringstream out;
  out << "must be in (" << low << ", " << high << "), got " << value;
  return config_error(key, out.str());
}

// A key an operator may also `set` on a live run: the bounds (and codec names) the console's `set`
// checks, from the one table of them (diloco/tunables.hpp), so that a value refused live is refused
// at start too. `learners` bounds outer.quorum.
Status tunable_value(const char* key, double value, int learners) {
  const diloco::Tunable* tunable = diloco::find_tunable(key);
  if (!tunable) return config_error(key, "not a runtime-tunable key (diloco/tunables.hpp)");
  return diloco::check_tunable_value(*tunable, value, learners);
}

Status tunable_choice(const char* key, const std::string& value) {
  const diloco::Tunable* tunable = diloco::find_tunable(key);
  if (!tunable) return config_error(key, "not a runtime-tunable key (diloco/tunables.hpp)");
  return diloco::check_tunable_choice(*tunable, value);
}

// "INDEX:FACTOR[,INDEX:FACTOR...]" (e.g. "2:2,3:4"): learners that are that many times slower.
Expected<std::map<int, double>> parse_slowdowns(const std::string& text, int learners) {
  std::map<int, double> out;
  if (text.empty()) return out;
  auto bad = [&](const std::string& item, const std::string& why) {
    return config_error("faults.slow_learners", "'" + item + "': " + why + " (expected INDEX:FACTOR[,INDEX:FACTOR...])");
  };
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) return bad(item, "no ':'");
    const std::string index_text = item.substr(0, colon), factor_text = item.substr(colon + 1);
    char* end = nullptr;
    const long index = std::strtol(index_text.c_str(), &end, 10);
    if (index_text.empty() || *end != '\0') return bad(item, "the index is not a whole number");
    const double factor = std::strtod(factor_text.c_str(), &end);
    if (factor_text.empty() || *end != '\0' || !std::isfinite(factor)) return bad(item, "the factor is not a number");
    if (index < 0 || index >= learners) return bad(item, "no learner " + index_text + " (train.learners = " + std::to_string(learners) + ")");
    if (factor < 1 || factor > 100) return bad(item, "the factor must be in [1, 100]");
    if (!out.emplace(static_cast<int>(index), factor).second) return bad(item, "learner " + index_text + " is named twice");
  }
  return out;
}

Expected<Config> to_config(const toml::table& table) {
  Reader r{table};
  Config c;
  auto preset = training::model_preset(r.get_string("model.preset"));
  if (!preset) return preset.error();
  c.model = *preset;
  c.model.mlp = r.get_string("model.mlp");
  c.model.z_loss = r.get_double("model.z_loss");
  c.model.init_from = r.get_string("model.init_from");

  auto engine = diloco::parse_engine(r.get_string("train.engine"));
  if (!engine) return config_error("train.engine", engine.error().reason);
  c.engine = *engine;
  auto mode = diloco::parse_mode(r.get_string("train.mode"));
  if (!mode) return config_error("train.mode", mode.error().reason);
  c.run.mode = *mode;
  if (Status runs = diloco::check_engine_mode(c.engine, c.run.mode); !runs) return config_error("train.mode", runs.error().reason);
  c.run.learners = static_cast<int>(r.get_int("train.learners"));
  c.run.inner_steps = static_cast<int>(r.get_int("train.inner_steps"));
  c.run.max_tokens = r.get_int("train.max_tokens");
  c.run.max_seconds = r.get_double("train.max_seconds");
  c.run.seed = static_cast<uint64_t>(r.get_int("train.seed"));
  c.run.device = r.get_string("train.device");
  c.run.threads = static_cast<int>(r.get_int("train.threads"));
  c.run.eval_every = static_cast<int>(r.get_int("train.eval_every"));

  c.inner.lr = r.get_double("inner.lr");
  c.inner.beta1 = r.get_double("inner.beta1");
  c.inner.beta2 = r.get_double("inner.beta2");
  c.inner.weight_decay = r.get_double("inner.weight_decay");
  c.inner.eps = r.get_double("inner.eps");
  c.inner.warmup_steps = static_cast<int>(r.get_int("inner.warmup_steps"));
  c.inner.total_steps = r.get_int("inner.total_steps");
  c.inner.min_lr_fraction = r.get_double("inner.min_lr_fraction");
  c.inner.decay_over_time = r.get_bool("inner.decay_over_time");
  c.inner.clip_norm = r.get_double("inner.clip_norm");
  c.inner.batch_size = static_cast<int>(r.get_int("inner.batch_size"));
  c.inner.precision = r.get_string("inner.precision");

  c.outer.optimizer = r.get_string("outer.optimizer");
  c.outer.lr = r.get_double("outer.lr");
  c.outer.momentum = r.get_double("outer.momentum");
  c.outer.momentum_warmup = static_cast<int>(r.get_int("outer.momentum_warmup"));
  c.outer.merge = r.get_string("outer.merge");
  c.outer.fragments = static_cast<int>(r.get_int("outer.fragments"));
  c.outer.fragment_layout = r.get_string("outer.fragment_layout");
  c.outer.quorum = static_cast<int>(r.get_int("outer.quorum"));
  c.outer.codec = r.get_string("outer.codec");
  c.outer.downlink_codec = r.get_string("outer.downlink_codec");
  c.outer.delayed_every = static_cast<int>(r.get_int("outer.delayed_every"));
  c.outer.merge_threads = static_cast<int>(r.get_int("outer.merge_threads"));
  c.outer.screen = r.get_string("outer.screen");
  c.outer.screen_clip = r.get_double("outer.screen_clip");
  c.outer.screen_refuse = r.get_double("outer.screen_refuse");
  c.outer.screen_probation = r.get_double("outer.screen_probation");
  c.outer.screen_max_ratio = r.get_double("outer.screen_max_ratio");
  c.outer.max_norm_growth = r.get_double("outer.max_norm_growth");

  c.syncer.alpha = r.get_double("outer.alpha");
  const std::string install = r.get_string("outer.install");
  c.syncer.carry_unsent = install == "carry";
  c.syncer.max_staleness = static_cast<int>(r.get_int("outer.max_staleness"));
  c.syncer.overlap_steps = static_cast<int>(r.get_int("outer.overlap_steps"));
  c.syncer.grace_gamma = r.get_double("outer.grace_gamma");
  c.syncer.grace_max_s = r.get_double("outer.grace_max_s");
  c.syncer.sync_round_wait_factor = r.get_double("outer.sync_round_wait_factor");
  c.syncer.sync_round_min_wait_s = r.get_double("outer.sync_round_min_wait_s");
  c.detector.heartbeat_s = r.get_double("runtime.heartbeat_s");
  c.detector.suspect_factor = r.get_double("runtime.suspect_factor");
  c.detector.min_timeout_s = r.get_double("runtime.suspect_min_s");
  c.detector.max_timeout_s = r.get_double("runtime.suspect_max_s");
  c.detector.stall_factor = r.get_double("runtime.stall_factor");
  c.detector.stall_min_s = r.get_double("runtime.stall_min_s");
  c.restart.max_restarts = static_cast<int>(r.get_int("runtime.max_restarts"));
  c.restart.window_s = r.get_double("runtime.restart_window_s");
  c.restart.backoff_initial_s = r.get_double("runtime.backoff_initial_s");
  c.restart.backoff_max_s = r.get_double("runtime.backoff_max_s");
  c.eval_every_versions = static_cast<int>(r.get_int("runtime.eval_every_versions"));
  c.eval_interval_s = r.get_double("runtime.eval_interval_s");
  c.progress_interval_s = r.get_double("runtime.progress_interval_s");
  c.drain_timeout_s = r.get_double("runtime.drain_timeout_s");
  c.store_sync = r.get_bool("runtime.store_sync");
  c.keep_versions = static_cast<int>(r.get_int("runtime.keep_versions"));
  c.learner_checkpoint_every = static_cast<int>(r.get_int("runtime.learner_checkpoint_every"));
  c.learner_checkpoint_sync = r.get_bool("runtime.learner_checkpoint_sync");
  c.learner_nice = static_cast<int>(r.get_int("runtime.learner_nice"));
  c.faults.kill_learner_every_s = r.get_double("faults.kill_learner_every_s");
  c.faults.kill_syncer_at_s = r.get_double("faults.kill_syncer_at_s");
  c.faults.crash_learner_on_start = static_cast<int>(r.get_int("faults.crash_learner_on_start"));
  const int slow_learner = static_cast<int>(r.get_int("faults.slow_learner"));
  const double slow_factor = r.get_double("faults.slow_factor");
  auto slowdowns = parse_slowdowns(r.get_string("faults.slow_learners"), c.run.learners);
  if (!slowdowns) return slowdowns.error();
  c.faults.slowdowns = *slowdowns;
  c.faults.slow_jitter = r.get_double("faults.slow_jitter");
  if (slow_learner >= 0) {
    if (slow_learner >= c.run.learners) {
      return config_error("faults.slow_learner", "learner " + std::to_string(slow_learner) + " does not exist (train.learners = " +
                                                     std::to_string(c.run.learners) + ")");
    }
    if (!c.faults.slowdowns.emplace(slow_learner, slow_factor).second) {
      return config_error("faults.slow_learner", "learner " + std::to_string(slow_learner) + " is also in faults.slow_learners");
    }
  }
  c.faults.drop_outer_gradient = r.get_double("faults.drop_outer_gradient");
  c.faults.nonfinite_learner = static_cast<int>(r.get_int("faults.nonfinite_learner"));
  c.faults.nonfinite_at_step = r.get_int("faults.nonfinite_at_step");
  c.faults.seed = static_cast<uint64_t>(r.get_int("faults.seed"));

  c.data.corpus = r.get_string("data.corpus");
  c.data.tokenizer = r.get_string("data.tokenizer");
  c.data.split = r.get_string("data.split");
  c.data.heldout_fraction = r.get_double("data.heldout_fraction");
  c.data.sharding = r.get_string("data.sharding");
  c.data.chunk_bytes = r.get_int("data.chunk_bytes");
  c.data.cache_dir = r.get_string("data.cache_dir");
  c.data.eval_batches = static_cast<int>(r.get_int("data.eval_batches"));

  c.log_level = r.get_string("log.level");
  c.log_max_file_mib = r.get_int("log.max_file_mib");
  c.log_max_files = r.get_int("log.max_files");
  c.net.heartbeat_interval_s = r.get_double("net.heartbeat_interval_s");
  c.net.connection_timeout_s = r.get_double("net.connection_timeout_s");
  c.net.join_timeout_s = r.get_double("net.join_timeout_s");
  c.net.reconnect_initial_s = r.get_double("net.reconnect_initial_s");
  c.net.reconnect_max_s = r.get_double("net.reconnect_max_s");
  c.net.tls = r.get_bool("net.tls");
  c.net.tls_certificate = r.get_string("net.tls_certificate");
  c.net.tls_key = r.get_string("net.tls_key");
  c.net.tls_ca = r.get_string("net.tls_ca");
  c.net.max_message_mib = r.get_int("net.max_message_mib");
  c.net.max_connections = r.get_int("net.max_connections");
  c.net.max_connections_per_address = r.get_int("net.max_connections_per_address");
  c.net.handshake_timeout_s = r.get_double("net.handshake_timeout_s");
  c.net.first_byte_timeout_s = r.get_double("net.first_byte_timeout_s");
  c.net.max_unauthenticated = r.get_int("net.max_unauthenticated");
  c.net.pre_auth_kib = r.get_int("net.pre_auth_kib");
  c.net.max_pending_mib = r.get_int("net.max_pending_mib");
  c.net.session_calls_per_s = r.get_double("net.session_calls_per_s");
  c.net.session_call_burst = r.get_double("net.session_call_burst");
  c.net.session_mib_per_s = r.get_double("net.session_mib_per_s");
  c.net.session_burst_mib = r.get_double("net.session_burst_mib");
  c.net.session_max_delay_s = r.get_double("net.session_max_delay_s");
  c.net.slot_grace_s = r.get_double("net.slot_grace_s");

  for (Status status : {
           one_of("model.mlp", c.model.mlp, {"swiglu", "gelu"}),
           at_least("model.z_loss", c.model.z_loss, 0),
           at_least("train.learners", c.run.learners, 1),
           tunable_value("train.inner_steps", c.run.inner_steps, c.run.learners),
           at_least("train.max_tokens", static_cast<double>(c.run.max_tokens), 0),
           at_least("train.max_seconds", c.run.max_seconds, 0),
           at_least("train.seed", static_cast<double>(r.get_int("train.seed")), 0),
           at_least("train.threads", c.run.threads, 0),
           at_least("train.eval_every", c.run.eval_every, 1),
           at_least("inner.lr", c.inner.lr, 0),
           in_open_range("inner.beta1", c.inner.beta1, 0, 1),
           in_open_range("inner.beta2", c.inner.beta2, 0, 1),
           at_least("inner.weight_decay", c.inner.weight_decay, 0),
           at_least("inner.eps", c.inner.eps, 0),
           at_least("inner.warmup_steps", c.inner.warmup_steps, 0),
           at_least("inner.total_steps", static_cast<double>(c.inner.total_steps), 0),
           in_open_range("inner.min_lr_fraction", c.inner.min_lr_fraction, -1e-12, 1 + 1e-12),
           at_least("inner.clip_norm", c.inner.clip_norm, 0),
           at_least("inner.batch_size", c.inner.batch_size, 1),
           one_of("inner.precision", c.inner.precision, {"auto", "fp32", "bf16"}),
           one_of("outer.optimizer", c.outer.optimizer,
                  {"auto", "nesterov", "per_commit_nesterov", "delayed_nesterov", "memoryless"}),
           tunable_value("outer.lr", c.outer.lr, c.run.learners),
           tunable_value("outer.momentum", c.outer.momentum, c.run.learners),
           at_least("outer.momentum_warmup", c.outer.momentum_warmup, 0),
           one_of("outer.merge", c.outer.merge, {"mean", "token_weighted", "rda"}),
           at_least("outer.fragments", c.outer.fragments, 1),
           one_of("outer.fragment_layout", c.outer.fragment_layout, {"balanced", "strided"}),
           tunable_value("outer.quorum", c.outer.quorum, c.run.learners),
           tunable_choice("outer.codec", c.outer.codec),
           tunable_choice("outer.downlink_codec", c.outer.downlink_codec),
           at_least("outer.delayed_every", c.outer.delayed_every, 1),
           in_open_range("outer.merge_threads", c.outer.merge_threads, -1, 65),
           one_of("outer.screen", c.outer.screen, {"none", "clip", "refuse"}),
           at_least("outer.screen_clip", c.outer.screen_clip, 1),
           at_least("outer.screen_refuse", c.outer.screen_refuse, c.outer.screen_clip),
           at_least("outer.screen_probation", c.outer.screen_probation, 1),
           in_open_range("outer.screen_max_ratio", c.outer.screen_max_ratio, 0, 1e6),
           at_least("outer.max_norm_growth", c.outer.max_norm_growth, 1),
           in_open_range("outer.alpha", c.syncer.alpha, -1e-12, 1),
           one_of("outer.install", install, {"mix", "carry"}),
           tunable_value("outer.max_staleness", c.syncer.max_staleness, c.run.learners),
           at_least("outer.overlap_steps", c.syncer.overlap_steps, 1),
           at_least("outer.sync_round_wait_factor", c.syncer.sync_round_wait_factor, 1),
           in_open_range("outer.sync_round_min_wait_s", c.syncer.sync_round_min_wait_s, 0, 86400),
           tunable_value("outer.grace_gamma", c.syncer.grace_gamma, c.run.learners),
           tunable_value("outer.grace_max_s", c.syncer.grace_max_s, c.run.learners),
           in_open_range("runtime.heartbeat_s", c.detector.heartbeat_s, 0, 60),
           at_least("runtime.suspect_factor", c.detector.suspect_factor, 1),
           in_open_range("runtime.suspect_min_s", c.detector.min_timeout_s, 0, 3600),
           at_least("runtime.suspect_max_s", c.detector.max_timeout_s, c.detector.min_timeout_s),
           at_least("runtime.stall_factor", c.detector.stall_factor, 1),
           at_least("runtime.stall_min_s", c.detector.stall_min_s, 0),
           at_least("runtime.max_restarts", c.restart.max_restarts, 0),
           in_open_range("runtime.restart_window_s", c.restart.window_s, 0, 1e9),
           at_least("runtime.backoff_initial_s", c.restart.backoff_initial_s, 0),
           at_least("runtime.backoff_max_s", c.restart.backoff_max_s, c.restart.backoff_initial_s),
           at_least("runtime.eval_every_versions", c.eval_every_versions, 1),
           at_least("runtime.eval_interval_s", c.eval_interval_s, 0),
           in_open_range("runtime.progress_interval_s", c.progress_interval_s, 0, 3600),
           at_least("runtime.drain_timeout_s", c.drain_timeout_s, 0),
           at_least("runtime.keep_versions", c.keep_versions, 0),
           at_least("runtime.learner_checkpoint_every", c.learner_checkpoint_every, 0),
           at_least("runtime.learner_nice", c.learner_nice, 0),
           at_most("runtime.learner_nice", c.learner_nice, 19),
           at_least("faults.kill_learner_every_s", c.faults.kill_learner_every_s, 0),
           at_least("faults.kill_syncer_at_s", c.faults.kill_syncer_at_s, 0),
           at_least("faults.crash_learner_on_start", c.faults.crash_learner_on_start, -1),
           at_least("faults.slow_learner", slow_learner, -1),
           at_least("faults.slow_factor", slow_factor, 1),
           at_least("faults.slow_jitter", c.faults.slow_jitter, 0),
           at_most("faults.slow_jitter", c.faults.slow_jitter, 1),
           in_open_range("faults.drop_outer_gradient", c.faults.drop_outer_gradient, -1e-12, 1),
           at_least("faults.nonfinite_learner", c.faults.nonfinite_learner, -1),
           at_least("faults.nonfinite_at_step", static_cast<double>(c.faults.nonfinite_at_step), 0),
           at_least("faults.seed", static_cast<double>(r.get_int("faults.seed")), 0),
           one_of("data.split", c.data.split, {"tail", "documents"}),
           in_open_range("data.heldout_fraction", c.data.heldout_fraction, 0, 1),
           one_of("data.sharding", c.data.sharding, {"iid", "noniid"}),
           at_least("data.chunk_bytes", static_cast<double>(c.data.chunk_bytes), 1),
           at_least("data.eval_batches", c.data.eval_batches, 1),
           one_of("log.level", c.log_level, {"trace", "debug", "info", "warn", "error", "off"}),
           at_least("log.max_file_mib", static_cast<double>(c.log_max_file_mib), 1),
           at_least("log.max_files", static_cast<double>(c.log_max_files), 1),
           at_most("log.max_files", static_cast<double>(c.log_max_files), 200000),
           in_open_range("net.heartbeat_interval_s", c.net.heartbeat_interval_s, 0, 3600),
           at_least("net.connection_timeout_s", c.net.connection_timeout_s, c.net.heartbeat_interval_s),
           in_open_range("net.join_timeout_s", c.net.join_timeout_s, 0, 3600),
           in_open_range("net.reconnect_initial_s", c.net.reconnect_initial_s, 0, 3600),
           at_least("net.reconnect_max_s", c.net.reconnect_max_s, c.net.reconnect_initial_s),
           in_open_range("net.max_message_mib", static_cast<double>(c.net.max_message_mib), 1, 4096),
           at_least("net.max_connections", static_cast<double>(c.net.max_connections), 1),
           at_least("net.max_connections_per_address", static_cast<double>(c.net.max_connections_per_address), 1),
           in_open_range("net.handshake_timeout_s", c.net.handshake_timeout_s, 0, 3600),
           in_open_range("net.first_byte_timeout_s", c.net.first_byte_timeout_s, 0, 3600),
           at_least("net.max_unauthenticated", static_cast<double>(c.net.max_unauthenticated), 1),
           at_most("net.max_unauthenticated", static_cast<double>(c.net.max_unauthenticated),
                   static_cast<double>(c.net.max_connections)),
           at_least("net.pre_auth_kib", static_cast<double>(c.net.pre_auth_kib), 1),
           at_most("net.pre_auth_kib", static_cast<double>(c.net.pre_auth_kib), 1024.0 * c.net.max_message_mib),
           at_least("net.max_pending_mib", static_cast<double>(c.net.max_pending_mib), c.net.max_message_mib),
           in_open_range("net.session_calls_per_s", c.net.session_calls_per_s, 0, 1e9),
           at_least("net.session_call_burst", c.net.session_call_burst, 1),
           in_open_range("net.session_mib_per_s", c.net.session_mib_per_s, 0, 1e6),
           at_least("net.session_burst_mib", c.net.session_burst_mib, static_cast<double>(c.net.max_message_mib)),
           in_open_range("net.session_max_delay_s", c.net.session_max_delay_s, 0, 3600),
           at_least("net.slot_grace_s", c.net.slot_grace_s, 0),
       }) {
    if (!status) return status.error();
  }
  // outer.optimizer means what it says in the run's mode, or the run does not start.
  if (auto rule = diloco::outer_rule(c.run.mode, c.outer.optimizer); !rule) {
    return config_error("outer.optimizer", rule.error().reason);
  }
  if (c.engine == diloco::Engine::reference && c.outer.optimizer != "auto" && c.outer.optimizer != "nesterov") {
    return config_error("outer.optimizer", "the reference engine's outer optimizer is Nesterov (auto or nesterov)");
  }
  if (c.model.d_model % c.model.heads != 0) return config_error("model.preset", "d_model not divisible by heads");
  // The model's vocabulary is the tokenizer's: a SentencePiece file is read (and must parse) here.
  auto vocab = training::tokenizer_vocabulary(c.data.tokenizer);
  if (!vocab) return vocab.error();
  c.model.vocab = *vocab;
  if (c.faults.drop_outer_gradient > 0 && (c.engine != diloco::Engine::reference || c.run.mode != diloco::Mode::sync)) {
    return config_error("faults.drop_outer_gradient",
                        "only the reference engine's sync mode drops pseudo-gradients (train.engine = reference, "
                        "train.mode = sync); the actor runtime's learners fail for real (faults.kill_learner_every_s)");
  }
  std::ostringstream out;
  out << table;
  c.toml = out.str();
  return c;
}

}  // namespace

actors::RuntimeOptions to_runtime_options(const Config& c, const std::string& run_dir, bool resume) {
  actors::RuntimeOptions o;
  o.setup = training::ReferenceSetup{c.model, c.inner, c.outer, c.data, c.run};
  o.syncer.alpha = c.syncer.alpha;
  o.syncer.carry_unsent = c.syncer.carry_unsent;
  o.syncer.max_staleness = c.syncer.max_staleness;
  o.syncer.overlap_steps = c.syncer.overlap_steps;
  o.syncer.grace_gamma = c.syncer.grace_gamma;
  o.syncer.grace_max_s = c.syncer.grace_max_s;
  o.syncer.sync_round_wait_factor = c.syncer.sync_round_wait_factor;
  o.syncer.sync_round_min_wait_s = c.syncer.sync_round_min_wait_s;
  o.detector = c.detector;
  o.restart = c.restart;
  o.faults = c.faults;
  o.eval_every_versions = c.eval_every_versions;
  o.eval_interval_s = c.eval_interval_s;
  o.progress_interval_s = c.progress_interval_s;
  o.drain_timeout_s = c.drain_timeout_s;
  o.store_sync = c.store_sync;
  o.keep_versions = static_cast<uint32_t>(c.keep_versions);
  o.learner_checkpoint_every = c.learner_checkpoint_every;
  o.learner_checkpoint_sync = c.learner_checkpoint_sync;
  o.learner_nice = c.learner_nice;
  o.run_dir = run_dir;
  o.resume = resume;
  return o;
}

const std::string& default_config_text() {
  static const std::string text(kDefaultConfigToml);
  return text;
}

Expected<ConfigFile> read_config_file(const std::optional<std::string>& path) {
  ConfigFile file;
  if (!path) return file;
  std::ifstream in(*path, std::ios::binary);
  if (!in) return make_error(ErrorCode::not_found, "cannot read config file " + *path);
  std::ostringstream out;
  out << in.rdbuf();
  file.text = out.str();
  file.origin = *path;
  return file;
}

std::string tokenizer_override(const std::string& path) {
  // A TOML literal string: no escapes, so any path without a single quote or newline is taken as is.
  return "data.tokenizer='spm:" + path + "'";
}

std::string run_tokenizer_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / "tokenizer.model").string();
}

Status record_run_tokenizer(const std::string& run_dir, const training::Tokenizer& tokenizer, const Config& config) {
  namespace fs = std::filesystem;
  if (tokenizer.vocab() != config.model.vocab) {
    return make_error(ErrorCode::inconsistent, "the tokenizer has " + std::to_string(tokenizer.vocab()) +
                                                   " pieces, the model's vocabulary " + std::to_string(config.model.vocab));
  }
  if (!config.model.init_from.empty()) {
    // Weights of another vocabulary of the same size would load: the export's tokenizer must be this run's.
    auto exported = training::read_export(config.model.init_from);
    if (!exported) return make_error(ErrorCode::invalid_argument, "model.init_from: " + exported.error().reason);
    if (exported->tokenizer.hash() != tokenizer.hash()) {
      return make_error(ErrorCode::invalid_argument, "model.init_from: the export's tokenizer is " +
                                                         exported->tokenizer.hash() + ", this run's " + tokenizer.hash());
    }
  }
  const std::string path = run_tokenizer_path(run_dir);
  std::error_code ec;
  if (fs::exists(path, ec)) {
    auto recorded = training::Tokenizer::load("spm:" + path);
    if (!recorded) return recorded.error();
    if (recorded->hash() != tokenizer.hash()) {
      return make_error(ErrorCode::conflict, "the run in " + run_dir + " was started with tokenizer " + recorded->hash() +
                                                 "; data.tokenizer is " + tokenizer.hash());
    }
    return {};
  }
  if (tokenizer.byte_level()) return {};
  return write_file_atomically(path, tokenizer.model());
}

Expected<actors::ShardOptions> read_run_shard(const std::string& run_dir) {
  const auto path = std::filesystem::path(run_dir) / "shard.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return actors::ShardOptions{};
  auto text = read_whole_file(path.string());
  if (!text) return text.error();
  auto j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("index") || !j.contains("count") || !j["index"].is_number_integer() ||
      !j["count"].is_number_integer() || j["count"].get<int>() < 1 || j["index"].get<int>() < 0 ||
      j["index"].get<int>() >= j["count"].get<int>()) {
    return make_error(ErrorCode::invalid_argument, path.string() + " is not {\"index\": I, \"count\": N} with 0 <= I < N");
  }
  return actors::ShardOptions{j["index"].get<int>(), j["count"].get<int>()};
}

Status record_run_shard(const std::string& run_dir, int index, int count) {
  auto recorded = read_run_shard(run_dir);
  if (!recorded) return recorded.error();
  const actors::ShardOptions wanted{index, count};
  const bool file = std::filesystem::exists(std::filesystem::path(run_dir) / "shard.json");
  // A directory that has a shard.json, or a store (an unsharded run's, 0 of 1), is that run's.
  const bool taken = file || std::filesystem::exists(std::filesystem::path(run_dir) / "store");
  if (taken && (recorded->index != index || recorded->count != count)) {
    return make_error(ErrorCode::conflict, "the run in " + run_dir + " is " + recorded->name() + ", not " + wanted.name());
  }
  if (file || count == 1) return {};
  return write_file_atomically((std::filesystem::path(run_dir) / "shard.json").string(),
                               nlohmann::json{{"index", index}, {"count", count}}.dump() + "\n");
}

Expected<actors::RuntimeOptions> stored_run_options(const std::string& run_dir) {
  auto file = read_config_file((std::filesystem::path(run_dir) / "config.toml").string());
  if (!file) return file.error();
  std::vector<std::string> overrides;
  if (std::filesystem::exists(run_tokenizer_path(run_dir))) overrides.push_back(tokenizer_override(run_tokenizer_path(run_dir)));
  auto config = load_config(file->text, file->origin, overrides);
  if (!config) return config.error();
  auto shard = read_run_shard(run_dir);
  if (!shard) return shard.error();
  auto options = to_runtime_options(*config, run_dir, true);
  options.shard = *shard;
  return options;
}

const std::vector<std::string>& run_control_keys() {
  static const std::vector<std::string> keys = {
      "train.max_seconds",        "train.eval_every",  "runtime.eval_every_versions", "runtime.eval_interval_s",
      "runtime.progress_interval_s", "runtime.store_sync", "runtime.keep_versions",    "log.*", "net.*"};
  return keys;
}

namespace {

bool is_run_control(const std::string& key) {
  for (const auto& k : run_control_keys()) {
    if (k == key || (k.size() > 2 && k.compare(k.size() - 2, 2, ".*") == 0 && key.rfind(k.substr(0, k.size() - 1), 0) == 0))
      return true;
  }
  return false;
}

// Every leaf of `table` as dotted key -> its TOML text.
void flatten(const toml::table& table, const std::string& prefix, std::map<std::string, std::string>& out) {
  for (const auto& [key, node] : table) {
    const std::string name = prefix + std::string(key.str());
    if (const auto* inner = node.as_table()) {
      flatten(*inner, name + ".", out);
    } else {
      std::ostringstream text;
      node.visit([&](const auto& value) { text << value; });
      out[name] = text.str();
    }
  }
}

Expected<std::map<std::string, std::string>> leaves(const std::string& text, const char* origin) {
  try {
    std::map<std::string, std::string> out;
    flatten(toml::parse(std::string_view(text), std::string_view(origin)), "", out);
    return out;
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::invalid_argument, std::string(origin) + ": " + std::string(e.description()));
  }
}

}  // namespace

Expected<RunControlChange> run_control_change(const std::string& running, const std::string& offered) {
  auto before = leaves(running, "the running configuration");
  if (!before) return before.error();
  auto after = leaves(offered, "the offered configuration");
  if (!after) return after.error();
  std::set<std::string> keys;
  for (const auto& [k, v] : *before) keys.insert(k);
  for (const auto& [k, v] : *after) keys.insert(k);
  std::vector<std::string> changed;
  for (const auto& key : keys) {
    const auto b = before->find(key), a = after->find(key);
    if (b != before->end() && a != after->end() && b->second == a->second) continue;
    if (!is_run_control(key)) {
      return make_error(ErrorCode::conflict, "the coordinator's configuration changes " + key +
                                                 ", which changes what is trained (only run-control keys may change "
                                                 "at a restart: train.max_seconds, evaluation and progress cadence, "
                                                 "the store's, the log's and [net])");
    }
    changed.push_back(key);
  }
  const auto max_seconds = after->find("train.max_seconds");
  return RunControlChange{std::move(changed), max_seconds == after->end() ? 0.0 : std::atof(max_seconds->second.c_str())};
}

Expected<Config> load_config(const std::optional<std::string>& file_text, const std::string& origin,
                             const std::vector<std::string>& overrides) {
  toml::table defaults;
  try {
    defaults = toml::parse(std::string_view(default_config_text()), std::string_view("config/default.toml"));
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::corrupt, std::string("embedded default config: ") + std::string(e.description()));
  }
  toml::table effective = defaults;
  if (file_text) {
    toml::table user;
    try {
      user = toml::parse(std::string_view(*file_text), std::string_view(origin));
    } catch (const toml::parse_error& e) {
      std::ostringstream where;
      where << origin << ":" << e.source().begin.line << ":" << e.source().begin.column;
      return make_error(ErrorCode::invalid_argument, where.str() + ": " + std::string(e.description()));
    }
    auto status = overlay(effective, defaults, user, origin);
    if (!status) return status.error();
  }
  for (const auto& text : overrides) {
    auto status = apply_override(effective, defaults, text);
    if (!status) return make_error(ErrorCode::invalid_argument, "--set " + status.error().reason);
  }
  return to_config(effective);
}

}  // namespace archipelago::apps

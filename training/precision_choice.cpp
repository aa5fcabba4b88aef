#include "training/precision_choice.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "training/replica.hpp"

namespace archipelago::training {
namespace {

using nlohmann::json;

// bf16's warm-up step this many times fp32's timed step: bf16 is emulated here, no timed step needed.
constexpr double kCutShortFactor = 20;

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown cpu";
}

std::string cache_key(const PrecisionProbe& probe, int sequences) {
  const auto& m = probe.model;
  char shape[256];
  std::snprintf(shape, sizeof shape, "d%d l%d h%d v%d t%d %s | batch %d | %d threads", m.d_model, m.layers, m.heads,
                m.vocab, m.seq_len, m.mlp.c_str(), sequences, probe.threads);
  return cpu_model() + " | " + shape;
}

json read_cache(const std::string& path, std::string& note) {
  if (path.empty() || !std::filesystem::exists(path)) return json::object();
  auto text = read_whole_file(path);
  if (!text) {
    note = "; the cache " + path + " could not be read";
    return json::object();
  }
  json cache = json::parse(*text, nullptr, false);
  if (!cache.is_object()) {
    note = "; the cache " + path + " was not a JSON object and is replaced";
    return json::object();
  }
  return cache;
}

// Seconds of one step of `replica` on `batch`.
double timed_step(Replica& replica, const Batch& batch) {
  const auto start = std::chrono::steady_clock::now();
  replica.step(batch);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Batch probe_batch(const ModelConfig& model, int sequences) {
  Batch batch;
  batch.batch_size = sequences;
  batch.seq_len = model.seq_len;
  batch.tokens.resize(static_cast<size_t>(sequences) * (model.seq_len + 1));
  for (size_t i = 0; i < batch.tokens.size(); ++i) batch.tokens[i] = static_cast<Token>((i * 7919) % model.vocab);
  return batch;
}

}  // namespace

std::string default_precision_cache() {
  std::filesystem::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = std::filesystem::path(home) / ".cache";
  } else {
    return {};
  }
  return (base / "archipelago" / "precision.json").string();
}

PrecisionChoice choose_precision(const PrecisionProbe& probe) {
  PrecisionChoice choice;
  choice.setting = probe.inner.precision;
  if (probe.inner.precision != "auto") {
    choice.precision = probe.inner.precision;
    choice.how = "set";
    choice.message = "precision " + choice.precision + " (inner.precision)";
    return choice;
  }
  if (probe.device.rfind("cuda", 0) == 0) {
    choice.how = "cuda";
    choice.message = "precision fp32 (auto on CUDA: set inner.precision = \"bf16\" on Ampere or newer)";
    return choice;
  }
  const int sequences = std::max(1, std::min(probe.probe_sequences, probe.inner.batch_size));
  const std::string key = cache_key(probe, sequences);
  std::string note;
  json cache = read_cache(probe.cache_file, note);
  if (auto hit = cache.find(key); hit != cache.end() && hit->is_object() && hit->contains("precision")) {
    const auto precision = hit->value("precision", std::string());
    if (precision == "fp32" || precision == "bf16") {
      choice.precision = precision;
      choice.how = "cached";
      choice.fp32_step_s = hit->value("fp32_step_s", 0.0);
      choice.bf16_step_s = hit->value("bf16_step_s", 0.0);
      choice.bf16_cut_short = hit->value("bf16_cut_short", false);
    }
  }
  if (choice.how.empty()) {
    const Batch batch = probe_batch(probe.model, sequences);
    auto measure = [&](const std::string& precision, double cut_after_s, bool& cut_short) -> double {
      InnerOptions inner = probe.inner;
      inner.precision = precision;
      inner.batch_size = sequences;
      set_compute_threads(probe.threads, precision);
      auto replica = Replica::create(probe.model, inner, probe.device, 1);
      if (!replica) return -1;
      const double warm_up = timed_step(**replica, batch);
      if (cut_after_s > 0 && warm_up > cut_after_s) {
        cut_short = true;
        return warm_up;
      }
      return timed_step(**replica, batch);
    };
    bool unused = false;
    choice.fp32_step_s = measure("fp32", 0, unused);
    choice.bf16_step_s = measure("bf16", kCutShortFactor * choice.fp32_step_s, choice.bf16_cut_short);
    if (choice.fp32_step_s < 0 || choice.bf16_step_s < 0) {
      choice.how = "measured";
      choice.precision = "fp32";
      choice.message = "precision fp32 (auto: a probe replica could not be built, nothing measured)";
      return choice;
    }
    choice.precision = choice.bf16_step_s < choice.fp32_step_s ? "bf16" : "fp32";
    choice.how = "measured";
    if (!probe.cache_file.empty()) {
      cache[key] = {{"precision", choice.precision},
                    {"fp32_step_s", choice.fp32_step_s},
                    {"bf16_step_s", choice.bf16_step_s},
                    {"bf16_cut_short", choice.bf16_cut_short}};
      std::error_code ec;
      std::filesystem::create_directories(std::filesystem::path(probe.cache_file).parent_path(), ec);
      if (auto written = write_file_atomically(probe.cache_file, cache.dump(1)); !written) {
        note += "; not cached: " + written.error().reason;
      }
    }
  }
  char line[320];
  std::snprintf(line, sizeof line, "precision %s (auto, %s: a step of %d sequences took %.3f s in fp32, %s%.3f s in bf16%s)",
                choice.precision.c_str(), choice.how.c_str(), sequences, choice.fp32_step_s,
                choice.bf16_cut_short ? "over " : "", choice.bf16_step_s,
                choice.bf16_cut_short ? " at its warm-up, cut short" : "");
  choice.message = line + note;
  return choice;
}

}  // namespace archipelago::training

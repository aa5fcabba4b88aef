// Shared setup of the actor tests: tiny-model runtime options in a fresh run directory.
#pragma once

#include <filesystem>
#include <string>

#include "actors/runtime_options.hpp"
#include "training/options.hpp"

namespace archipelago::actors::testing {

inline std::string fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("archipelago-actors-test-" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

// Tiny model, small batches, fast heartbeats and restarts; bounded by `max_seconds` unless a test
// sets train.max_tokens instead.
inline RuntimeOptions tiny_options(const std::string& name, const std::string& mode, int learners, double max_seconds) {
  RuntimeOptions o;
  auto& s = o.setup;
  s.model = *training::model_preset("tiny");
  s.inner.batch_size = 8;
  s.inner.warmup_steps = 5;
  s.outer.fragments = 2;
  s.data.cache_dir = (std::filesystem::temp_directory_path() / "archipelago-test-data").string();
  s.data.eval_batches = 2;
  s.run.mode = *archipelago::diloco::parse_mode(mode);
  s.run.learners = learners;
  s.run.inner_steps = 10;
  s.run.max_seconds = max_seconds;
  s.run.threads = 1;
  o.detector.heartbeat_s = 0.1;
  o.detector.min_timeout_s = 3.0;
  o.restart.backoff_initial_s = 0.02;
  o.progress_interval_s = 0.5;
  o.drain_timeout_s = 5;
  o.eval_every_versions = 1000;  // only the final evaluation: keeps the cores for training
  o.eval_interval_s = 0;
  o.store_sync = false;
  o.run_dir = fresh_dir(name);
  return o;
}

}  // namespace archipelago::actors::testing

// Logging: one spdlog logger per component, every line tagged with the run id.
//
// Call `init_logging` once at start-up (any thread, before other threads log); afterwards
// `component_logger("learner")` is safe from any thread and returns the same logger each time.
#pragma once

#include <memory>
#include <string>

#include <spdlog/spdlog.h>

namespace archipelago {

struct LogOptions {
  std::string run_id = "-";
  std::string level = "info";  // trace | debug | info | warn | error | off
  std::string file;            // also append to this file when not empty
};

// Returns false (and leaves the previous setup) when `options.level` is not a level name.
bool init_logging(const LogOptions& options);

std::shared_ptr<spdlog::logger> component_logger(const std::string& component);

}  // namespace archipelago

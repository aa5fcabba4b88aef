// Logging: one spdlog logger per component, every line tagged with the run id.
//
// Call `init_logging` once at start-up (any thread, before other threads log); afterwards
// `component_logger("learner")` is safe from any thread and returns the same logger each time.
#pragma once

#include <memory>
#include <cstdint>
#include <string>

#include <spdlog/spdlog.h>

namespace archipelago {

struct LogOptions {
  std::string run_id = "-";
  std::string level = "info";  // trace | debug | info | warn | error | off
  std::string file;            // also append to this file when not empty ...
  uint64_t max_file_bytes = 64ull << 20;  // ... rotated past this size (file.1.ext, file.2.ext, ...)
  int max_files = 4;                      // ... keeping this many rotated files
};

// Returns false (and leaves the previous setup) when `options.level` is not a level name.
bool init_logging(const LogOptions& options);

std::shared_ptr<spdlog::logger> component_logger(const std::string& component);

}  // namespace archipelago

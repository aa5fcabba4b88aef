#include "common/log.hpp"

#include <mutex>
#include <vector>

#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace archipelago {
namespace {

std::mutex registry_mutex;
std::vector<spdlog::sink_ptr> sinks;
spdlog::level::level_enum level = spdlog::level::info;
std::string pattern = "[%Y-%m-%d %H:%M:%S.%e] [-] [%n] [%^%l%$] %v";

}  // namespace

bool init_logging(const LogOptions& options) {
  auto parsed = spdlog::level::from_str(options.level);
  if (parsed == spdlog::level::off && options.level != "off") return false;
  std::lock_guard<std::mutex> lock(registry_mutex);
  level = parsed;
  pattern = "[%Y-%m-%d %H:%M:%S.%e] [" + options.run_id + "] [%n] [%^%l%$] %v";
  sinks.clear();
  // Logs go to stderr so that stdout stays clean for progress lines and the JSON summary.
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!options.file.empty()) {
    // Rotated by size: a flood of log lines (each counted too) cannot fill the disk.
    sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(options.file, options.max_file_bytes,
                                                                           static_cast<size_t>(options.max_files)));
  }
  spdlog::drop_all();
  return true;
}

std::shared_ptr<spdlog::logger> component_logger(const std::string& component) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  if (auto existing = spdlog::get(component)) return existing;
  if (sinks.empty()) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  auto logger = std::make_shared<spdlog::logger>(component, sinks.begin(), sinks.end());
  logger->set_level(level);
  logger->set_pattern(pattern);
  spdlog::register_logger(logger);
  return logger;
}

}  // namespace archipelago

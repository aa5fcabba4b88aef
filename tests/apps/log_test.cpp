// The run's log file rotates by size: a flood of lines cannot fill the disk (common/log.hpp).
#include <filesystem>
#include <string>

#include <unistd.h>

#include <doctest/doctest.h>

#include "common/log.hpp"

namespace fs = std::filesystem;

TEST_CASE("the log file rotates past its size and keeps its number of rotated files") {
  const fs::path dir = fs::temp_directory_path() / ("archipelago-log-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const uint64_t max_bytes = 4 << 10;
  REQUIRE(archipelago::init_logging({"log-test", "info", (dir / "run.log").string(), max_bytes, 2}));
  auto log = archipelago::component_logger("flood");
  const std::string line(100, 'x');
  for (int i = 0; i < 300; ++i) log->warn("{} {}", i, line);  // ~45 kB of lines: 10 times the limit
  log->flush();
  uintmax_t total = 0;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    files += 1;
    CHECK(entry.file_size() <= max_bytes);
    total += entry.file_size();
  }
  CHECK(files == 3);  // run.log, run.1.log, run.2.log
  CHECK(fs::exists(dir / "run.1.log"));
  CHECK(total <= 3 * max_bytes);
  REQUIRE(archipelago::init_logging({"-", "info", ""}));  // stderr alone again for the other tests
  fs::remove_all(dir);
}

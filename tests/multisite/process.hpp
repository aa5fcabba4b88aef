// Real processes for multi-process tests: the archipelago binary as a child process
// (common/child_process.hpp: output in files, bounded waits, killed when dropped, even when a check
// fails), the helpers the tests poll it with, and a scratch directory per test.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/files.hpp"

namespace multisite {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using archipelago::free_port;

// The file's bytes, "" when it cannot be read.
inline std::string read_file(const fs::path& path) {
  auto text = archipelago::read_whole_file(path.string());
  return text ? *text : std::string();
}

// Polls `condition` every 50 ms until it holds (true) or `timeout_s` passes (false).
inline bool wait_until(const std::function<bool()>& condition, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (!condition()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++count;
  return count;
}

// `archipelago ARGUMENTS...`, its output appended to DIR/NAME.out and DIR/NAME.err, in a process
// group of its own.
class Process {
 public:
  Process(std::string name, const std::vector<std::string>& arguments, const fs::path& dir)
      : name_(std::move(name)),
        child_({ARCHIPELAGO_BINARY, arguments, dir / (name_ + ".out"), dir / (name_ + ".err"), true, true}) {}

  // Sends `signal`; after SIGKILL, returns once the process is gone.
  void kill(int signal) {
    child_.signal(signal);
    if (signal == SIGKILL) child_.wait(10);
  }
  bool running() { return child_.running(); }
  // The exit code, or -1 when it did not exit within `timeout_s` (then it is killed).
  int wait(double timeout_s) { return child_.wait(timeout_s); }
  pid_t pid() const { return child_.pid(); }
  std::string out() const { return child_.out(); }
  std::string err() const { return child_.err(); }
  std::string all() const { return "--- " + name_ + " stdout:\n" + out() + "--- " + name_ + " stderr:\n" + err(); }
  // The last line of stdout as JSON (null when there is none, discarded when it is not JSON).
  nlohmann::json summary() const {
    const std::string line = child_.last_out_line();
    if (line.empty()) return nullptr;
    return nlohmann::json::parse(line, nullptr, false);
  }
  // `key=<integer>` of the last stdout line that has it (progress lines), or -1.
  int64_t last_value(const std::string& key) const {
    auto text = out();
    auto at = text.rfind(" " + key + "=");
    if (at == std::string::npos) return -1;
    return std::atoll(text.c_str() + at + key.size() + 2);
  }

 private:
  std::string name_;
  archipelago::ChildProcess child_;
};

// `archipelago console TARGET -c COMMAND --json --admin-token-file TOKEN`: exit code, stdout, stderr.
struct ConsoleAnswer {
  int code = -1;
  std::string out, err;
  nlohmann::json json() const { return nlohmann::json::parse(out.substr(0, out.find('\n')), nullptr, false); }
};
inline ConsoleAnswer console_command(const fs::path& dir, const std::string& target, const std::string& command,
                                     const fs::path& token) {
  static int invocation = 0;  // each its own output files
  Process p("console-" + std::to_string(++invocation),
            {"console", target, "-c", command, "--json", "--admin-token-file", token.string()}, dir);
  const int code = p.wait(30);
  return {code, p.out(), p.err()};
}

// A scratch directory with a token file; removed at the end.
struct Scratch {
  fs::path dir;
  fs::path token, wrong_token;
  explicit Scratch(const std::string& name) {
    dir = fs::temp_directory_path() / ("archipelago-multisite-" + name + "-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    token = dir / "token";
    wrong_token = dir / "wrong-token";
    std::ofstream(token) << "correct-horse-battery-staple-0123456789\n";
    std::ofstream(wrong_token) << "incorrect-horse-battery-staple-987654\n";
    chmod(token.c_str(), 0600);
    chmod(wrong_token.c_str(), 0600);
  }
  ~Scratch() { fs::remove_all(dir); }
};

}  // namespace multisite

// Real processes for multi-process tests: fork + exec of the archipelago binary with its output in
// files, bounded waits, and a registry that kills whatever a test started, even when it fails.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace multisite {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A port that was free a moment ago on 127.0.0.1 (the kernel picks it).
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
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

class Process {
 public:
  Process(std::string name, const std::vector<std::string>& arguments, const fs::path& dir,
          const std::vector<std::string>& environment = {})
      : name_(std::move(name)), out_(dir / (name_ + ".out")), err_(dir / (name_ + ".err")) {
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ == 0) {
      // A test that crashes (no destructor runs) takes its processes with it.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      setpgid(0, 0);
      int out = open(out_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      int err = open(err_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(out, 1);
      dup2(err, 2);
      for (const auto& e : environment) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(ARCHIPELAGO_BINARY));
      for (const auto& a : arguments) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(ARCHIPELAGO_BINARY, argv.data());
      _exit(127);
    }
  }
  ~Process() { kill(SIGKILL); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void kill(int signal) {
    if (pid_ > 0 && running()) ::kill(pid_, signal);
    if (signal == SIGKILL) wait(10);
  }
  bool running() {
    if (pid_ <= 0 || exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return !exited_;
  }
  // The exit code, or -1 when it did not exit within `timeout_s` (then it is killed).
  int wait(double timeout_s) {
    if (!wait_until([&] { return !running(); }, timeout_s)) {
      ::kill(pid_, SIGKILL);
      wait_until([&] { return !running(); }, 10);
      return -1;
    }
    return exit_code_;
  }
  pid_t pid() const { return pid_; }
  std::string out() const { return read_file(out_); }
  std::string err() const { return read_file(err_); }
  std::string all() const { return "--- " + name_ + " stdout:\n" + out() + "--- " + name_ + " stderr:\n" + err(); }
  // The last line of stdout as JSON (null when it is not JSON).
  nlohmann::json summary() const {
    auto text = out();
    auto end = text.find_last_not_of('\n');
    if (end == std::string::npos) return nullptr;
    auto begin = text.rfind('\n', end);
    begin = begin == std::string::npos ? 0 : begin + 1;
    return nlohmann::json::parse(text.substr(begin, end - begin + 1), nullptr, false);
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
  fs::path out_, err_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
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

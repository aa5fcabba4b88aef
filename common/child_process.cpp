#include "common/child_process.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/files.hpp"

namespace archipelago {
namespace {

using Clock = std::chrono::steady_clock;

std::string text_of(const std::filesystem::path& path) {
  auto text = read_whole_file(path.string());
  return text ? *text : std::string();
}

void pause_briefly() { std::this_thread::sleep_for(std::chrono::milliseconds(10)); }

}  // namespace

ChildProcess::ChildProcess(ChildOptions options) : options_(std::move(options)) {
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> args{options_.binary};
  args.insert(args.end(), options_.arguments.begin(), options_.arguments.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = options_.out.string(), err = options_.err.string();
  const int flags = O_WRONLY | O_CREAT | (options_.append ? O_APPEND : O_TRUNC);
  const pid_t parent = getpid();
  pid_ = fork();
  if (pid_ == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent died before prctl took effect
    if (options_.own_process_group) setpgid(0, 0);
    const int o = open(out.c_str(), flags, 0644);
    const int e = open(err.c_str(), flags, 0644);
    dup2(o, 1);
    dup2(e, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
}

ChildProcess::~ChildProcess() {
  if (running()) {
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    wait(10);
  }
}

void ChildProcess::signal(int signal) {
  if (running()) ::kill(pid_, signal);
}

bool ChildProcess::running() {
  if (pid_ <= 0 || exited_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    exited_ = true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return !exited_;
}

int ChildProcess::wait(double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (running()) {
    if (Clock::now() >= deadline) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGKILL);
      while (running()) pause_briefly();
      return -1;
    }
    pause_briefly();
  }
  return exit_code_;
}

std::string ChildProcess::out() const { return text_of(options_.out); }
std::string ChildProcess::err() const { return text_of(options_.err); }

std::string ChildProcess::last_out_line() const {
  const std::string text = out();
  const auto end = text.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  auto begin = text.rfind('\n', end);
  begin = begin == std::string::npos ? 0 : begin + 1;
  return text.substr(begin, end - begin + 1);
}

std::vector<pid_t> find_processes(const std::function<bool(const std::vector<std::string>& argv)>& matches) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::vector<std::string> argv;
    for (std::string argument; std::getline(in, argument, '\0');) argv.push_back(argument);
    if (!argv.empty() && matches(argv)) found.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return found;
}

int free_port(const std::string& host) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  inet_pton(AF_INET, host.c_str(), &address.sin_addr);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace archipelago

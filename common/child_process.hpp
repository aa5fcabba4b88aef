// A child process of this program: fork + exec of a binary with its stdout and stderr in files,
// waits that end within a bound, and nothing left behind.
//
// Invariant: a ChildProcess never outlives its owner. Dropping it SIGKILLs and reaps the child, and
// the kernel SIGKILLs the child when this process dies first (PR_SET_PDEATHSIG), so even a crash
// that runs no destructor leaves no process behind.
//
// Used by `archipelago drill` (apps/drill/) for the coordinator, shard and node processes of a
// drill, and by the multi-process tests (tests/multisite/process.hpp). One thread owns each
// ChildProcess; it is not safe to call from two threads at once.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace archipelago {

// How to start a child.
struct ChildOptions {
  std::string binary;                  // the file exec'd, also its argv[0]
  std::vector<std::string> arguments;  // argv[1..]
  std::filesystem::path out, err;      // where its stdout and stderr go
  bool append = false;                 // append to out and err (else they are truncated)
  bool own_process_group = false;      // setpgid(0, 0): a signal to this program's group (Ctrl-C) misses it
};

class ChildProcess {
 public:
  // Starts the child at once. When fork fails there is no child: running() is false, wait() -1.
  explicit ChildProcess(ChildOptions options);
  // SIGKILLs the child if it still runs (SIGCONT first: a stopped one dies as well) and reaps it.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `signal` while the child runs; an exited child gets nothing.
  void signal(int signal);
  // Whether it still runs; reaps it (and keeps its exit code) once it has exited.
  bool running();
  // Its exit code (128 + the signal when a signal ended it), or -1 when it did not exit within
  // `timeout_s`: then it is SIGKILLed and reaped before this returns.
  int wait(double timeout_s);

  // What it wrote so far ("" before it wrote anything).
  std::string out() const;
  std::string err() const;
  // The last non-empty line of its stdout, "" when there is none.
  std::string last_out_line() const;
  const std::filesystem::path& out_path() const { return options_.out; }

 private:
  ChildOptions options_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
};

// The processes of this machine whose command line (argv, one string per argument) `matches`: how a
// drill or a test finds a worker that another process started. Reads /proc; skips what it cannot read.
std::vector<pid_t> find_processes(const std::function<bool(const std::vector<std::string>& argv)>& matches);

// A TCP port that was free a moment ago on `host` (an IPv4 address; the kernel picks it), for a
// child about to listen there; 0 when no socket could be bound.
int free_port(const std::string& host = "127.0.0.1");

}  // namespace archipelago

#include "bench/multisite/restarts.hpp"

#include <sched.h>
#include <sys/wait.h>

#include <memory>
#include <thread>
#include <vector>

#include "tests/multisite/process.hpp"

namespace multisite_bench {
namespace {

using multisite::Clock;
using multisite::count_of;
using multisite::Process;
using multisite::wait_until;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

std::vector<std::string> with_run_settings(std::vector<std::string> arguments, const std::string& data) {
  for (std::string s : {"model.preset=tiny", "train.learners=4", "inner.batch_size=8", "data.eval_batches=2",
                        "train.inner_steps=10", "runtime.store_sync=true", "train.threads=1",
                        "runtime.progress_interval_s=0.2", "runtime.drain_timeout_s=5", "inner.warmup_steps=10",
                        "train.max_seconds=0"}) {
    arguments.push_back("--set");
    arguments.push_back(s);
  }
  arguments.push_back("--set");
  arguments.push_back("data.cache_dir=" + data);
  return arguments;
}

// When `process` printed its listening line (checked every 5 ms), or -1 after `timeout_s`.
double listening_at(const Process& process, double timeout_s) {
  const double deadline = now_s() + timeout_s;
  while (now_s() < deadline) {
    if (process.out().find("listening on") != std::string::npos) return now_s();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

// SIGKILLs `process` and returns when it has died (it stays unreaped for Process to collect).
void kill_and_wait_dead(Process& process) {
  ::kill(process.pid(), SIGKILL);
  siginfo_t info{};
  ::waitid(P_PID, static_cast<id_t>(process.pid()), &info, WEXITED | WNOWAIT);
}

// The coordinator's log lines that time its startup ("corpus loaded in ...", "ready in ..."), joined.
std::string startup_lines(const std::string& log) {
  std::string lines;
  for (const char* needle : {"corpus loaded in", "ready in", "startup:"}) {
    const auto at = log.find(needle);
    if (at == std::string::npos) continue;
    lines += (lines.empty() ? "" : "; ") + log.substr(at, log.find('\n', at) - at);
  }
  return lines;
}

// While it lives, processes this thread starts run on `cores` only (a child inherits its parent
// thread's CPU mask); an empty list changes nothing.
class CoresForChildren {
 public:
  explicit CoresForChildren(const std::vector<int>& cores) {
    if (cores.empty()) return;
    saved_ = sched_getaffinity(0, sizeof before_, &before_) == 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cores) CPU_SET(c, &set);
    sched_setaffinity(0, sizeof set, &set);
  }
  ~CoresForChildren() {
    if (saved_) sched_setaffinity(0, sizeof before_, &before_);
  }

 private:
  cpu_set_t before_{};
  bool saved_ = false;
};

}  // namespace

RestartTimes measure_restarts(const std::vector<int>& coordinator_cores, const std::vector<int>& node_cores,
                              int learner_nice) {
  RestartTimes times;
  multisite::Scratch s("bench");
  const std::string data = (multisite::fs::temp_directory_path() / "archipelago-test-data").string();
  const std::string address = "127.0.0.1:" + std::to_string(multisite::free_port());
  const auto coordinator_args = with_run_settings({"coordinator", "--json", "--listen", address, "--run-dir", (s.dir / "run").string(),
                                                   "--token-file", s.token.string()}, data);
  auto node_args = [&](const std::string& name) {
    return std::vector<std::string>{"node", "--json", "--coordinator", address, "--learners", "2", "--name", name,
                                    "--token-file", s.token.string(), "--set", "train.threads=1",
                                    "--set", "runtime.learner_nice=" + std::to_string(learner_nice)};
  };
  auto fail = [&](const std::string& what, const std::vector<const Process*>& processes) {
    times.error = what;
    for (const auto* p : processes) times.error += "\n" + p->all();
    return times;
  };

  auto start_coordinator = [&](const std::string& name) {
    CoresForChildren pinned(coordinator_cores);
    return std::make_unique<Process>(name, coordinator_args, s.dir);
  };
  auto start_node = [&](const std::string& process, const std::string& name) {
    CoresForChildren pinned(node_cores);
    return std::make_unique<Process>(process, node_args(name), s.dir);
  };
  auto first = start_coordinator("coordinator-1");
  if (listening_at(*first, 60) < 0) return fail("the first coordinator did not listen", {first.get()});
  auto a_process = start_node("node-a", "node-a");
  Process& a = *a_process;
  auto b = start_node("node-b", "node-b");
  if (!wait_until([&] { return first->last_value("version") >= 10; }, 90)) {
    return fail("no 10 committed versions", {first.get(), &a, b.get()});
  }

  // Coordinator: kill -> dead -> new process -> listening -> first new committed version.
  const double killed = now_s();
  kill_and_wait_dead(*first);
  const double dead = now_s();
  const double started = now_s();
  auto second_process = start_coordinator("coordinator-2");
  Process& second = *second_process;
  const double listening = listening_at(second, 60);
  if (listening < 0) return fail("the restarted coordinator did not listen", {&second});
  if (!wait_until([&] { return count_of(second.err(), "admitted node") >= 2 && second.last_value("version") > 0; }, 60)) {
    return fail("the nodes did not rejoin the restarted coordinator", {&second, &a, b.get()});
  }
  first->kill(SIGKILL);  // reaps it
  std::this_thread::sleep_for(std::chrono::seconds(2));

  // Node: kill node-b, wait until its two learners are declared dead, start it again.
  b->kill(SIGKILL);
  if (!wait_until([&] { return count_of(second.err(), "declared dead") >= 2; }, 15)) {
    return fail("node-b's learners were not declared dead", {&second});
  }
  const double node_started = now_s();
  auto b2_process = start_node("node-b-2", "node-b");
  Process& b2 = *b2_process;
  if (!wait_until([&] { return count_of(second.err(), "admitted node 'node-b'") == 2; }, 30)) {
    return fail("node-b did not rejoin", {&second, &b2});
  }
  std::this_thread::sleep_for(std::chrono::seconds(4));
  second.kill(SIGTERM);
  second.wait(60);
  a.wait(30);
  b2.wait(30);
  const auto summary = second.summary();
  const auto restarted = b2.summary();
  if (!summary.is_object() || !restarted.is_object() || !summary.contains("first_commit_s")) {
    return fail("no summary", {&second, &b2});
  }
  double first_merge = -1;
  const int first_learner = restarted.value("first_learner", -1);
  for (int m = first_learner; first_learner >= 0 && m < first_learner + 2; ++m) {
    const auto learner = summary["learners"].value("learner-" + std::to_string(m), nlohmann::json::object());
    const double t = learner.value("first_merge_after_join_s", -1.0);
    if (t > 0 && (first_merge < 0 || t < first_merge)) first_merge = t;
  }
  const double committed = summary["first_commit_s"].get<double>();
  if (committed < 0 || first_merge < 0) return fail("the summaries hold no first commit or merge", {&second, &b2});
  times.ok = true;
  times.coordinator_startup = startup_lines(second.err());
  times.kill_to_dead_s = dead - killed;
  times.coordinator_start_to_listening_s = listening - started;
  times.coordinator_start_to_commit_s = committed - started;
  times.coordinator_kill_to_commit_s = committed - killed;
  times.node_start_to_merge_s = first_merge - node_started;
  return times;
}

}  // namespace multisite_bench

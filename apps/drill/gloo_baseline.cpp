#include "apps/drill/gloo_baseline.hpp"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/drill/observer.hpp"
#include "common/child_process.hpp"
#include "common/files.hpp"
#include "run/data_parallel_job.hpp"

namespace archipelago::apps::drill {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

// The learner slots (= worker ranks) a fault aims at; empty: it has no data-parallel counterpart.
std::vector<int> ranks_of(const DrillConfig& c, const Fault& f, size_t index) {
  const int world = c.nodes * c.learners_per_node;
  auto number = [](const std::string& target, size_t prefix) { return std::atoi(target.c_str() + prefix); };
  auto node_ranks = [&](int node) {
    std::vector<int> ranks;
    for (int j = 0; j < c.learners_per_node; ++j) ranks.push_back(node * c.learners_per_node + j);
    return ranks;
  };
  // A fault the schedule left to the seed: the DiLoCo run picked a live one; here slot index mod world.
  if (f.kind == "kill_learner" || f.kind == "slow_learner") {
    return {f.target.rfind("learner-", 0) == 0 ? number(f.target, 8) : static_cast<int>(index % world)};
  }
  if (f.kind == "kill_node" || f.kind == "freeze_node" || f.kind == "slow_node") {
    return node_ranks(f.target.rfind("node-", 0) == 0 ? number(f.target, 5) : static_cast<int>(index % c.nodes));
  }
  if (f.kind == "kill_site") {
    std::vector<int> ranks;
    const int site = f.target.rfind("site-", 0) == 0 ? number(f.target, 5) : 0;
    for (int node = site; node < c.nodes; node += std::max(1, c.sites)) {
      for (int r : node_ranks(node)) ranks.push_back(r);
    }
    return ranks;
  }
  if (f.kind == "kill_coordinator") return {0};
  return {};
}

}  // namespace

RunResult run_gloo_baseline(const DrillConfig& c, const std::vector<Fault>& schedule, const fs::path& dir,
                            const std::string& binary, double duration_s) {
  RunResult result;
  result.variant = DrillVariant::gloo;
  const int world = c.nodes * c.learners_per_node;
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path run_dir = dir / "run";
  // The job's budget runs from its launch; its start-up (LibTorch, the corpus, the rendezvous) comes
  // before the first report the schedule counts from, so the budget leaves room for it.
  const double startup_allowance_s = 15;
  ChildOptions options;
  options.binary = binary;
  options.arguments = {"train", "--json", "--no-sample", "--run-dir", run_dir.string()};
  for (const auto& set : c.sets) options.arguments.insert(options.arguments.end(), {"--set", set});
  const std::vector<std::string> job_sets = {"train.mode=ddp", "train.learners=" + std::to_string(world),
                                             "train.max_tokens=0",
                                             "train.max_seconds=" + std::to_string(duration_s + startup_allowance_s),
                                             "runtime.max_restarts=1000"};
  for (const auto& set : job_sets) {
    options.arguments.insert(options.arguments.end(), {"--set", set});
  }
  options.out = dir / "train.out";
  options.err = dir / "train.err";
  const auto launched = Clock::now();
  auto since_launch = [&] { return std::chrono::duration<double>(Clock::now() - launched).count(); };
  ChildProcess train(options);

  // Progress lines ("progress round=R steps=S ..."): the schedule's zero is the first.
  double origin = -1;
  int64_t last_steps = 0;
  LineTail out(train.out_path());
  auto read_progress = [&] {
    for (const auto& line : out.lines()) {
      const auto steps = line.rfind("progress ", 0) == 0 ? progress_field(line, "steps") : std::nullopt;
      if (!steps) continue;
      last_steps = static_cast<int64_t>(*steps);
      if (origin < 0) origin = since_launch();
    }
  };
  while (origin < 0 && train.running() && since_launch() < 180) {
    read_progress();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (origin < 0) {
    result.error = "the data-parallel job reported no round:\n" + train.err();
    return result;
  }
  result.origin_s = origin;

  const fs::path config = run_dir / "config.toml";
  json faults = json::array(), not_applicable = json::array();
  struct Pending {
    size_t fault;
    double at_s;        // when it landed, on the schedule's clock
    int64_t steps;      // the job's steps then: it has recovered once it reports more
    std::vector<pid_t> stopped;
    double resume_at_s = -1;
  };
  std::vector<Pending> pending;
  auto now = [&] { return since_launch() - origin; };
  // Resumes the workers of every freeze or slowdown whose time is up.
  auto resume_due = [&] {
    for (auto& p : pending) {
      if (p.resume_at_s >= 0 && now() >= p.resume_at_s) {
        for (pid_t pid : p.stopped) kill(pid, SIGCONT);
        p.resume_at_s = -1;
      }
    }
  };
  for (size_t i = 0; i < schedule.size(); ++i) {
    const Fault& f = schedule[i];
    const auto ranks = ranks_of(c, f, i);
    if (ranks.empty()) {
      not_applicable.push_back({{"at_s", f.at_s}, {"fault", f.kind}, {"target", f.target}});
      continue;
    }
    // Until the fault's time: follow progress, resume what a freeze stopped.
    while (now() < f.at_s && train.running()) {
      read_progress();
      resume_due();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!train.running()) break;
    // The workers of these slots as they run now (a restarting job may take a while to have them).
    std::vector<pid_t> pids;
    const double wait_until = now() + 60;
    while (pids.size() < ranks.size() && now() < wait_until && train.running()) {
      pids.clear();
      for (int rank : ranks) {
        if (pid_t pid = run::find_data_parallel_worker(config, rank); pid > 0) pids.push_back(pid);
      }
      if (pids.size() < ranks.size()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    json record = {{"at_s", now()}, {"fault", f.kind}, {"target", f.target}, {"ranks", ranks}};
    if (pids.size() < ranks.size()) {
      record["missed"] = "its workers were not running within 60 s";
      faults.push_back(record);
      continue;
    }
    read_progress();
    Pending p{faults.size(), now(), last_steps, {}, -1};
    const bool stop = f.kind == "freeze_node" || f.kind == "slow_node" || f.kind == "slow_learner";
    for (pid_t pid : pids) kill(pid, stop ? SIGSTOP : SIGKILL);
    if (stop) {
      const double held = f.kind == "freeze_node" ? c.freeze_s
                          : f.kind == "slow_node" ? c.slow_s * c.slow_duty
                                                  : c.slow_s * (1 - 1 / std::max(1.0, c.slow_factor));
      p.stopped = pids;
      p.resume_at_s = now() + held;
      record["signal"] = "SIGSTOP for " + fixed(held, 1) + " s";
    } else {
      record["signal"] = "SIGKILL";
      result.kills += static_cast<int>(pids.size());
    }
    faults.push_back(record);
    pending.push_back(p);
  }
  // Until the job ends: resume stopped workers, and time every fault's recovery (the job reports
  // more steps than it had when the fault landed).
  std::vector<double> recovered(faults.size(), NAN);
  const double end_by = duration_s + startup_allowance_s + 600;
  while (train.running() && since_launch() < end_by) {
    read_progress();
    resume_due();
    for (const auto& p : pending) {
      if (std::isnan(recovered[p.fault]) && last_steps > p.steps) recovered[p.fault] = now() - p.at_s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int code = train.wait(30);
  read_progress();
  for (auto& p : pending) {
    if (std::isnan(recovered[p.fault]) && last_steps > p.steps) recovered[p.fault] = now() - p.at_s;
    faults[p.fault]["recovered_after_s"] = std::isnan(recovered[p.fault]) ? json(nullptr) : json(recovered[p.fault]);
  }
  if (code != 0) {
    result.error = "the data-parallel job exited with code " + std::to_string(code) + ":\n" + train.err();
    return result;
  }
  json summary = json::parse(train.last_out_line(), nullptr, false);
  if (summary.is_discarded() || !summary.is_object()) {
    result.error = "the data-parallel job printed no summary";
    return result;
  }
  summary["faults"] = faults;
  summary["not_applicable"] = not_applicable;
  result.driven = true;
  result.final_summary = summary;
  result.initial_loss = summary.value("initial_heldout_loss", NAN);
  result.final_loss = summary.value("heldout_loss", NAN);
  result.goodput = summary.value("goodput", NAN);
  result.allocated_s = summary.value("allocated_s", 0.0) * world;
  // Two parts: the steps in the final parameters, and the rest (work after a crashed incarnation's
  // last checkpoint, restarts and their start-up, checkpoints and evaluations).
  const double kept = summary.value("kept_step_s", 0.0) * world;
  result.parts = {{"merged", kept}, {"lost", result.allocated_s - kept}};
  result.wall_s = since_launch();
  return result;
}

}  // namespace archipelago::apps::drill

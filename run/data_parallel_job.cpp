#include "run/data_parallel_job.hpp"

#include <chrono>
#include <cmath>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/child_process.hpp"
#include "common/files.hpp"
#include "common/log.hpp"
#include "training/gloo_group.hpp"

namespace archipelago::run {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
double number_of(const json& j) { return j.is_number() ? j.get<double>() : std::nan(""); }

// How much a worker's exit code says of the job's failure. A worker that lost a peer exits 1: a
// consequence, restartable. A signal (a crash, a kill) is a cause, restartable. Anything else (2: a
// bad configuration, 3: a corrupt checkpoint) is a cause that a restart would meet again.
constexpr int kNotRestartable = 2;
int cause_rank(int exit_code) {
  if (exit_code == 1) return 0;
  if (exit_code > 128) return 1;
  return kNotRestartable;
}
// How long the launcher waits, once a worker has ended with 1, for the cause of it to end too.
constexpr double kSettleSeconds = 2.0;

}  // namespace

pid_t find_data_parallel_worker(const fs::path& config_file, int rank) {
  auto found = find_processes([&](const std::vector<std::string>& argv) {
    auto has = [&](const std::string& flag, const std::string& value) {
      for (size_t i = 0; i + 1 < argv.size(); ++i) {
        if (argv[i] == flag && argv[i + 1] == value) return true;
      }
      return false;
    };
    return argv.size() > 1 && argv[1] == "ddp-worker" && has("--config", config_file.string()) &&
           has("--rank", std::to_string(rank));
  });
  return found.empty() ? 0 : found.front();
}

nlohmann::json to_json(const training::ProgressPoint& p) {
  return {{"round", p.round}, {"steps", p.steps}, {"tokens", p.tokens}, {"train_loss", number(p.train_loss)},
          {"heldout_loss", number(p.heldout_loss)}, {"elapsed_s", p.elapsed_s}, {"bytes_sent", p.bytes_sent}};
}

std::string progress_line(const training::ProgressPoint& p) { return "progress " + to_json(p).dump(); }

std::optional<training::ProgressPoint> parse_progress_line(const std::string& line) {
  static const std::string prefix = "progress ";
  if (line.rfind(prefix, 0) != 0) return std::nullopt;
  auto j = json::parse(line.substr(prefix.size()), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  training::ProgressPoint p;
  p.round = j.value("round", int64_t{0});
  p.steps = j.value("steps", int64_t{0});
  p.tokens = j.value("tokens", int64_t{0});
  p.train_loss = number_of(j.value("train_loss", json()));
  p.heldout_loss = number_of(j.value("heldout_loss", json()));
  p.elapsed_s = j.value("elapsed_s", 0.0);
  p.bytes_sent = j.value("bytes_sent", int64_t{0});
  return p;
}

std::string worker_result_line(const training::DataParallelResult& r) {
  return json{{"rank", r.rank}, {"parameters", r.parameters}, {"learners", r.learners}, {"inner_steps", r.inner_steps},
              {"rounds", r.rounds}, {"steps", r.steps}, {"tokens", r.tokens},
              {"initial_heldout_loss", number(r.initial_heldout_loss)}, {"heldout_loss", number(r.heldout_loss)},
              {"train_loss", number(r.train_loss)}, {"wall_s", r.wall_s}, {"bytes_sent", r.bytes.sent},
              {"bytes_received", r.bytes.received}, {"store_bytes_sent", r.bytes.store_sent},
              {"store_bytes_received", r.bytes.store_received}, {"gloo_sockets", r.bytes.sockets},
              {"broadcast_bytes", r.broadcast_bytes}, {"resumed_from_step", r.resumed_from_step},
              {"kept_step_s", r.kept_step_s}, {"first_step_at_ms", r.first_step_at_ms},
              {"parameter_digest", r.parameter_digest}}
      .dump();
}

std::optional<DataParallelWorkerReport> parse_worker_result_line(const std::string& line, training::RunSummary* summary) {
  auto j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("parameter_digest")) return std::nullopt;
  DataParallelWorkerReport w;
  w.rank = j.value("rank", -1);
  w.bytes_sent = j.value("bytes_sent", int64_t{0});
  w.bytes_received = j.value("bytes_received", int64_t{0});
  w.store_bytes_sent = j.value("store_bytes_sent", int64_t{0});
  w.store_bytes_received = j.value("store_bytes_received", int64_t{0});
  w.broadcast_bytes = j.value("broadcast_bytes", int64_t{0});
  w.resumed_from_step = j.value("resumed_from_step", int64_t{0});
  w.kept_step_s = j.value("kept_step_s", 0.0);
  w.first_step_at_ms = j.value("first_step_at_ms", int64_t{0});
  w.parameter_digest = j.value("parameter_digest", uint64_t{0});
  w.wall_s = j.value("wall_s", 0.0);
  if (summary) {
    summary->parameters = j.value("parameters", int64_t{0});
    summary->learners = j.value("learners", 0);
    summary->inner_steps = j.value("inner_steps", 0);
    summary->rounds = j.value("rounds", int64_t{0});
    summary->steps = j.value("steps", int64_t{0});
    summary->tokens = j.value("tokens", int64_t{0});
    summary->initial_heldout_loss = number_of(j.value("initial_heldout_loss", json()));
    summary->heldout_loss = number_of(j.value("heldout_loss", json()));
    summary->train_loss = number_of(j.value("train_loss", json()));
  }
  return w;
}

Expected<DataParallelJobResult> run_data_parallel_job(const DataParallelJobOptions& options,
                                                      const std::function<void(const training::ProgressPoint&)>& progress) {
  auto log = component_logger("ddp");
  const fs::path logs = options.run_dir / "workers";
  std::error_code ec;
  fs::create_directories(logs, ec);
  if (ec) return make_error(ErrorCode::io, "cannot create " + logs.string() + ": " + ec.message());
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const int64_t deadline_ms = options.max_seconds > 0 ? training::unix_ms() + static_cast<int64_t>(options.max_seconds * 1000) : 0;

  std::vector<DataParallelRestart> restarts;
  std::vector<std::unique_ptr<ChildProcess>> workers;
  std::unique_ptr<training::RendezvousHost> store;
  // One incarnation of the job: a fresh rendezvous (the old one's keys belong to the old group) and
  // every worker, resuming from the checkpoint when there is one.
  auto start_workers = [&]() -> Status {
    workers.clear();  // SIGKILLs and reaps what still runs
    store.reset();
    // A checkpoint that does not decode is refused here, before any worker starts: a restart would
    // not mend it, and no worker's exit races another's to say so.
    if (!options.checkpoint.empty()) {
      if (auto checked = training::read_checkpoint(options.checkpoint.string()); !checked) return checked.error();
    }
    auto started = training::RendezvousHost::start("127.0.0.1", 0);
    if (!started) return started.error();
    store = std::move(*started);
    for (int rank = 0; rank < options.world; ++rank) {
      ChildOptions child;
      child.binary = options.binary;
      child.arguments = {"ddp-worker", "--config", options.config_file.string(), "--store",
                         "127.0.0.1:" + std::to_string(store->port()), "--rank", std::to_string(rank),
                         "--world", std::to_string(options.world), "--threads", std::to_string(options.threads_per_worker)};
      if (!options.checkpoint.empty()) {
        child.arguments.insert(child.arguments.end(), {"--checkpoint", options.checkpoint.string()});
      }
      if (deadline_ms > 0) child.arguments.insert(child.arguments.end(), {"--deadline-ms", std::to_string(deadline_ms)});
      const std::string name = "rank-" + std::to_string(rank);
      child.out = logs / (name + ".out");
      child.err = logs / (name + ".err");
      child.append = !restarts.empty();  // every incarnation's lines, in order
      workers.push_back(std::make_unique<ChildProcess>(std::move(child)));
      if (!workers.back()->running()) return make_error(ErrorCode::unavailable, "cannot start data-parallel worker " + name);
    }
    log->info("{} data-parallel workers on gloo, rendezvous at 127.0.0.1:{} (logs in {}){}", options.world, store->port(),
              logs.string(), restarts.empty() ? "" : ", restart " + std::to_string(restarts.size()));
    return {};
  };
  if (Status started = start_workers(); !started) return started.error();

  LineTail rank0(workers[0]->out_path());  // every incarnation's rank 0 appends to the same file
  auto follow = [&] {
    for (const auto& line : rank0.lines()) {
      if (auto point = parse_progress_line(line); point && progress) progress(*point);
    }
  };
  for (;;) {
    follow();
    bool any_running = false;
    std::optional<DataParallelRestart> failure;
    auto look = [&] {
      any_running = false;
      for (int rank = 0; rank < options.world; ++rank) {
        auto& w = *workers[rank];
        if (w.running()) {
          any_running = true;
        } else if (int code = w.wait(0); code != 0) {
          if (!failure || cause_rank(code) > cause_rank(failure->exit_code)) {
            failure = DataParallelRestart{elapsed(), rank, code};
          }
        }
      }
    };
    look();
    if (failure) {
      // A worker that lost its peer can end before the peer whose end caused it: the cause is awaited,
      // boundedly, so that a corrupt checkpoint or a bad configuration is never taken for a lost peer.
      const double settle_until = elapsed() + kSettleSeconds;
      while (cause_rank(failure->exit_code) == 0 && any_running && elapsed() < settle_until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        look();
      }
      std::string reason = workers[failure->rank]->err();
      if (reason.size() > 600) reason = reason.substr(reason.size() - 600);
      const bool restartable = cause_rank(failure->exit_code) < kNotRestartable;
      if (!restartable || static_cast<int>(restarts.size()) >= options.max_restarts) {
        return make_error(ErrorCode::unavailable, "data-parallel worker " + std::to_string(failure->rank) +
                                                      " exited with code " + std::to_string(failure->exit_code) +
                                                      (restartable ? " and no restart is left: " : ": ") + reason);
      }
      // A non-elastic job: one worker gone stops them all; they all start again from the checkpoint.
      log->warn("data-parallel worker {} exited with code {} at {:.1f} s: restarting every worker from the checkpoint",
                failure->rank, failure->exit_code, failure->at_s);
      restarts.push_back(*failure);
      follow();
      rank0.skip_existing();  // a killed worker's partial last line is not the start of the next one's
      if (Status started = start_workers(); !started) return started.error();
      continue;
    }
    if (!any_running) break;
    if (elapsed() > options.timeout_s) {
      return make_error(ErrorCode::unavailable, "the data-parallel job did not end within " +
                                                    std::to_string(static_cast<int>(options.timeout_s)) + " s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  follow();
  const int64_t ended_ms = training::unix_ms();

  DataParallelJobResult result;
  result.mode = diloco::Mode::ddp;
  result.bytes_measured = true;
  result.wall_s = elapsed();
  for (int rank = 0; rank < options.world; ++rank) {
    const std::string last = workers[rank]->last_out_line();
    auto report = parse_worker_result_line(last, rank == 0 ? static_cast<training::RunSummary*>(&result) : nullptr);
    if (!report || report->rank != rank) {
      return make_error(ErrorCode::corrupt, "data-parallel worker " + std::to_string(rank) +
                                                " ended without its result line (last line: '" + last + "')");
    }
    result.bytes_sent += report->bytes_sent;
    result.bytes_received += report->bytes_received;
    result.store_bytes += report->store_bytes_sent + report->store_bytes_received;
    result.workers.push_back(*report);
  }
  result.bytes_ddp_equivalent = training::ring_allreduce_bytes(result.steps, options.world, result.parameters);
  result.restarts = restarts;
  result.kept_step_s = result.workers[0].kept_step_s;
  if (result.workers[0].first_step_at_ms > 0) {
    result.allocated_s = static_cast<double>(ended_ms - result.workers[0].first_step_at_ms) / 1000;
  }
  result.parameters_agree = true;
  for (const auto& w : result.workers) result.parameters_agree &= w.parameter_digest == result.workers[0].parameter_digest;
  return result;
}

}  // namespace archipelago::run

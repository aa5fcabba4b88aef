#include "apps/train_command.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "run/cluster.hpp"
#include "run/data_parallel_job.hpp"
#include "run/operator_endpoint.hpp"
#include "actors/compute_threads.hpp"
#include "apps/config.hpp"
#include "apps/coordinator_command.hpp"
#include "apps/metrics_server.hpp"
#include "apps/sample_command.hpp"
#include "net/auth.hpp"
#include "common/log.hpp"
#include "training/blas_check.hpp"
#include "training/precision_choice.hpp"
#include "common/allocator.hpp"
#include "training/text_score.hpp"
#include "training/reference_engine.hpp"
#include "training/run_data.hpp"
#include "training/replica.hpp"

namespace archipelago::apps {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A value for the progress lines: "—" until it is measured (NaN), never "nan".
std::string shown(double v, int width, int precision) {
  if (!std::isfinite(v)) return std::string(width > 1 ? width - 1 : 0, ' ') + "\u2014";
  char text[64];
  std::snprintf(text, sizeof text, "%*.*f", width, precision, v);
  return text;
}


std::string new_run_id() {
  auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  std::random_device device;
  char suffix[8];
  std::snprintf(suffix, sizeof suffix, "%04x", device() & 0xffff);
  return std::string(stamp) + "-" + suffix;
}

// Progress lines: an aligned table on a terminal, key=value lines otherwise (logs, pipes, CI).
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(isatty(STDOUT_FILENO)) {}

  void print(const training::ProgressPoint& p) {
    const double tokens_per_s = p.elapsed_s > 0 ? p.tokens / p.elapsed_s : 0;
    if (tty_) {
      if (!header_printed_) {
        std::printf("%7s %9s %11s %10s %10s %10s %10s %9s\n", "round", "steps", "tokens", "tok/s", "train", "held-out",
                    "MB sent", "elapsed");
        header_printed_ = true;
      }
      std::printf("%7lld %9lld %11lld %10.0f %s %s %10.1f %8.1fs\n", static_cast<long long>(p.round),
                  static_cast<long long>(p.steps), static_cast<long long>(p.tokens), tokens_per_s,
                  shown(p.train_loss, 10, 4).c_str(), shown(p.heldout_loss, 10, 4).c_str(), p.bytes_sent / 1e6,
                  p.elapsed_s);
    } else {
      std::printf("progress round=%lld steps=%lld tokens=%lld tokens_per_s=%.0f train_loss=%s heldout_loss=%s "
                  "mb_sent=%.1f elapsed_s=%.1f\n",
                  static_cast<long long>(p.round), static_cast<long long>(p.steps), static_cast<long long>(p.tokens),
                  tokens_per_s, shown(p.train_loss, 0, 4).c_str(), shown(p.heldout_loss, 0, 4).c_str(),
                  p.bytes_sent / 1e6, p.elapsed_s);
    }
    std::fflush(stdout);
  }

 private:
  bool tty_;
  bool header_printed_ = false;
};

json to_json(const run::ProgressSample& p) {
  auto number = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };
  return {{"elapsed_s", p.elapsed_s}, {"version", p.version}, {"tokens", p.tokens}, {"tokens_per_s", p.tokens_per_s},
          {"train_loss", number(p.train_loss)}, {"heldout_loss", number(p.heldout_loss)},
          {"heldout_bits_per_byte", number(p.heldout_bits_per_byte)}, {"heldout_version", p.heldout_version}, {"alive", p.alive}, {"learners", p.total}, {"goodput", p.goodput}, {"in_flight", p.in_flight}, {"unaccounted", p.unaccounted},
          {"bytes_sent", p.bytes_sent}, {"bytes_ddp_equivalent", p.bytes_ddp_equivalent}, {"restarts", p.restarts},
          {"rejected_updates", p.rejected}};
}

// Live progress of the actor runtime: a table row per sample on a terminal, key=value lines otherwise.
class ClusterProgressPrinter {
 public:
  ClusterProgressPrinter() : tty_(isatty(STDOUT_FILENO)) {}

  void print(const run::ProgressSample& p) {
    // The figures the summary ends with: goodput to three decimals, and data-parallel's bytes (ring
    // all-reduce, computed) over the bytes sent; "—" with one learner or nothing sent yet.
    // Shown once a round beyond the start has been committed: before, the learners have sent next to
    // nothing and the cumulative ratio means nothing yet.
    const bool rounds_done = p.version > p.operator_view.value("start_version", uint64_t{0});
    const double ratio = rounds_done && p.bytes_sent > 0 && p.bytes_ddp_equivalent > 0
                             ? static_cast<double>(p.bytes_ddp_equivalent) / p.bytes_sent
                             : std::nan("");
    // Merged plus in flight: what goodput becomes if the work on its way is merged, as in a clean run.
    const double with_in_flight = p.goodput + p.in_flight;
    if (tty_) {
      if (rows_ % 20 == 0) {
        std::printf("%8s %8s %9s %10s %9s %6s %9s %7s %10s %8s %8s %9s\n", "elapsed", "version", "tok/s", "train",
                    "held-out", "bits/B", "alive", "goodput", "+in flight", "restarts", "MB sent", "DP/sent");
      }
      std::printf("%7.1fs %8llu %9.0f %s %s %s %6d/%-2d %7.3f %10.3f %8lld %8.1f %8sx\n", p.elapsed_s,
                  static_cast<unsigned long long>(p.version), p.tokens_per_s, shown(p.train_loss, 10, 4).c_str(),
                  shown(p.heldout_loss, 9, 4).c_str(), shown(p.heldout_bits_per_byte, 6, 3).c_str(), p.alive,
                  p.total, p.goodput, with_in_flight, static_cast<long long>(p.restarts), p.bytes_sent / 1e6,
                  shown(ratio, 8, 0).c_str());
      ++rows_;
    } else {
      std::printf("progress elapsed_s=%.1f version=%llu tokens=%lld tokens_per_s=%.0f train_loss=%s heldout_loss=%s "
                  "heldout_bits_per_byte=%s alive=%d/%d goodput=%.3f in_flight=%.3f restarts=%lld rejected=%lld mb_sent=%.1f "
                  "mb_ddp_equivalent=%.1f ddp_bytes_ratio=%s\n",
                  p.elapsed_s, static_cast<unsigned long long>(p.version), static_cast<long long>(p.tokens),
                  p.tokens_per_s, shown(p.train_loss, 0, 4).c_str(), shown(p.heldout_loss, 0, 4).c_str(),
                  shown(p.heldout_bits_per_byte, 0, 3).c_str(), p.alive, p.total, p.goodput, p.in_flight,
                  static_cast<long long>(p.restarts), static_cast<long long>(p.rejected), p.bytes_sent / 1e6,
                  p.bytes_ddp_equivalent / 1e6, shown(ratio, 0, 1).c_str());
    }
    std::fflush(stdout);
  }

 private:
  bool tty_;
  int rows_ = 0;
};

// The bytes of text per predicted token of the held-out batches both engines score (the same
// split and windows as theirs): what turns their loss into bits per byte.
double heldout_bytes_per_token(const training::Corpus& corpus, const Config& c) {
  auto heldout = training::heldout_of(corpus, training::ReferenceSetup{c.model, c.inner, c.outer, c.data, c.run});
  if (!heldout) return 1.0;
  return training::bytes_per_predicted_token(*heldout);
}

// The held-out figures in bits per byte too, the unit that compares tokenizers: loss ÷ (ln 2 ×
// bytes per token), and the tokenizer they were measured with.
void add_bits_per_byte(json& s, const training::Corpus& corpus, const Config& c) {
  const double bytes_per_token = heldout_bytes_per_token(corpus, c);
  auto of = [bytes_per_token](const json& loss) {
    return loss.is_number() && std::isfinite(loss.get<double>())
               ? json(training::bits_per_byte(loss.get<double>(), bytes_per_token))
               : json(nullptr);
  };
  s["initial_heldout_bits_per_byte"] = of(s["initial_heldout_loss"]);
  s["heldout_bits_per_byte"] = of(s["heldout_loss"]);
  s["tokenizer"] = {{"kind", corpus.tokenizer.kind()}, {"hash", corpus.tokenizer.hash()},
                    {"vocab", corpus.tokenizer.vocab()}, {"heldout_bytes_per_token", bytes_per_token},
                    {"corpus_bytes_per_token", corpus.bytes_per_token()}};
}

// The figures both engines report (training/run_summary.hpp), under the keys summary.json has
// always had; each engine adds its own.
// What the run measured of its machine at start: the BLAS and the precision it trains in.
struct MachineFacts {
  training::BlasReport blas;
  training::PrecisionChoice precision;
};

json summary_json(const training::RunSummary& r, const std::string& run_id, const std::string& run_dir,
                  const Config& config, const MachineFacts& machine) {
  const auto& blas = machine.blas;
  return {
      {"run_id", run_id}, {"run_dir", run_dir}, {"engine", diloco::engine_name(config.engine)},
      {"mode", diloco::mode_name(r.mode)}, {"model", config.model.preset}, {"parameters", r.parameters},
      {"learners", r.learners}, {"inner_steps", r.inner_steps}, {"rounds", r.rounds}, {"steps", r.steps},
      {"tokens", r.tokens}, {"initial_heldout_loss", r.initial_heldout_loss}, {"heldout_loss", r.heldout_loss},
      {"best_version", r.best_version},
      {"best_heldout_loss", r.best_version > 0 ? json(r.best_heldout_loss) : json(nullptr)},
      {"final_minus_best", r.best_version > 0 ? json(r.heldout_loss - r.best_heldout_loss) : json(nullptr)},
      {"train_loss", std::isnan(r.train_loss) ? json(nullptr) : json(r.train_loss)}, {"wall_s", r.wall_s},
      {"tokens_per_s", r.tokens_per_s()}, {"bytes_sent", r.bytes_sent}, {"bytes_measured", r.bytes_measured},
      {"bytes_ddp_equivalent", r.bytes_ddp_equivalent}, {"blas", blas.library}, {"blas_gflops", blas.gflops},
      {"device", config.run.device},
      {"precision", machine.precision.precision},
      {"precision_setting", machine.precision.setting},
      {"precision_chosen_by", machine.precision.how},
  };
}

void print_summary_table(const json& s) {
  std::printf("\nrun %s finished\n", s["run_id"].get<std::string>().c_str());
  auto row = [](const char* name, const std::string& value) { std::printf("  %-24s %s\n", name, value.c_str()); };
  auto num = [](double v, const char* format) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, format, v);
    return std::string(buffer);
  };
  row("mode / engine", s["mode"].get<std::string>() + " / " + s["engine"].get<std::string>());
  row("learners x H", std::to_string(s["learners"].get<int>()) + " x " + std::to_string(s["inner_steps"].get<int>()));
  row("parameters", std::to_string(s["parameters"].get<int64_t>()));
  row("rounds / steps", std::to_string(s["rounds"].get<int64_t>()) + " / " + std::to_string(s["steps"].get<int64_t>()));
  row("tokens", std::to_string(s["tokens"].get<int64_t>()));
  const auto& t = s["tokenizer"];
  row("tokenizer", t["kind"] == "bytes" ? std::string("bytes (256)")
                                        : "SentencePiece, " + std::to_string(t["vocab"].get<int>()) + " pieces (" +
                                              t["hash"].get<std::string>() + "), " +
                                              num(t["heldout_bytes_per_token"].get<double>(), "%.2f") +
                                              " bytes per held-out token");
  row("held-out loss", num(s["initial_heldout_loss"].get<double>(), "%.4f") + " -> " +
                           num(s["heldout_loss"].get<double>(), "%.4f") + " nats/token (" +
                           num(s["heldout_bits_per_byte"].get<double>(), "%.3f") + " bits per byte)");
  if (s.value("best_version", uint64_t{0}) > 0 && s["best_heldout_loss"].is_number()) {
    row("best version scored", "v" + std::to_string(s["best_version"].get<uint64_t>()) + " at " +
                                   num(s["best_heldout_loss"].get<double>(), "%.4f") + " (final - best " +
                                   num(s["final_minus_best"].get<double>(), "%+.4f") + ")");
  }
  row("wall time", num(s["wall_s"].get<double>(), "%.1f s"));
  row("tokens / s", num(s["tokens_per_s"].get<double>(), "%.0f"));
  const bool measured = s.value("bytes_measured", false);
  std::string sent = num(s["bytes_sent"].get<int64_t>() / 1e6, "%.1f");
  if (s.contains("bytes_up")) {
    sent += "  (up " + num(s["bytes_up"].get<int64_t>() / 1e6, "%.1f") + ", down " +
            num(s["bytes_down"].get<int64_t>() / 1e6, "%.1f") + ")";
  } else if (s.contains("bytes_received")) {
    sent += "  (received " + num(s["bytes_received"].get<int64_t>() / 1e6, "%.1f") + ")";
  }
  row(measured ? "MB sent (measured)" : "MB sent (computed)", sent);
  const double ring = static_cast<double>(s["bytes_ddp_equivalent"].get<int64_t>());
  if (s["mode"] == "ddp") {
    // The gloo job against the ring formula: how far the formula is from what crossed the sockets.
    if (measured && ring > 0) {
      row("ring formula (computed)", num(ring / 1e6, "%.1f") + " MB  (measured / formula " +
                                         num(s["bytes_sent"].get<int64_t>() / ring, "%.3f") + ")");
    }
  } else if (ring > 0 && s.value("bytes_sent", int64_t{0}) > 0) {
    row("MB data-parallel (computed)", num(ring / 1e6, "%.1f") + "  (ring all-reduce, fp32: " +
                                           num(ring / s["bytes_sent"].get<int64_t>(), "%.0f") + "x the bytes sent)");
  } else if (s["learners"].get<int>() <= 1) {
    row("data-parallel baseline", "none: one learner sends nothing in data-parallel training");
  }
  if (s.contains("restart_events")) {
    row("job restarts", std::to_string(s["restarts"].get<int64_t>()) + " (every worker, from the last checkpoint)");
    row("goodput", num(s["goodput"].get<double>(), "%.3f") + "  (" + num(s["kept_step_s"].get<double>(), "%.1f") +
                       " s of kept steps in " + num(s["allocated_s"].get<double>(), "%.1f") + " s since the first step)");
  }
  if (s.contains("versions_per_fragment_round")) {
    row("versions / fragment round", num(s["versions_per_fragment_round"].get<double>(), "%.2f"));
  }
  if (s.contains("versions_committed")) {
    row("versions committed", std::to_string(s["versions_committed"].get<int64_t>()));
    std::string badput;
    const auto parts = s["badput"];  // named: items() must not outlive it
    for (const auto& [part, share] : parts.items()) {
      if (share.get<double>() >= 0.0005 || share.get<double>() <= -0.0005) {
        badput += (badput.empty() ? "" : ", ") + part + " " + num(share.get<double>(), "%.3f");
      }
    }
    row("goodput", num(s["goodput"].get<double>(), "%.3f") + "  (badput: " + badput + ")");
    row("learner restarts", std::to_string(s["restarts"].get<int64_t>()));
    row("rejected updates", std::to_string(s["rejected_updates"].get<int64_t>()));
  }
  row("run directory", s["run_dir"].get<std::string>());
}

// train.mode = "ddp" in the actor runtime's place: a data-parallel job of train.learners worker
// processes on gloo, its bytes measured on their sockets.
int run_data_parallel(const Config& config, const std::string& run_id, const fs::path& run_dir,
                      const MachineFacts& machine, const training::Corpus& corpus, std::ofstream& metrics,
                      bool json_line) {
  auto log = component_logger("train");
  run::DataParallelJobOptions options;
  // The workers exec the very file this process runs, even if a rebuild has replaced its path since.
  options.binary = "/proc/self/exe";
  options.config_file = run_dir / "config.toml";
  options.run_dir = run_dir;
  options.world = config.run.learners;
  // The workers share the cores as learners do: cores ÷ workers LibTorch threads each (at least one).
  const int cores = config.run.threads > 0 ? config.run.threads : static_cast<int>(std::thread::hardware_concurrency());
  options.threads_per_worker = std::max(1, cores / std::max(1, config.run.learners));
  options.max_seconds = config.run.max_seconds;
  if (config.run.max_seconds > 0) options.timeout_s = config.run.max_seconds * 4 + 600;
  // A non-elastic job: a failed worker restarts them all from rank 0's last checkpoint, at most
  // runtime.max_restarts times.
  options.checkpoint = run_dir / "ddp-checkpoint.bin";
  options.max_restarts = config.restart.max_restarts;
  ProgressPrinter printer;
  auto result = run::run_data_parallel_job(options, [&](const training::ProgressPoint& point) {
    printer.print(point);
    metrics << run::to_json(point).dump() << "\n" << std::flush;
  });
  if (!result) {
    log->error("{}", result.error().reason);
    return 1;
  }
  const auto& r = *result;
  json summary = summary_json(r, run_id, run_dir.string(), config, machine);
  json workers = json::array();
  for (const auto& w : r.workers) {
    workers.push_back({{"rank", w.rank}, {"bytes_sent", w.bytes_sent}, {"bytes_received", w.bytes_received},
                       {"store_bytes_sent", w.store_bytes_sent}, {"store_bytes_received", w.store_bytes_received},
                       {"broadcast_bytes", w.broadcast_bytes}, {"resumed_from_step", w.resumed_from_step},
                       {"wall_s", w.wall_s},
                       {"parameter_digest", w.parameter_digest}});
  }
  summary.update({{"data_parallel", "gloo ring all-reduce (LibTorch c10d ProcessGroupGloo), fp32 gradients"},
                  {"bytes_received", r.bytes_received}, {"store_bytes", r.store_bytes},
                  {"parameters_agree", r.parameters_agree}, {"workers", workers}});
  json restarts = json::array();
  for (const auto& e : r.restarts) restarts.push_back({{"at_s", e.at_s}, {"rank", e.rank}, {"exit_code", e.exit_code}});
  summary["restarts"] = static_cast<int64_t>(r.restarts.size());
  // Goodput of the job, measured: the time of the steps in the final parameters ÷ the time since its first step.
  summary["goodput"] = r.goodput();
  summary["kept_step_s"] = r.kept_step_s;
  summary["allocated_s"] = r.allocated_s;
  summary["restart_events"] = restarts;
  add_bits_per_byte(summary, corpus, config);
  std::ofstream(run_dir / "summary.json") << summary.dump(2) << "\n";
  print_summary_table(summary);
  if (json_line) std::printf("%s\n", summary.dump().c_str());
  std::fflush(stdout);
  if (!r.parameters_agree) {
    log->error("the workers ended with different parameters (digests differ): the all-reduce did not keep them equal");
    return 1;
  }
  return 0;
}

}  // namespace

int run_train(const TrainArguments& arguments) {
  std::optional<std::string> config_file = arguments.config_file;
  const bool resume = !arguments.resume_dir.empty();
  if (resume && !config_file) config_file = (fs::path(arguments.resume_dir) / "config.toml").string();
  auto file = read_config_file(config_file);
  if (!file) {
    std::fprintf(stderr, "archipelago: %s\n", file.error().reason.c_str());
    return 2;
  }
  std::vector<std::string> overrides;
  // A resumed run keeps its own tokenizer (the copy in its directory), whatever file it was named by.
  if (resume && fs::exists(run_tokenizer_path(arguments.resume_dir))) {
    overrides.push_back(tokenizer_override(run_tokenizer_path(arguments.resume_dir)));
  }
  overrides.insert(overrides.end(), arguments.overrides.begin(), arguments.overrides.end());
  if (arguments.engine) overrides.push_back("train.engine=" + *arguments.engine);
  if (arguments.device) overrides.push_back("train.device=" + *arguments.device);
  if (arguments.corpus) overrides.push_back("data.corpus=" + *arguments.corpus);
  if (arguments.init_from) overrides.push_back("model.init_from=" + *arguments.init_from);
  auto config = load_config(file->text, file->origin, overrides);
  if (!config) {
    std::fprintf(stderr, "archipelago: invalid configuration: %s\n", config.error().reason.c_str());
    return 2;
  }

  const std::string run_id = new_run_id();
  if (resume && config->engine != diloco::Engine::actors) {
    std::fprintf(stderr, "archipelago: --resume needs train.engine = \"actors\"\n");
    return 2;
  }
  // Operator surfaces of a local run (actors engine): the admin console and the metrics endpoint.
  const bool operated = arguments.admin_listen || arguments.metrics_listen;
  if (operated && config->engine != diloco::Engine::actors) {
    std::fprintf(stderr, "archipelago: --admin-listen and --metrics-listen need train.engine = \"actors\"\n");
    return 2;
  }
  std::optional<remote::HostPort> admin_at, metrics_at;
  for (auto [flag, text, into] : {std::tuple{"--admin-listen", &arguments.admin_listen, &admin_at},
                                  std::tuple{"--metrics-listen", &arguments.metrics_listen, &metrics_at}}) {
    if (!*text) continue;
    auto parsed = remote::parse_host_port(**text);
    if (!parsed) {
      std::fprintf(stderr, "archipelago: %s %s\n", flag, parsed.error().reason.c_str());
      return 2;
    }
    *into = *parsed;
  }
  std::shared_ptr<const net::Secret> admin_secret;
  if (operated) {
    auto secret = net::load_admin_token(arguments.admin_token_file, admin_at.has_value());
    if (!secret) {
      std::fprintf(stderr, "archipelago: %s\n", secret.error().reason.c_str());
      return 2;
    }
    if (*secret) admin_secret = std::make_shared<const net::Secret>(std::move(**secret));
  }
  const fs::path run_dir = resume ? fs::path(arguments.resume_dir)
                           : arguments.run_dir.empty() ? fs::path("archipelago-runs") / run_id
                                                       : fs::path(arguments.run_dir);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) {
    std::fprintf(stderr, "archipelago: cannot create run directory %s: %s\n", run_dir.c_str(), ec.message().c_str());
    return 1;
  }
  init_logging({run_id, config->log_level, (run_dir / "archipelago.log").string(),
                static_cast<uint64_t>(config->log_max_file_mib) << 20, static_cast<int>(config->log_max_files)});
  auto log = component_logger("train");
  if (!resume) std::ofstream(run_dir / "config.toml") << config->toml;

  // "auto" is measured on the threads one learner will have; everything after sees the result.
  MachineFacts machine;
  const bool one_at_a_time = config->engine == diloco::Engine::reference;
  machine.precision = training::choose_precision(
      {config->model, config->inner, config->run.device,
       actors::learner_thread_share(config->run.threads, one_at_a_time ? 1 : config->run.learners)});
  config->inner.precision = machine.precision.precision;
  const int threads = training::set_compute_threads(config->run.threads, machine.precision.precision);
  machine.blas = training::check_blas();
  const auto& blas = machine.blas;
  if (blas.optimized) log->info("{}", blas.message); else log->warn("{}", blas.message);
  log->info("{}", machine.precision.message);
  const auto allocator = allocator_in_use();
  if (allocator.scalable) log->info("{}", allocator.message); else log->warn("{}", allocator.message);
  log->info("run {} in {} | engine {} | mode {} | {} learner(s) | {} compute threads", run_id, run_dir.string(),
            diloco::engine_name(config->engine), diloco::mode_name(config->run.mode), config->run.learners, threads);

  auto corpus = training::load_corpus(config->data);
  if (!corpus) {
    log->error("corpus: {}", corpus.error().reason);
    return 1;
  }
  log->info("corpus: {} bytes in {} documents, {} tokens ({} tokenizer, {:.3f} bytes per token)", corpus->text.size(),
            corpus->documents.size(), corpus->tokens.size(), corpus->tokenizer.kind(), corpus->bytes_per_token());
  if (auto recorded = record_run_tokenizer(run_dir.string(), corpus->tokenizer, *config); !recorded) {
    log->error("{}", recorded.error().reason);
    return 2;
  }
  auto shared_corpus = std::make_shared<const training::Corpus>(std::move(*corpus));

  std::ofstream metrics(run_dir / "metrics.jsonl", std::ios::app);
  if (config->engine == diloco::Engine::actors && diloco::data_parallel(config->run.mode)) {
    return run_data_parallel(*config, run_id, run_dir, machine, *shared_corpus, metrics, arguments.json);
  }
  if (config->engine == diloco::Engine::actors) {
    auto runtime = to_runtime_options(*config, run_dir.string(), resume);
    const auto transport = transport_options(config->net);
    auto board = std::make_shared<MetricsBoard>();
    std::unique_ptr<MetricsServer> metrics_server;
    if (metrics_at) {
      auto reader = net::load_metrics_token(arguments.metrics_token_file, false);
      if (!reader) {
        std::fprintf(stderr, "archipelago: %s\n", reader.error().reason.c_str());
        return 2;
      }
      auto reader_secret = *reader ? std::make_shared<const net::Secret>(std::move(**reader)) : nullptr;
      auto started = MetricsServer::start(metrics_at->host, metrics_at->port, board, reader_secret, admin_secret);
      if (!started) {
        std::fprintf(stderr, "archipelago: --metrics-listen: %s\n", started.error().reason.c_str());
        return 2;
      }
      metrics_server = std::move(*started);
      std::printf("metrics and status page on http://%s:%u/\n", metrics_at->host.c_str(), metrics_server->port());
    }
    auto cluster = run::LocalCluster::start(std::move(runtime), shared_corpus);
    if (!cluster) {
      log->error("{}", cluster.error().reason);
      return cluster.error().code == ErrorCode::invalid_argument || cluster.error().code == ErrorCode::conflict ||
                     cluster.error().code == ErrorCode::not_found
                 ? 2
                 : 1;
    }
    std::unique_ptr<run::OperatorEndpoint> console;  // declared after the cluster: it goes first
    if (admin_at) {
      auto started = run::OperatorEndpoint::start(**cluster, *admin_at, admin_secret, transport);
      if (!started) {
        log->error("--admin-listen: {}", started.error().reason);
        return 2;
      }
      console = std::move(*started);
      std::printf("admin console on %s:%u (archipelago console %s:%u)\n", admin_at->host.c_str(), console->port(),
                  admin_at->host.c_str(), console->port());
    }
    std::fflush(stdout);
    ClusterProgressPrinter cluster_printer;
    auto outcome = (*cluster)->run([&](const run::ProgressSample& p) {
      cluster_printer.print(p);
      board->update(p.operator_view);
      metrics << to_json(p).dump() << "\n" << std::flush;
    });
    console.reset();
    cluster->reset();  // stops every actor before the summary is written
    if (!outcome) {
      log->error("{}", outcome.error().reason);
      return 1;
    }
    const auto& r = *outcome;
    const auto& ledger = r.details.at("goodput");  // to_json(r.goodput), made once by the cluster
    json summary = summary_json(r, run_id, run_dir.string(), *config, machine);
    summary.update({
        {"bytes_up", r.bytes_up}, {"bytes_down", r.bytes_down},
        {"ddp_bytes_ratio", r.bytes_sent > 0 && r.bytes_ddp_equivalent > 0
                                ? json(static_cast<double>(r.bytes_ddp_equivalent) / r.bytes_sent)
                                : json(nullptr)},
        {"ddp_bytes_basis", "computed: ring all-reduce of fp32 gradients, 2(M-1) model bytes per step"},
        {"versions_per_fragment_round", r.versions_per_fragment_round}, {"fragment_commits", r.fragment_commits},
        {"uplink_codec", config->outer.codec}, {"downlink_codec", config->outer.downlink_codec},
        {"learner_nonfinite_recoveries", r.learner_nonfinite_recoveries},
        {"versions_committed", r.versions_committed}, {"start_version", r.start_version},
        {"final_version", r.final_version}, {"goodput", r.goodput.goodput()},
        {"badput", ledger["badput"]}, {"goodput_seconds", ledger["seconds"]},
        {"restarts", r.restarts},
        {"infrastructure_restarts", r.infrastructure_restarts}, {"rejected_updates", r.rejected_updates},
        {"rejected_by_reason", r.details["syncer"].value("rejected", json::object())},
        {"kill_to_merge_s", r.kill_to_merge_s}, {"links_bytes", r.details["links_bytes"]},
    });
    if (arguments.sample && r.final_version > 0) {
      // What the model learned, in its own words: a short seeded sample of the final version.
      auto sample = sample_final_version(run_dir.string(), r.final_version, "The ", 160);
      if (sample) {
        summary["sample"] = *sample;
      } else {
        log->warn("no sample of version {}: {}", r.final_version, sample.error().reason);
      }
    }
    add_bits_per_byte(summary, *shared_corpus, *config);
    std::ofstream(run_dir / "summary.json") << summary.dump(2) << "\n";
    std::ofstream(run_dir / "actors.json") << r.details.dump(2) << "\n";
    print_summary_table(summary);
    if (summary.contains("sample") && !arguments.json) {
      const auto& s = summary["sample"];
      std::printf("\nsample of version %llu (seed %llu, temperature %.1f; archipelago sample --run-dir %s):\n%s%s\n",
                  static_cast<unsigned long long>(s["version"].get<uint64_t>()),
                  static_cast<unsigned long long>(s["seed"].get<uint64_t>()), s["temperature"].get<double>(),
                  run_dir.string().c_str(), s["prompt"].get<std::string>().c_str(), s["text"].get<std::string>().c_str());
    }
    if (arguments.json) std::printf("%s\n", summary.dump().c_str());
    std::fflush(stdout);
    return 0;
  }
  ProgressPrinter printer;
  training::ReferenceSetup setup{config->model, config->inner, config->outer, config->data, config->run};
  setup.drop_outer_gradient = config->faults.drop_outer_gradient;
  setup.drop_seed = config->faults.seed;
  auto result = training::run_reference(setup, shared_corpus, [&](const training::ProgressPoint& point) {
    printer.print(point);
    metrics << run::to_json(point).dump() << "\n" << std::flush;
  });
  if (!result) {
    log->error("{}", result.error().reason);
    return result.error().code == ErrorCode::invalid_argument ? 2 : 1;
  }

  json summary = summary_json(*result, run_id, run_dir.string(), *config, machine);
  summary["dropped_outer_gradients"] = result->dropped_outer_gradients;
  summary["rounds_without_outer_step"] = result->rounds_without_outer_step;
  add_bits_per_byte(summary, *shared_corpus, *config);
  std::ofstream(run_dir / "summary.json") << summary.dump(2) << "\n";
  print_summary_table(summary);
  if (arguments.json) std::printf("%s\n", summary.dump().c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace archipelago::apps

#include "run/cluster.hpp"
#include "actors/events.hpp"
#include "actors/directory.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include <caf/all.hpp>

#include "actors/authorization.hpp"
#include "actors/compute_threads.hpp"
#include "actors/evaluator.hpp"
#include "actors/failure_monitor.hpp"
#include "actors/fragment_state.hpp"
#include "actors/learner.hpp"
#include "run/run_setup.hpp"
#include "actors/store_actor.hpp"
#include "actors/supervisor.hpp"
#include "actors/syncer.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "diloco/version_manifest.hpp"
#include "storage/checkpoint_store.hpp"
#include "training/outer.hpp"
#include "training/replica.hpp"
#include "training/run_data.hpp"

namespace archipelago::run {

using namespace archipelago::actors;  // the actors a process is assembled from

namespace {

using Clock = std::chrono::steady_clock;

caf::actor_system_config make_config() {
  caf::actor_system_config config;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  config.set("scheduler.max-threads", std::min<size_t>(cores, 2));
  config.set("logger.file-verbosity", caf::atom("quiet"));
  config.set("logger.console-verbosity", caf::atom("quiet"));
  return config;
}

}  // namespace

struct LocalCluster::Impl {
  std::shared_ptr<const RuntimeOptions> options;
  std::shared_ptr<const training::Corpus> corpus;
  std::shared_ptr<const ModelLayout> layout;
  std::shared_ptr<storage::CheckpointStore> store;
  caf::actor_system_config config = make_config();
  std::unique_ptr<caf::actor_system> system;
  caf::actor root;
  Clock::time_point started;
  uint64_t start_version = 0;
  SyncerAccounting accounting_at_start;  // the resumed version's manifest's
  double initial_heldout_loss = std::nan("");
  int64_t tokens_per_learner_step = 0;
  int learner_slots = 0;
  int64_t start_steps_total = 0;
  double started_s = 0;                  // monotonic_seconds() at start
  std::atomic<bool> drain_requested{false};
  std::shared_ptr<spdlog::logger> log = component_logger("cluster");

  ~Impl() { shutdown(); }

  void shutdown() {
    if (!system) return;
    if (root) caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    root = caf::actor{};
    system->await_all_actors_done();
    for (auto name : {caf::atom("root"), syncer_name(), store_name(), monitor_name(), evaluator_name(), learner_supervisor_name()}) {
      Directory::erase(*system, name);
    }
    for (int i = 0; i < learner_slots; ++i) Directory::erase(*system, learner_name(i));
    system.reset();
  }
};

LocalCluster::LocalCluster(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LocalCluster::~LocalCluster() = default;

caf::actor_system& LocalCluster::system() { return *impl_->system; }

double LocalCluster::elapsed_s() const { return std::chrono::duration<double>(Clock::now() - impl_->started).count(); }
double LocalCluster::started_s() const { return impl_->started_s; }
int LocalCluster::learner_slots() const { return impl_->learner_slots; }
const SyncerAccounting& LocalCluster::accounting_at_start() const { return impl_->accounting_at_start; }
void LocalCluster::request_drain() { impl_->drain_requested = true; }
int64_t LocalCluster::parameter_count() const { return impl_->layout->parameter_count; }
const RuntimeOptions& LocalCluster::options() const { return *impl_->options; }

Expected<std::unique_ptr<LocalCluster>> LocalCluster::start(RuntimeOptions options,
                                                            std::shared_ptr<const training::Corpus> corpus) {
  auto& setup = options.setup;
  const auto& run = setup.run;
  if (run.max_tokens <= 0 && run.max_seconds <= 0) {
    return make_error(ErrorCode::invalid_argument, "set train.max_tokens or train.max_seconds: the run must be bounded");
  }
  if (options.run_dir.empty()) return make_error(ErrorCode::invalid_argument, "the actor runtime needs a run directory");
  auto merge_rule = training::parse_merge_rule(setup.outer.merge);
  if (!merge_rule) return merge_rule.error();
  auto codec = messages::parse_codec(setup.outer.codec);
  if (!codec) return codec.error();

  // Data: the same split, shards and cursors as the reference engine (training/run_data.hpp).
  auto data = training::prepare_run_data(*corpus, setup);
  if (!data) return data.error();
  auto heldout = std::make_shared<const std::vector<training::Batch>>(std::move(data->heldout));

  auto impl = std::make_unique<Impl>();
  const bool ddp = diloco::data_parallel(run.mode);
  impl->learner_slots = ddp ? 1 : run.learners;
  impl->tokens_per_learner_step = training::tokens_per_learner_step(setup) * (ddp ? run.learners : 1);
  const int64_t step_limit = training::plan_step_budget(setup);

  // LibTorch and OpenBLAS threads are process-wide: give each learner its share of the cores.
  const int threads = configure_compute_threads(run.threads, impl->learner_slots,
                                                training::resolve_precision(setup.inner.precision, run.device));

  // Model layout, θ0 and the initial held-out loss from one replica built with the run's seed.
  auto start = build_model_start(setup);
  if (!start) return start.error();
  auto& replica = start->replica;
  const auto layout = start->layout;
  const auto initial = start->initial_fragments;

  // The store: a fresh run needs an empty one, --resume a committed version.
  auto store = open_run_store(options);
  if (!store) return store.error();
  impl->store = std::move(*store);
  auto latest = impl->store->latest_committed();
  std::vector<int64_t> start_steps(impl->learner_slots, 0);
  if (options.resume) {
    if (!latest) return make_error(ErrorCode::not_found, "--resume: no committed version in " + options.run_dir);
    impl->start_version = latest->version;
    std::vector<float> flat(layout->parameter_count);
    for (const auto& [fragment, blob] : latest->fragments) {
      if (fragment >= layout->plan.fragments.size() ||
          blob.size() != layout->plan.fragments[fragment].numel * sizeof(float)) {
        return make_error(ErrorCode::inconsistent, "--resume: the stored model does not match this configuration");
      }
      auto values = bytes_to_floats(blob);
      training::scatter_fragment(layout->plan, layout->parameters, static_cast<int>(fragment), values.data(), flat.data());
    }
    replica->write_parameters(flat);
    impl->initial_heldout_loss = replica->evaluate(*heldout);
    auto manifest = diloco::VersionManifest::decode(latest->manifest_json);
    auto accounting = manifest ? decode_status<SyncerAccounting>(manifest->accounting, "the manifest's accounting")
                               : Expected<SyncerAccounting>(manifest.error());
    if (accounting) {
      impl->accounting_at_start = *accounting;
      for (int m = 0; m < impl->learner_slots; ++m) {
        auto learner = accounting->learners.find(learner_id(m));
        start_steps[m] = learner == accounting->learners.end() ? 0 : learner->second.steps_merged_fragment0;
        impl->start_steps_total += start_steps[m];
      }
    } else {
      impl->log->warn("--resume: version {}: {}; the learners start from step 0", latest->version,
                      accounting.error().to_string());
    }
  } else {
    if (latest) {
      return make_error(ErrorCode::conflict, options.run_dir + " already holds a run (version " +
                                                 std::to_string(latest->version) + "); use --resume to continue it");
    }
    impl->start_version = 1;
    impl->initial_heldout_loss = replica->evaluate(*heldout);
  }
  replica.reset();

  if (!options.events) options.events = std::make_shared<EventLog>();
  impl->options = std::make_shared<const RuntimeOptions>(options);
  impl->corpus = std::move(corpus);
  impl->layout = layout;
  impl->system = std::make_unique<caf::actor_system>(impl->config);
  impl->started = Clock::now();
  impl->started_s = monotonic_seconds();
  const auto deadline = run.max_seconds > 0
                            ? impl->started + std::chrono::milliseconds(static_cast<int64_t>(run.max_seconds * 1000))
                            : Clock::time_point::max();

  // Learners, under their own supervisor.
  SupervisorSpec learners{"learner_supervisor", learner_supervisor_name(), impl->options, {}, true};
  auto shared_shards = std::make_shared<std::vector<std::vector<training::Span>>>(std::move(data->shards));
  for (int m = 0; m < impl->learner_slots; ++m) {
    ChildSpec child;
    child.name = learner_name(m);
    child.id = learner_id(m);
    child.start_step = start_steps[m];
    auto opts = impl->options;
    auto corpus_ptr = impl->corpus;
    child.spawn = [=](caf::actor_system& system, const ChildContext& context) {
      LearnerSpec spec;
      spec.index = context.index;
      spec.incarnation = context.incarnation;
      spec.options = opts;
      spec.corpus = corpus_ptr;
      if (ddp) spec.shards = *shared_shards; else spec.shards = {(*shared_shards)[context.index]};
      spec.layout = layout;
      spec.start_step = context.last_step;
      spec.step_limit = step_limit;
      spec.deadline = deadline;
      spec.supervisor = context.supervisor;
      spec.crash_on_start = opts->faults.crash_learner_on_start == context.index;
      return spawn_learner(system, std::move(spec));
    };
    learners.children.push_back(std::move(child));
  }

  // Root supervisor: store, monitor, syncer, evaluator, learner supervisor (in this order).
  SupervisorSpec root{"root_supervisor", caf::atom("root"), impl->options, {}};
  add_infrastructure_children(root, impl->store, impl->options, initial, heldout, layout);
  root.children.push_back({learner_supervisor_name(), "learner_supervisor", 0,
                           [=](caf::actor_system& s, const ChildContext&) { return spawn_supervisor(s, learners); }});
  impl->root = spawn_supervisor(*impl->system, std::move(root));
  Directory::put(*impl->system, caf::atom("root"), impl->root);
  if (diloco::dynamic_local_steps(run.mode)) {
    impl->log->info("async mode: per-arrival merges, outer.optimizer {}; dynamic local steps: a learner runs round(H x its "
                    "speed / the fastest learner's speed) inner steps per fragment period",
                    setup.outer.optimizer);
  }
  impl->log->info("{} cluster: {} learner(s) x {} compute thread(s), {} fragment(s), {} parameters, step limit {}, "
                  "run dir {}", diloco::mode_name(run.mode), impl->learner_slots, threads, layout->plan.fragments.size(),
                  layout->parameter_count, step_limit, options.run_dir);
  return std::unique_ptr<LocalCluster>(new LocalCluster(std::move(impl)));
}

Expected<nlohmann::json> LocalCluster::query(caf::atom_value name, const std::string& command,
                                             std::vector<std::string> args, double timeout_s) {
  return ask_admin(*impl_->system, name, "cluster", command, std::move(args), timeout_s);
}

bool LocalCluster::kill(caf::atom_value name) {
  auto target = Directory::get(*impl_->system, name);
  if (!target) return false;
  caf::anon_send_exit(target, caf::exit_reason::kill);
  return true;
}

bool LocalCluster::wait_for(const std::function<bool()>& condition, double timeout_s, double poll_s) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (true) {
    if (condition()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int64_t>(poll_s * 1000)));
  }
}

namespace {

// Everything the summary and the progress line need: the actors' last status replies.
struct Snapshot {
  SyncerStatus syncer;
  MonitorStatus monitor;
  SupervisorStatus learners, root;
  EvaluatorStatus evaluator;
  StoreStatus store;
};

}  // namespace

Expected<ClusterResult> LocalCluster::run(const std::function<void(const ProgressSample&)>& progress) {
  auto& impl = *impl_;
  const auto& options = *impl.options;
  const auto& run = options.setup.run;
  ClusterResult result;
  result.mode = run.mode;
  result.learners = run.learners;
  result.inner_steps = run.inner_steps;
  result.parameters = impl.layout->parameter_count;
  result.start_version = impl.start_version;

  // The last answer of each actor survives a moment when one is restarting (it does not answer).
  Snapshot last;
  auto refresh = [&](auto& into, caf::atom_value name, double timeout_s) {
    using T = std::decay_t<decltype(into)>;
    auto status = ask_status<T>(*impl.system, name, "cluster", timeout_s);
    if (status) into = std::move(*status);
    else if (status.error().code != ErrorCode::unavailable) impl.log->warn("{}", status.error().to_string());
    return status.ok();
  };
  auto refresh_all = [&] {
    refresh(last.syncer, syncer_name(), 5);
    refresh(last.monitor, monitor_name(), 5);
    refresh(last.learners, learner_supervisor_name(), 5);
    refresh(last.root, caf::atom("root"), 5);
    refresh(last.evaluator, evaluator_name(), 5);
    refresh(last.store, store_name(), 5);
  };

  // A resumed run's earlier processes are not this run's: their merged compute is subtracted.
  const auto slot_ids = learner_ids(impl.learner_slots);
  auto goodput_of = [&](const Snapshot& s, double wall) {
    return ledger_from_status(wall, slot_ids, s.monitor, s.syncer, impl.accounting_at_start);
  };
  auto tokens_of = [&](const Snapshot& s) {
    return s.learners.steps_computed * impl.tokens_per_learner_step;
  };
  // Measured where the bytes cross a link: learner -> syncer, syncer -> learners, store -> learners.
  auto bytes_up_of = [](const Snapshot& s) { return learner_link_bytes(s.syncer, s.store).up; };
  auto bytes_down_of = [](const Snapshot& s) { return learner_link_bytes(s.syncer, s.store).down; };
  auto bytes_of = [&](const Snapshot& s) { return bytes_up_of(s) + bytes_down_of(s); };
  // The figures at `at_s` on the run's clock, the ledger's included.
  auto sample = [&](const Snapshot& s, double at_s) {
    ProgressSample p;
    p.elapsed_s = at_s;
    p.version = s.syncer.version;
    p.tokens = tokens_of(s);
    p.tokens_per_s = p.elapsed_s > 0 ? p.tokens / p.elapsed_s : 0;
    p.train_loss = recent_train_loss(s.monitor, s.syncer);
    p.heldout_loss = s.evaluator.scored() ? *s.evaluator.heldout_loss : std::nan("");
    p.heldout_bits_per_byte = s.evaluator.scored() ? s.evaluator.heldout_bits_per_byte.value_or(std::nan("")) : std::nan("");
    p.heldout_version = s.evaluator.scored_version;
    p.alive = s.monitor.alive;
    p.total = impl.learner_slots;
    const auto ledger = goodput_of(s, p.elapsed_s);
    p.goodput = ledger.goodput();
    p.in_flight = ledger.share(ledger.seconds.in_flight);
    p.unaccounted = ledger.unaccounted_share();
    p.bytes_sent = bytes_of(s);
    p.bytes_ddp_equivalent = ddp_equivalent_bytes(p.tokens, impl.tokens_per_learner_step / (diloco::data_parallel(run.mode) ? run.learners : 1),
                                                  result.parameters, run.learners);
    p.restarts = s.learners.restarts;
    p.rejected = s.syncer.rejected_total;
    p.operator_view = operator_sample(p.elapsed_s, impl.start_version, s.syncer, s.monitor, s.evaluator, ledger);
    p.operator_view["tokens"] = p.tokens;
    p.operator_view["alive"] = p.alive;
    // In one process the links are the learners' mailboxes, counted where the bytes cross them.
    p.operator_view["links"] = nlohmann::json::array(
        {{{"node", "learners"}, {"site", "local"}, {"bytes_sent", bytes_down_of(s)}, {"bytes_received", bytes_up_of(s)}}});
    return p;
  };

  // Fault injection schedule (seeded).
  std::mt19937_64 rng(options.faults.seed);
  double next_learner_kill = options.faults.kill_learner_every_s > 0 ? options.faults.kill_learner_every_s : -1;
  bool syncer_killed = false;
  struct Kill { std::string id; double at; bool resolved = false; };
  std::vector<Kill> kills;

  const double hard_limit_s = run.max_seconds > 0 ? run.max_seconds + options.drain_timeout_s + 60 : 24 * 3600.0;
  double next_progress = 0;
  double next_drain_notice = 0;
  while (true) {
    const double now = elapsed_s();
    if (next_learner_kill > 0 && now >= next_learner_kill && (run.max_seconds <= 0 || now < run.max_seconds)) {
      next_learner_kill += options.faults.kill_learner_every_s;
      std::vector<int> running;
      auto status = ask_status<SupervisorStatus>(*impl.system, learner_supervisor_name(), "cluster", 2);
      for (int m = 0; status && m < impl.learner_slots; ++m) {
        auto child = status->children.find(learner_id(m));
        if (child != status->children.end() && child->second.state == "running") running.push_back(m);
      }
      if (!running.empty()) {
        const int victim = running[rng() % running.size()];
        if (kill(learner_name(victim))) {
          kills.push_back({learner_id(victim), monotonic_seconds()});
          impl.log->warn("fault injection: killed {} at {:.1f} s", learner_id(victim), now);
        }
      }
    }
    if (!syncer_killed && options.faults.kill_syncer_at_s > 0 && now >= options.faults.kill_syncer_at_s) {
      syncer_killed = true;
      if (kill(syncer_name())) impl.log->warn("fault injection: killed the syncer at {:.1f} s", now);
    }
    if (impl.drain_requested && now >= next_drain_notice) {
      // The console's drain: every learner spends its budget now (again each second, for one its
      // supervisor restarts meanwhile); their last work is merged as after the budget.
      if (next_drain_notice == 0) impl.log->info("drain requested: the learners finish their in-flight work");
      next_drain_notice = now + 1;
      for (int m = 0; m < impl.learner_slots; ++m) {
        if (auto learner = Directory::get(*impl.system, learner_name(m))) {
          caf::anon_send(learner, stop_atom::value, process_key());
        }
      }
    }
    const bool report = now >= next_progress;
    auto learners = ask_status<SupervisorStatus>(*impl.system, learner_supervisor_name(), "cluster", 5);
    const bool done = learners && learners->all_ended();
    if (report || done || !kills.empty()) {
      if (report || done) refresh_all();
      else refresh(last.syncer, syncer_name(), 2);
      for (auto& k : kills) {
        if (k.resolved) continue;
        auto rec = last.syncer.learners.find(k.id);
        if (rec != last.syncer.learners.end() && rec->second.joined_s > k.at && rec->second.first_merge_after_join_s > k.at) {
          k.resolved = true;
          result.kill_to_merge_s.push_back(rec->second.first_merge_after_join_s - k.at);
        }
      }
      if (report) {
        next_progress = now + options.progress_interval_s;
        auto p = sample(last, elapsed_s());
        result.curve.push_back(p);
        if (progress) progress(p);
      }
    }
    if (done) break;
    if (now > hard_limit_s) {
      impl.log->error("the run did not finish within {:.0f} s: stopping it", hard_limit_s);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Let the syncer merge what is still pending, then score the final committed version.
  wait_for([&] {
    auto s = ask_status<SyncerStatus>(*impl.system, syncer_name(), "cluster", 2);
    return s && s->settled();
  }, 15, 0.05);
  refresh_all();
  result.final_version = last.syncer.version;
  auto final_eval = query(evaluator_name(), "evaluate", {std::to_string(result.final_version)}, 300);
  if (!final_eval) return make_error(ErrorCode::unavailable, "final evaluation failed: " + final_eval.error().reason);
  refresh_all();
  auto scored = decode_status<EvaluationPoint>(*final_eval, "the final evaluation");
  if (!scored) return scored.error();
  result.heldout_loss = scored->heldout_loss.value_or(std::nan(""));
  result.best_version = last.evaluator.best_version;
  result.best_heldout_loss = last.evaluator.best_heldout_loss.value_or(std::nan(""));
  result.initial_heldout_loss = impl.initial_heldout_loss;
  if (std::isnan(result.initial_heldout_loss)) {
    const auto& curve = last.evaluator.curve;
    result.initial_heldout_loss = curve.empty() ? result.heldout_loss : curve[0].heldout_loss.value_or(result.heldout_loss);
  }
  result.wall_s = elapsed_s();
  result.versions_committed = static_cast<int64_t>(result.final_version) - static_cast<int64_t>(result.start_version);
  result.rounds = result.versions_committed;
  result.tokens = tokens_of(last);
  result.steps = impl.learner_slots > 0 ? last.learners.steps_computed / impl.learner_slots : 0;
  if (diloco::data_parallel(run.mode)) result.steps = last.learners.steps_computed;
  result.train_loss = last.syncer.train_loss;
  result.bytes_up = bytes_up_of(last);
  result.bytes_down = bytes_down_of(last);
  result.bytes_sent = result.bytes_up + result.bytes_down;
  result.bytes_measured = true;
  for (int64_t n : last.syncer.fragment_commits) result.fragment_commits += n;
  // Fragment rounds of the schedule: every H inner steps of the leading learner (the pace the
  // quorum follows; a straggler's slower periods are merged into its rounds).
  int64_t leading_steps = 0;
  for (const auto& [id, child] : last.learners.children) leading_steps = std::max(leading_steps, child.steps_computed);
  const double fragment_rounds =
      static_cast<double>(impl.layout->plan.fragments.size()) * leading_steps / std::max(1, run.inner_steps);
  result.versions_per_fragment_round = fragment_rounds > 0 ? result.fragment_commits / fragment_rounds : 0;
  result.bytes_ddp_equivalent = ddp_equivalent_bytes(
      result.tokens, impl.tokens_per_learner_step / (diloco::data_parallel(run.mode) ? run.learners : 1), result.parameters,
      run.learners);
  result.goodput = goodput_of(last, result.wall_s);
  // The progress table's last row is the summary's: the final version scored, the ledger at the end.
  auto final_row = sample(last, result.wall_s);
  final_row.heldout_loss = result.heldout_loss;
  result.curve.push_back(final_row);
  if (progress) progress(final_row);
  result.restarts = last.learners.restarts;
  result.infrastructure_restarts = last.root.restarts;
  result.rejected_updates = last.syncer.rejected_total;
  result.learner_nonfinite_recoveries = last.monitor.learner_nonfinite_recoveries;
  nlohmann::json links = {
      {"learners->syncer", last.syncer.bytes_from_learners},
      {"syncer->learners", last.syncer.bytes_to_learners},
      {"syncer->store", last.store.bytes_received},
      {"store->learners", last.store.bytes_served_learners},
      {"store->evaluator+syncer", last.store.bytes_served - last.store.bytes_served_learners},
      {"learners->monitor", last.monitor.heartbeat_bytes}};
  result.details = {{"syncer", last.syncer}, {"monitor", last.monitor}, {"learner_supervisor", last.learners},
                    {"root_supervisor", last.root}, {"evaluator", last.evaluator}, {"store", last.store},
                    {"links_bytes", links}, {"goodput", to_json(result.goodput)},
                    {"events", impl.options->events ? impl.options->events->recent(256) : nlohmann::json::array()}};
  return result;
}

}  // namespace archipelago::run

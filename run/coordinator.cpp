#include "run/coordinator.hpp"
#include "actors/directory.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include <caf/all.hpp>

#include "actors/evaluator.hpp"
#include "actors/events.hpp"
#include "actors/failure_monitor.hpp"
#include "actors/accounting.hpp"
#include "remote/admin.hpp"
#include "remote/gateway.hpp"
#include "run/run_setup.hpp"
#include "actors/store_actor.hpp"
#include "actors/supervisor.hpp"
#include "actors/syncer.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "diloco/version_manifest.hpp"
#include "net/link_stats.hpp"
#include "remote/server.hpp"
#include "storage/checkpoint_store.hpp"

namespace archipelago::run {

using namespace archipelago::actors;  // the actors a process is assembled from
using namespace archipelago::remote;  // and the plane between processes

namespace {

using Clock = std::chrono::steady_clock;

nlohmann::json field(const nlohmann::json& j, const std::string& key) {
  if (j.is_object()) {
    auto it = j.find(key);
    if (it != j.end() && !it->is_null()) return *it;
  }
  return nlohmann::json::object();
}

// The newest intact version's record, without its blobs (nullopt: none committed).
std::optional<storage::VersionInfo> latest_version_record(const storage::CheckpointStore& store) {
  auto version = store.latest_committed_version();
  if (!version) return std::nullopt;
  auto list = store.list();
  if (!list) return std::nullopt;
  for (auto it = list->rbegin(); it != list->rend(); ++it) {
    if (it->version == *version) return *it;
  }
  return std::nullopt;
}

// A stored version's parameters must have this configuration's fragment sizes.
Status check_shape(const storage::VersionInfo& version, const ModelLayout& layout) {
  for (const auto& entry : version.entries) {
    if (entry.role != storage::BlobRole::parameters) continue;
    if (entry.fragment >= layout.plan.fragments.size() ||
        entry.size != layout.plan.fragments[entry.fragment].numel * sizeof(float)) {
      return make_error(ErrorCode::inconsistent, "the stored model does not match this configuration");
    }
  }
  return Status::success();
}

}  // namespace

struct Coordinator::Impl {
  CoordinatorOptions options;
  std::shared_ptr<const RuntimeOptions> runtime;
  RunSetup setup;
  std::shared_ptr<storage::CheckpointStore> store;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  caf::actor root, gateway, admin;
  std::unique_ptr<remote::Server> server;  // the cross-site plane's port
  uint16_t port = 0;
  Clock::time_point started;
  std::optional<uint64_t> resumed_from;
  SyncerAccounting accounting_at_start;  // the resumed version's (goodput ledger)
  double ledger_offset_s = 0;  // the run's time before this process: a carried ledger's (accounting.hpp)
  double initial_heldout_loss = std::nan("");
  std::shared_ptr<net::LinkStats> stats;
  std::shared_ptr<RemoteCounters> counters = std::make_shared<RemoteCounters>();
  std::shared_ptr<spdlog::logger> log = component_logger("coordinator");

  ~Impl() { shutdown(); }

  void shutdown() {
    server.reset();  // no call reaches an actor once they stop
    if (!system) return;
    if (gateway) caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
    if (admin) caf::anon_send_exit(admin, caf::exit_reason::user_shutdown);
    if (root) caf::anon_send_exit(root, caf::exit_reason::user_shutdown);
    gateway = root = admin = caf::actor{};
    system->await_all_actors_done();
    for (auto name : {caf::atom("root"), syncer_name(), store_name(), monitor_name(), evaluator_name(),
                      caf::atom("gateway")}) {
      Directory::erase(*system, name);
    }
    system.reset();
  }

  Expected<nlohmann::json> query(caf::atom_value name, const std::string& command = "status",
                                 std::vector<std::string> args = {}, double timeout_s = 5) {
    return ask_admin(*system, name, "coordinator", command, std::move(args), timeout_s);
  }

  // The status of the actor `name`; the last one `into` holds when it does not answer now.
  template <class T>
  bool refresh(T& into, caf::atom_value name) {
    auto status = ask_status<T>(*system, name, "coordinator", 5);
    if (status) into = std::move(*status);
    else if (status.error().code != ErrorCode::unavailable) log->warn("{}", status.error().to_string());
    return status.ok();
  }

  double elapsed_s() const { return std::chrono::duration<double>(Clock::now() - started).count(); }
  double ledger_wall_s() const { return elapsed_s() + ledger_offset_s; }
};

Coordinator::Coordinator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Coordinator::~Coordinator() = default;
uint16_t Coordinator::port() const { return impl_->port; }

Expected<std::unique_ptr<Coordinator>> Coordinator::start(CoordinatorOptions options,
                                                          std::shared_ptr<const training::Corpus> corpus) {
  auto impl = std::make_unique<Impl>();
  auto& runtime = options.runtime;
  if (runtime.run_dir.empty()) return make_error(ErrorCode::invalid_argument, "the coordinator needs --run-dir");
  if (!options.secret) return make_error(ErrorCode::invalid_argument, "the coordinator needs a join token");
  if (runtime.setup.run.max_tokens <= 0 && runtime.setup.run.max_seconds <= 0) {
    impl->log->info("no train.max_seconds / train.max_tokens: running until SIGTERM");
  }
  const double began_s = monotonic_seconds();
  runtime.syncer.auth_token = kSessionJoinToken;  // the plane authenticated the node's session
  if (auto status = validate_transport(options.transport); !status) return status.error();
  if (auto allowed = remote::check_plaintext_allowed(options.listen.host, options.transport.tls,
                                                     options.transport.insecure_plaintext, "listening on");
      !allowed) {
    return allowed.error();
  }
  auto setup = prepare_run(runtime, *corpus);
  if (!setup) return setup.error();
  impl->setup = std::move(*setup);
  const double prepared_s = monotonic_seconds();

  auto store = open_run_store(runtime);
  if (!store) return store.error();
  impl->store = std::move(*store);
  // Only the newest intact version's record (its manifest and blob sizes) before listening: the
  // syncer restores the blobs, and the resumed version is scored once the port answers.
  auto latest = latest_version_record(*impl->store);
  nlohmann::json carried_ledger;  // the resumed version's goodput ledger (accounting.ledger), if any
  if (latest) {
    if (auto shape = check_shape(*latest, *impl->setup.layout); !shape) {
      return make_error(shape.error().code, "run directory " + runtime.run_dir + ": " + shape.error().reason);
    }
    impl->resumed_from = latest->version;
    runtime.resume = true;
    auto manifest = diloco::VersionManifest::decode(latest->manifest_json);
    auto accounting = manifest ? decode_status<SyncerAccounting>(manifest->accounting, "the manifest's accounting")
                               : Expected<SyncerAccounting>(manifest.error());
    if (accounting) {
      impl->accounting_at_start = *accounting;
      if (manifest->accounting.contains("ledger")) carried_ledger = manifest->accounting["ledger"];
    } else {
      impl->log->warn("resuming from version {}: {}; its accounting is not carried", latest->version,
                      accounting.error().to_string());
    }
  }
  // The goodput ledger goes on from the resumed version's carry: the run's whole time, this
  // process's predecessors and their downtime included, with the syncer's merged work counted whole.
  if (!carried_ledger.is_null()) {
    auto carry = ledger_carry_from_json(carried_ledger);
    if (carry) {
      runtime.ledger_at_start = std::make_shared<const LedgerCarry>(*carry);
      runtime.run_started_unix_s = carry->run_started_unix_s;
      impl->accounting_at_start = SyncerAccounting{};
    } else {
      impl->log->warn("committed version {}: {}; the goodput ledger counts from this process's start",
                      *impl->resumed_from, carry.error().reason);
    }
  }
  runtime.events = std::make_shared<EventLog>();
  const double now_unix = unix_seconds();
  if (runtime.run_started_unix_s > 0) {
    impl->ledger_offset_s = std::max(0.0, now_unix - runtime.run_started_unix_s);
  } else {
    runtime.run_started_unix_s = now_unix;
  }
  impl->runtime = std::make_shared<const RuntimeOptions>(runtime);
  impl->stats = std::make_shared<net::LinkStats>(options.site);
  impl->config.set("scheduler.max-threads", std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 2));
  impl->config.set("logger.file-verbosity", caf::atom("quiet"));
  impl->config.set("logger.console-verbosity", caf::atom("quiet"));
  impl->system = std::make_unique<caf::actor_system>(impl->config);
  impl->started = Clock::now();

  // Root supervisor: store, monitor, syncer, evaluator — a local cluster's tree without learners.
  SupervisorSpec root{"root_supervisor", caf::atom("root"), impl->runtime, {}};
  add_infrastructure_children(root, impl->store, impl->runtime, impl->setup.initial_fragments,
                              impl->setup.heldout, impl->setup.layout);
  impl->root = spawn_supervisor(*impl->system, std::move(root));
  Directory::put(*impl->system, caf::atom("root"), impl->root);

  AdminSpec admin{std::make_shared<AdminSessions>(), impl->counters, impl->stats, runtime.setup.run.mode,
                  runtime.run_dir, monotonic_seconds()};
  admin.learner_slots = runtime.setup.run.learners;
  admin.events = impl->runtime->events;
  admin.accounting_at_start = impl->accounting_at_start;
  admin.ledger_offset_s = impl->ledger_offset_s;
  caf::actor_system* system = impl->system.get();
  admin.control = [system](const messages::LearnerControl& control) -> Expected<nlohmann::json> {
    // To the node that runs the learner, through the gateway and the node's session.
    auto gateway = Directory::get(*system, caf::atom("gateway"));
    if (!gateway) return make_error(ErrorCode::unavailable, "the gateway is not running");
    auto bytes = Outbox("admin").wrap(control);
    if (!bytes) return bytes.error();
    caf::scoped_actor self{*system};
    Expected<nlohmann::json> result = make_error(ErrorCode::unavailable, "no answer from the gateway");
    self->request(gateway, std::chrono::seconds(5), control_atom::value, process_key(), std::move(*bytes))
        .receive(
            [&](bool ok, std::string& node) {
              result = ok ? Expected<nlohmann::json>(nlohmann::json{{"learner", control.learner_id}, {"node", node}})
                          : Expected<nlohmann::json>(make_error(ErrorCode::not_found, node));
            },
            [&](caf::error& error) { result = make_error(ErrorCode::unavailable, system->render(error)); });
    return result;
  };
  auto sessions = admin.sessions;
  impl->admin = spawn_admin(*impl->system, std::move(admin));
  GatewaySpec gateway{options.secret, options.config_toml, options.topology_toml, options.topology, options.site,
                      runtime.setup.run.learners, impl->stats, impl->counters, options.admin_secret, impl->admin,
                      sessions, options.transport.slot_grace_s};
  impl->gateway = spawn_gateway(*impl->system, std::move(gateway));
  Directory::put(*impl->system, caf::atom("gateway"), impl->gateway);
  remote::ServerSpec plane;
  plane.system = impl->system.get();
  plane.gateway = impl->gateway;
  plane.join_secret = options.secret;
  plane.admin_secret = options.admin_secret;
  plane.counters = impl->counters;
  plane.host = options.listen.host;
  plane.port = options.listen.port;
  plane.tls = tls_files(options.transport);
  plane.insecure_plaintext = options.transport.insecure_plaintext;
  plane.limits = edge_limits(options.transport);
  plane.tokenizer_model = options.tokenizer_model;
  plane.shard = runtime.shard.index;
  plane.shards = runtime.shard.count;
  auto server = remote::Server::start(std::move(plane));
  if (!server) return server.error();
  impl->server = std::move(*server);
  impl->counters->edge = impl->server->counters();
  impl->port = impl->server->port();
  impl->log->info("ready in {:.3f} s: data and model {:.3f} s, store and actors {:.3f} s", monotonic_seconds() - began_s,
                  prepared_s - began_s, monotonic_seconds() - prepared_s);
  impl->options = std::move(options);
  if (runtime.shard.count > 1) {
    impl->log->info("syncer {}: fragments {}", runtime.shard.name(),
                    nlohmann::json(runtime.shard.owned(static_cast<int>(impl->setup.layout->plan.fragments.size()))).dump());
  }
  impl->log->info("coordinator listening on {}:{}{} (site {}), {} learner slot(s), {} parameters, {}", impl->options.listen.host,
                  impl->port, impl->options.transport.tls ? " (TLS)" : "", impl->options.site,
                  runtime.setup.run.learners, impl->setup.layout->parameter_count,
                  impl->resumed_from ? "resuming from committed version " + std::to_string(*impl->resumed_from)
                                     : std::string("fresh run"));
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(impl)));
}

nlohmann::json to_json(const CoordinatorSummary& s) {
  nlohmann::json learners = nlohmann::json::object();
  for (const auto& [id, r] : s.learner_records) {
    learners[id] = {{"joins", r.joins}, {"active", r.active}, {"contributions_merged", r.contributions_merged},
                    {"first_merge_after_join_s", r.first_merge_after_join_s}, {"joined_s", r.joined_s}};
  }
  const auto ledger = actors::to_json(s.ledger);
  const auto& remote = s.remote;
  auto counter = [&remote](const char* key) { return remote.contains(key) ? remote[key] : nlohmann::json(nullptr); };
  return {
      {"role", "coordinator"}, {"run_dir", s.run_dir}, {"shard", s.shard}, {"shards", s.shards}, {"listen", s.listen},
      {"tls", s.tls}, {"site", s.site}, {"mode", diloco::mode_name(s.mode)},
      {"parameters", s.parameters}, {"fragment_numel", s.fragment_numel},
      {"codec", s.codec}, {"downlink_codec", s.downlink_codec}, {"learner_slots", s.learners},
      {"bytes_up", s.bytes_up}, {"bytes_down", s.bytes_down},
      {"fragment_commits", s.fragment_commits},
      {"start_version", s.start_version}, {"final_version", s.final_version}, {"versions_committed", s.rounds},
      {"resumed_from_version", s.resumed_from_version ? nlohmann::json(*s.resumed_from_version) : nlohmann::json(nullptr)},
      {"learners_seen", remote.value("learners_seen", 0)}, {"learners", learners},
      {"tokens", s.tokens}, {"initial_heldout_loss", s.initial_heldout_loss},
      {"heldout_loss", s.heldout_loss}, {"heldout_bits_per_byte", s.heldout_bits_per_byte}, {"wall_s", s.wall_s},
      {"bytes_cross_site", s.bytes_cross_site}, {"bytes_links_total", s.bytes_links_total},
      {"links", s.links}, {"cross_site_vs_data_parallel", s.cross_site_vs_data_parallel},
      {"joins_accepted", counter("joins_accepted")}, {"joins_refused", counter("joins_refused")},
      {"admin_sessions", counter("admin_sessions")}, {"edge", counter("edge")},
      {"rejected_foreign", counter("rejected_foreign")}, {"refused", counter("refused")},
      {"rejected_updates", s.rejected_updates}, {"rejected_by_reason", s.rejected_by_reason},
      {"stopped_by", s.stopped_by}, {"first_commit_s", s.first_commit_s},
      {"goodput", ledger["goodput"]}, {"badput", ledger["badput"]}, {"goodput_seconds", ledger["seconds"]},
  };
}

Expected<CoordinatorSummary> Coordinator::run(const std::function<bool()>& stop_requested,
                                          const std::function<void(const nlohmann::json&)>& progress) {
  auto& impl = *impl_;
  const auto& run = impl.runtime->setup.run;
  const double max_seconds = run.max_seconds;
  std::string stopped_by;
  double next_progress = 0;
  SyncerStatus syncer;
  MonitorStatus monitor;
  EvaluatorStatus evaluator;
  std::optional<uint64_t> start_version;
  int64_t start_tokens = 0;
  double first_commit_s = -1;  // monotonic_seconds() when this process first saw a new committed version
  // The held-out loss the run resumed from (or of θ0), scored beside the run now that the port
  // answers and the syncer restores: a restarted coordinator is back to nodes before it ends.
  // A syncer shard holds only its own fragments' versions: nothing here to score.
  const bool sharded = impl.runtime->shard.count > 1;
  auto initial_loss = std::async(std::launch::async, [&impl, sharded]() -> Expected<double> {
    if (sharded) return std::nan("");
    std::optional<storage::VersionData> resumed;
    if (impl.resumed_from) {
      auto version = impl.store->get(*impl.resumed_from);
      if (!version) return version.error();
      resumed = std::move(*version);
    }
    return heldout_loss(*impl.runtime, impl.setup, resumed ? &*resumed : nullptr);
  });
  bool initial_loss_taken = false;
  auto take_initial_loss = [&] {
    if (initial_loss_taken) return;
    initial_loss_taken = true;
    auto loss = initial_loss.get();
    if (loss) impl.initial_heldout_loss = *loss;
    else impl.log->warn("held-out loss at start: {}", loss.error().reason);
  };
  const auto slot_ids = learner_ids(run.learners);
  while (true) {
    const double now = impl.elapsed_s();
    impl.refresh(syncer, syncer_name());
    if (!start_version && syncer.phase == "ready") {
      start_version = syncer.version;
      start_tokens = syncer.tokens_merged();
    }
    if (start_version && first_commit_s < 0 && syncer.version > *start_version) {
      first_commit_s = monotonic_seconds();
    }
    if (stop_requested()) stopped_by = "signal";
    else if (impl.counters->drain_requested) stopped_by = "drain";
    else if (max_seconds > 0 && now >= max_seconds) stopped_by = "max_seconds";
    else if (run.max_tokens > 0 && syncer.tokens_merged() >= run.max_tokens) stopped_by = "max_tokens";
    if (now >= next_progress || !stopped_by.empty()) {
      next_progress = now + impl.runtime->progress_interval_s;
      impl.refresh(monitor, monitor_name());
      impl.refresh(evaluator, evaluator_name());
      auto gateway = impl.counters->to_json();
      const auto traffic = impl.stats->snapshot();
      const auto ledger = ledger_from_status(impl.ledger_wall_s(), slot_ids, monitor, syncer, impl.accounting_at_start);
      auto p = operator_sample(now, start_version.value_or(0), syncer, monitor, evaluator, ledger);
      p["tokens"] = syncer.tokens_merged();
      p["shard"] = impl.runtime->shard.index;
      p["shards"] = impl.runtime->shard.count;
      p["alive"] = monitor.alive;
      p["nodes"] = field(gateway, "nodes").size();
      p["bytes_cross_site"] = traffic.cross_site().bytes_sent + traffic.cross_site().bytes_received;
      // For the metrics endpoint and status page (apps/metrics_server.hpp): counters as measured.
      nlohmann::json links = nlohmann::json::array();
      for (const auto& peer : traffic.peers) {
        links.push_back({{"node", peer.node}, {"site", peer.site}, {"bytes_sent", peer.counters.bytes_sent},
                         {"bytes_received", peer.counters.bytes_received}});
      }
      p["links"] = links;
      p["refused"] = field(gateway, "refused");
      p["sessions"] = field(gateway, "nodes");
      if (progress) progress(p);
    }
    if (!stopped_by.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  impl.log->info("stopping ({}): telling the nodes, draining", stopped_by);

  // Nodes finish their in-flight updates and leave; commit what arrives, within the drain timeout.
  caf::anon_send(impl.gateway, stop_atom::value, process_key());
  const auto drain_until = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(
                                              (impl.runtime->drain_timeout_s + 2) * 1000));
  while (Clock::now() < drain_until) {
    if (field(impl.counters->to_json(), "nodes").empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto settle_until = Clock::now() + std::chrono::seconds(15);
  while (Clock::now() < settle_until) {
    if (impl.refresh(syncer, syncer_name()) && syncer.settled()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const uint64_t final_version = syncer.version;
  // The ledger as the run ends: the nodes' last slot reports came with their learners' exits.
  impl.refresh(monitor, monitor_name());
  const auto ledger = ledger_from_status(impl.ledger_wall_s(), slot_ids, monitor, syncer, impl.accounting_at_start);
  auto final_eval = sharded ? Expected<nlohmann::json>(nlohmann::json::object())
                            : impl.query(evaluator_name(), "evaluate", {std::to_string(final_version)}, 300);
  if (!final_eval) return make_error(ErrorCode::unavailable, "final evaluation failed: " + final_eval.error().reason);
  auto scored = decode_status<EvaluationPoint>(*final_eval, "the final evaluation");  // sharded: none
  if (!scored) return scored.error();

  // Links: bytes per remote node as this process counted them, and the data-parallel comparison.
  const auto snapshot = impl.stats->snapshot();
  nlohmann::json links = nlohmann::json::array();
  std::set<std::string> sites{impl.options.site};
  take_initial_loss();
  auto remote = impl.counters->to_json();
  for (const auto& peer : snapshot.peers) {
    sites.insert(peer.site);
    nlohmann::json link = {{"node", peer.node}, {"site", peer.site}, {"bytes_sent", peer.counters.bytes_sent},
                           {"bytes_received", peer.counters.bytes_received},
                           {"cross_site", peer.site != impl.options.site}};
    link.update(field(field(remote, "link_messages"), peer.node));
    links.push_back(link);
  }
  const auto cross = snapshot.cross_site();
  const uint64_t bytes_cross_site = cross.bytes_sent + cross.bytes_received;
  const int64_t tokens = syncer.tokens_merged() - start_tokens;
  nlohmann::json efficiency = nullptr;
  net::DataParallelBaseline baseline{static_cast<uint64_t>(impl.setup.layout->parameter_count), 4,
                                     static_cast<uint32_t>(sites.size()),
                                     static_cast<uint64_t>(impl.setup.tokens_per_learner_step * run.learners)};
  if (auto e = net::compare_to_data_parallel(bytes_cross_site, tokens > 0 ? tokens : 0, baseline)) {
    efficiency = {{"cross_site_bytes_per_token", e->cross_site_bytes_per_token},
                  {"data_parallel_bytes_per_token", e->data_parallel_bytes_per_token},
                  {"fraction_of_data_parallel", e->fraction_of_data_parallel}};
  }
  const uint64_t first_version = start_version.value_or(final_version);
  CoordinatorSummary summary;
  summary.mode = run.mode;
  summary.learners = run.learners;
  summary.inner_steps = run.inner_steps;
  summary.parameters = impl.setup.layout->parameter_count;
  summary.rounds = static_cast<int64_t>(final_version) - static_cast<int64_t>(first_version);
  summary.tokens = tokens;
  summary.initial_heldout_loss = impl.initial_heldout_loss;
  summary.heldout_loss = scored->heldout_loss.value_or(std::nan(""));
  summary.train_loss = syncer.train_loss;
  summary.wall_s = impl.elapsed_s();
  summary.bytes_up = static_cast<int64_t>(snapshot.total().bytes_received);
  summary.bytes_down = static_cast<int64_t>(snapshot.total().bytes_sent);
  summary.bytes_sent = summary.bytes_up + summary.bytes_down;
  summary.bytes_measured = true;
  summary.bytes_ddp_equivalent =
      ddp_equivalent_bytes(tokens, impl.setup.tokens_per_learner_step, summary.parameters, impl.runtime->setup.run.learners);
  summary.run_dir = impl.runtime->run_dir;
  summary.shard = impl.runtime->shard.index;
  summary.shards = impl.runtime->shard.count;
  summary.listen = impl.options.listen.host + ":" + std::to_string(impl.port);
  summary.tls = impl.options.transport.tls;
  summary.site = impl.options.site;
  for (const auto& f : impl.setup.layout->plan.fragments) summary.fragment_numel.push_back(f.numel);
  summary.codec = impl.runtime->setup.outer.codec;
  summary.downlink_codec = impl.runtime->setup.outer.downlink_codec;
  summary.fragment_commits = syncer.fragment_commits;
  summary.start_version = first_version;
  summary.final_version = final_version;
  summary.resumed_from_version = impl.resumed_from;
  for (const auto& [id, r] : syncer.learners) {
    summary.learner_records[id] = {r.joins, r.active, r.contributions_merged, r.first_merge_after_join_s, r.joined_s};
  }
  summary.heldout_bits_per_byte = scored->heldout_bits_per_byte.value_or(std::nan(""));
  summary.bytes_cross_site = bytes_cross_site;
  summary.bytes_links_total = snapshot.total().bytes_sent + snapshot.total().bytes_received;
  summary.links = links;
  summary.cross_site_vs_data_parallel = efficiency;
  summary.remote = remote;
  summary.rejected_updates = syncer.rejected_total;
  summary.rejected_by_reason = syncer.rejected;
  summary.stopped_by = stopped_by;
  summary.first_commit_s = first_commit_s;
  summary.ledger = ledger;
  return summary;
}

}  // namespace archipelago::run

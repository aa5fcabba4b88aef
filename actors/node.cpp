#include "actors/node.hpp"
#include "actors/admin.hpp"
#include "actors/directory.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <functional>
#include <thread>

#include <caf/all.hpp>

#include "actors/authorization.hpp"
#include "actors/compute_threads.hpp"
#include "actors/run_setup.hpp"
#include "actors/shaped_link.hpp"
#include "actors/supervisor.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "net/backoff.hpp"
#include "net/link_stats.hpp"
#include "net/sites.hpp"
#include "remote/client.hpp"

namespace archipelago::actors {
namespace {

using namespace archipelago::messages;
using Clock = std::chrono::steady_clock;

constexpr const char* kCoordinatorPeer = "coordinator";

caf::atom_value role_at(int i) { return i == 0 ? syncer_name() : i == 1 ? store_name() : monitor_name(); }

// While a node backs off it probes the coordinator's port this often; a probe that finds the port
// accepting connections (the coordinator is back) starts the next join attempt at once.
constexpr auto kProbeEvery = std::chrono::milliseconds(200);

// Whether host:port accepts a TCP connection within `timeout` (a plain connect, closed at once: no
// byte is sent, so the coordinator's plane counts a connection that ended before it authenticated).
bool port_accepts(const HostPort& target, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(target.host.c_str(), std::to_string(target.port).c_str(), &hints, &found) != 0) return false;
  bool accepted = false;
  for (addrinfo* a = found; a && !accepted; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      accepted = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof error;
      accepted = poll(&p, 1, static_cast<int>(timeout.count())) == 1 &&
                 getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return accepted;
}

// Set by a session's watcher, read by the driver thread.
struct SessionFlags {
  std::atomic<bool> lost{false};            // the gateway or the link is down
  std::atomic<bool> stop_requested{false};  // the coordinator ended the run
};

// ---- facade: what learners see as the syncer / store / monitor ------------------------------------

struct FacadeSpec {
  std::string key;  // the session's: the link refuses an `up` without it
  caf::atom_value role;
  caf::actor link;  // the coordinator's link actor of this session
  std::shared_ptr<ShapedLink> uplink;
  std::shared_ptr<net::LinkStats> stats;
  std::string coordinator_site;
  std::shared_ptr<Refusals> refusals;
  std::shared_ptr<spdlog::logger> log;
};

caf::behavior facade_behavior(caf::event_based_actor* self, FacadeSpec spec) {
  return {
      [=](WireBytes& bytes) {
        auto learner = caf::actor_cast<caf::actor>(self->current_sender());
        if (!learner || learner->node() != self->node()) {
          spec.refusals->refuse("node facade", "envelope", Refusal::unauthenticated, *spec.log,
                                "not from a learner of this process");
          return;
        }
        auto link = spec.link;
        auto key = spec.key;
        auto role = spec.role;
        auto stats = spec.stats;
        auto site = spec.coordinator_site;
        // Counted when the link releases the bytes onto the transport, as the far side counts them.
        spec.uplink->send(std::move(bytes), [link, key, role, learner, stats, site](WireBytes&& b) {
          stats->record_sent(kCoordinatorPeer, site, b.size());
          caf::anon_send(link, up_atom::value, key, role, learner, std::move(b));
        });
      },
  };
}

// ---- watcher: one per session ---------------------------------------------------------------------

struct WatcherState {
  std::string key;  // the session's, from the plane's join answer
  std::shared_ptr<Refusals> refusals;
  caf::actor link;
  std::map<caf::atom_value, caf::actor> facades;
  std::shared_ptr<SessionFlags> flags;
  std::shared_ptr<net::LinkStats> stats;
  std::string coordinator_site;
  const char* name = "node_watcher";
};

using WatcherActor = caf::stateful_actor<WatcherState>;

caf::behavior watcher_behavior(WatcherActor* self, std::shared_ptr<SessionFlags> flags,
                               std::shared_ptr<net::LinkStats> stats, std::shared_ptr<Refusals> refusals) {
  auto& st = self->state;
  st.refusals = refusals;
  auto log = component_logger("node");
  // Only the plane and this process's driver send to it: anything else is refused and counted.
  refuse_unmatched(self, "node watcher", refusals, log);
  auto keyed = [=](const std::string& key, const char* kind) {
    auto& st = self->state;
    if (keys_equal(key, st.key)) return true;
    st.refusals->refuse("node watcher", kind, Refusal::wrong_key, *log);
    return false;
  };
  st.flags = flags;
  st.stats = std::move(stats);
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    if (!st.link || down.source != st.link.address()) return;
    st.flags->lost = true;
    // The facades are linked: they end too, and learners watching them rejoin later.
    self->quit(down.reason && down.reason != caf::exit_reason::normal
                   ? down.reason
                   : caf::error{caf::exit_reason::remote_link_unreachable});
  });
  return {
      [=](init_atom, const std::string& local, std::string& key, caf::actor& link, std::string& coordinator_site,
          caf::actor& syncer, caf::actor& store, caf::actor& monitor) {
        auto& st = self->state;
        if (!keys_equal(local, process_key())) {
          st.refusals->refuse("node watcher", "init", Refusal::wrong_key, *log);
          return;
        }
        st.key = std::move(key);
        st.link = link;
        st.coordinator_site = coordinator_site;
        self->monitor(link);
        st.facades = {{syncer_name(), syncer}, {store_name(), store}, {monitor_name(), monitor}};
        for (auto& [role, facade] : st.facades) self->link_to(facade);
      },
      [=](deliver_atom, const std::string& key, caf::atom_value role, caf::actor& learner, WireBytes& bytes) {
        auto& st = self->state;
        if (!keyed(key, "deliver")) return;
        st.stats->record_received(kCoordinatorPeer, st.coordinator_site, bytes.size());
        auto it = st.facades.find(role);
        if (it == st.facades.end() || !learner) return;
        caf::send_as(it->second, learner, std::move(bytes));
      },
      [=](stop_atom, const std::string& key) {
        if (keyed(key, "stop")) self->state.flags->stop_requested = true;
      },
      [=](control_atom, const std::string& key, WireBytes& bytes) {
        // An operator's control of one of this node's learners, from the coordinator it joined.
        auto& st = self->state;
        if (!keyed(key, "control")) return;
        st.stats->record_received(kCoordinatorPeer, st.coordinator_site, bytes.size());
        auto envelope = unwrap(std::move(bytes));
        const auto* control = envelope ? std::get_if<LearnerControl>(&envelope->body) : nullptr;
        if (!control) {
          st.refusals->refuse("node watcher", envelope ? message_name(envelope->body) : "control", Refusal::malformed,
                              *log, envelope ? "not a learner control" : envelope.error().to_string());
          return;
        }
        auto done = apply_learner_control(self->system(), *control);
        if (!done) log->warn("learner control: {}", done.error().reason);
      },
  };
}

void wait_for_drain(const std::shared_ptr<ShapedLink>& link, double timeout_s) {
  const auto until = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  while (link && link->pending() > 0 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

struct Node::Impl {
  NodeOptions options;
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::unique_ptr<remote::NodePlane> plane;  // the cross-site plane to the coordinator
  std::shared_ptr<net::LinkStats> stats;
  std::shared_ptr<Refusals> refusals = std::make_shared<Refusals>();
  Clock::time_point started = Clock::now();
  std::shared_ptr<spdlog::logger> log = component_logger("node");

  // The run, once the first join brought its configuration.
  std::shared_ptr<const RuntimeOptions> runtime;
  RunSetup setup;
  int first_learner = -1;
  caf::actor learner_supervisor;
  net::LinkSpec uplink_spec;
  std::string coordinator_site;

  // The current session.
  caf::actor watcher;
  std::shared_ptr<SessionFlags> flags;
  std::shared_ptr<ShapedLink> uplink;
  std::vector<caf::actor> facades;
  int64_t sessions = 0;

  ~Impl() { shutdown(); }

  void end_session(caf::exit_reason reason) {
    for (int i = 0; i < static_cast<int>(facades.size()); ++i) {
      if (Directory::get(*system, role_at(i)) == facades[i]) Directory::erase(*system, role_at(i));
    }
    facades.clear();
    if (plane) plane->leave();
    if (watcher) caf::anon_send_exit(watcher, reason);
    watcher = caf::actor{};
    if (uplink) uplink->stop();
    uplink.reset();
    flags.reset();
  }

  void shutdown() {
    if (!system) return;
    end_session(caf::exit_reason::user_shutdown);
    plane.reset();
    if (learner_supervisor) caf::anon_send_exit(learner_supervisor, caf::exit_reason::user_shutdown);
    learner_supervisor = caf::actor{};
    system->await_all_actors_done();
    Directory::erase(*system, learner_supervisor_name());
    if (runtime) {
      for (int m = 0; m < runtime->setup.run.learners; ++m) Directory::erase(*system, learner_name(m));
    }
    system.reset();
  }

  nlohmann::json supervisor_status() {
    if (!learner_supervisor) return nlohmann::json::object();
    caf::scoped_actor self{*system};
    nlohmann::json out = nlohmann::json::object();
    self->request(learner_supervisor, std::chrono::seconds(5), admin_atom::value, admin_request("node", "status"))
        .receive([&](WireBytes& bytes) {
                   auto j = read_admin_reply(std::move(bytes));
                   if (j) out = *j;
                 },
                 [&](caf::error&) {});
    return out;
  }

  void stop_learners() {
    for (int i = 0; i < options.learners && first_learner >= 0; ++i) {
      if (auto learner = Directory::get(*system, learner_name(first_learner + i))) {
        caf::anon_send(learner, stop_atom::value, process_key());
      }
    }
  }

  // Outcome of one connection attempt.
  enum class Attempt { joined, retry, refused };

  Attempt connect(std::string& why) {
    const auto& target = options.coordinator;
    auto session_flags = std::make_shared<SessionFlags>();
    auto session_watcher = system->spawn(watcher_behavior, session_flags, stats, refusals);
    Outbox outbox(options.name);
    // The token stays here: the plane proves it to the coordinator's Gateway.
    auto join = outbox.wrap(Join{"", options.name, options.site, options.device, 0, ""});
    if (!join) {
      why = join.error().to_string();
      return Attempt::retry;
    }
    Attempt outcome = Attempt::retry;
    auto opened = plane->join(*options.secret, remote::NodeJoin{std::move(*join), options.learners, first_learner},
                              session_watcher, options.transport.join_timeout_s);
    if (!opened) {
      why = "cannot join the coordinator at " + target.host + ":" + std::to_string(target.port) + ": " + opened.error().reason;
    } else {
            [&](WireBytes& welcome_bytes, std::string& config_toml, std::string& topology_toml,
                std::string& coordinator, int32_t first, caf::actor& link, std::string& key) {
              auto envelope = unwrap(std::move(welcome_bytes));
              const Welcome* welcome = envelope ? std::get_if<Welcome>(&envelope->body) : nullptr;
              if (!welcome) {
                why = "malformed answer from the coordinator";
                return;
              }
              if (!welcome->accepted) {
                why = "the coordinator refused this node: " + welcome->reason;
                outcome = welcome->refusal == JoinRefusal::unauthenticated ? Attempt::refused : Attempt::retry;
                return;
              }
              if (!link) {
                why = "the coordinator admitted this node without a link";
                return;
              }
              if (!runtime) {
                auto status = begin_run(config_toml, opened->tokenizer_model, topology_toml, coordinator, first);
                if (!status) {
                  why = "cannot start from the coordinator's configuration: " + status.error().reason;
                  outcome = Attempt::refused;
                  return;
                }
              } else if (first != first_learner) {
                why = "the coordinator offered learners " + std::to_string(first) + ".. instead of " +
                      std::to_string(first_learner) + "..; retrying";
                return;
              }
              open_session(session_watcher, session_flags, link, key);
              outcome = Attempt::joined;
            }(opened->welcome, opened->config_toml, opened->topology_toml, opened->coordinator_site,
              opened->first_learner, opened->link, opened->key);
    }
    if (outcome != Attempt::joined) {
      plane->leave();
      caf::anon_send_exit(session_watcher, caf::exit_reason::user_shutdown);
    }
    return outcome;
  }

  Status begin_run(const std::string& config_toml, const std::string& tokenizer_model, const std::string& topology_toml,
                   const std::string& coordinator, int first) {
    auto node_config = options.configure(config_toml, tokenizer_model);
    if (!node_config) return node_config.error();
    auto& runtime_options = node_config->runtime;
    runtime_options.syncer.auth_token = kSessionJoinToken;  // the plane proved the token for the session
    // A node's learners start from the committed versions they fetch: the coordinator's
    // model.init_from (a directory on its machine) is the coordinator's to apply.
    runtime_options.setup.model.init_from.clear();
    auto prepared = prepare_run(runtime_options, *node_config->corpus);
    if (!prepared) return prepared.error();
    setup = std::move(*prepared);
    if (first < 0 || first + options.learners > runtime_options.setup.run.learners) {
      return make_error(ErrorCode::inconsistent, "learner slots out of range");
    }
    coordinator_site = coordinator;
    if (!topology_toml.empty()) {
      auto topology = net::parse_sites(topology_toml, "the coordinator's [sites]/[links]");
      if (!topology) return topology.error();
      uplink_spec = topology->link(options.site, coordinator_site);
    }
    runtime = std::make_shared<const RuntimeOptions>(runtime_options);
    first_learner = first;
    const int threads = configure_compute_threads(runtime->setup.run.threads, options.learners);
    LearnerSlots slots;
    slots.first = first;
    slots.count = options.learners;
    if (runtime->setup.run.max_seconds > 0) {
      slots.deadline = started + std::chrono::milliseconds(static_cast<int64_t>(runtime->setup.run.max_seconds * 1000));
    }
    learner_supervisor = spawn_supervisor(*system, learner_supervisor_spec(runtime, node_config->corpus, setup, slots));
    Directory::put(*system, learner_supervisor_name(), learner_supervisor);
    log->info("node '{}' (site {}): learners {}..{} x {} compute thread(s), {} parameters; link to site {}: {} Mbit/s, {} ms",
              options.name, options.site, first, first + options.learners - 1, threads, setup.layout->parameter_count,
              coordinator_site, uplink_spec.bandwidth_bits_per_s / 1e6, uplink_spec.latency_s * 1000);
    return {};
  }

  void open_session(const caf::actor& session_watcher, std::shared_ptr<SessionFlags> session_flags,
                    const caf::actor& link, const std::string& key) {
    watcher = session_watcher;
    flags = std::move(session_flags);
    uplink = std::make_shared<ShapedLink>(uplink_spec);
    facades.clear();
    for (int i = 0; i < 3; ++i) {
      facades.push_back(system->spawn(facade_behavior, FacadeSpec{key, role_at(i), link, uplink, stats,
                                                                  coordinator_site, refusals, log}));
    }
    caf::anon_send(watcher, init_atom::value, process_key(), key, link, coordinator_site, facades[0], facades[1],
                   facades[2]);
    for (int i = 0; i < 3; ++i) {
      Directory::erase(*system, role_at(i));
      Directory::put(*system, role_at(i), facades[i]);
    }
    sessions += 1;
  }
};

Node::Node(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Node::~Node() = default;

Expected<std::unique_ptr<Node>> Node::start(NodeOptions options) {
  if (!options.secret) return make_error(ErrorCode::invalid_argument, "a node needs a join token");
  if (options.learners < 1) return make_error(ErrorCode::invalid_argument, "--learners must be at least 1");
  if (!options.configure) return make_error(ErrorCode::invalid_argument, "a node needs a configure callback");
  if (options.name.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    options.name = std::string(host) + ":" + std::to_string(getpid());
  }
  auto impl = std::make_unique<Impl>();
  impl->config.set("scheduler.max-threads", std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 2));
  impl->config.set("logger.file-verbosity", caf::atom("quiet"));
  impl->config.set("logger.console-verbosity", caf::atom("quiet"));
  if (auto status = validate_transport(options.transport); !status) return status.error();
  impl->system = std::make_unique<caf::actor_system>(impl->config);
  remote::Endpoint endpoint{options.coordinator.host, options.coordinator.port, tls_files(options.transport),
                            options.transport.insecure_plaintext, edge_limits(options.transport)};
  auto plane = remote::NodePlane::start(*impl->system, std::move(endpoint));
  if (!plane) return plane.error();
  impl->plane = std::move(*plane);
  impl->stats = std::make_shared<net::LinkStats>(options.site);
  impl->options = std::move(options);
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

Expected<nlohmann::json> Node::run(const std::function<bool()>& stop_requested,
                                   const std::function<void(const nlohmann::json&)>& progress) {
  auto& impl = *impl_;
  const auto& options = impl.options;
  net::BackoffOptions backoff_options;
  backoff_options.initial = std::chrono::milliseconds(static_cast<int64_t>(options.transport.reconnect_initial_s * 1000));
  backoff_options.max = std::chrono::milliseconds(static_cast<int64_t>(options.transport.reconnect_max_s * 1000));
  backoff_options.seed = std::hash<std::string>{}(options.name);
  if (auto status = net::validate(backoff_options); !status) return status.error();
  net::Backoff backoff(backoff_options);
  auto next_attempt = Clock::now();
  auto disconnected_since = Clock::now();
  std::string stopped_by, last_why;
  int64_t failed_attempts = 0, reconnects = 0;
  bool probing = true, probe_started = false;  // probe the port while backing off; one early attempt per outage
  auto next_probe = Clock::now();
  double next_progress = 0;
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - impl.started).count(); };

  while (true) {
    if (stopped_by.empty() && stop_requested()) {
      stopped_by = "signal";
      impl.log->info("stopping: learners finish their in-flight updates and leave");
      impl.stop_learners();
      if (!impl.learner_supervisor) break;
    }
    if (impl.flags && impl.flags->stop_requested && stopped_by.empty()) {
      stopped_by = "coordinator";
      impl.log->info("the coordinator ended the run: learners finish their in-flight updates and leave");
      impl.stop_learners();
    }
    // A session that ends after the coordinator ended the run is not rejoined: the run is over, and a
    // rejoin would be admitted by a coordinator that is draining (a link closing as another node left
    // made a clean run count a third join).
    const bool run_ended = stopped_by == "coordinator";
    if (impl.flags && impl.flags->lost) {
      impl.end_session(caf::exit_reason::remote_link_unreachable);
      if (run_ended) {
        impl.log->info("the coordinator's link closed after it ended the run; not rejoining");
      } else {
        impl.log->warn("lost the coordinator; learners train on, reconnecting");
      }
      disconnected_since = Clock::now();
      next_attempt = Clock::now() + backoff.next_delay();
      probing = !run_ended;
    }
    // Backing off, probe the port: a coordinator restarted on it is joined at once instead of after
    // the rest of a delay that grew while it was down. One probe-started attempt per outage: if it
    // fails, the backoff alone paces the next ones (a port that accepts but cannot join is not
    // retried every probe).
    if (!impl.watcher && probing && Clock::now() < next_attempt && Clock::now() >= next_probe) {
      next_probe = Clock::now() + kProbeEvery;
      if (port_accepts(options.coordinator, kProbeEvery)) {
        next_attempt = Clock::now();
        probing = false;
        probe_started = true;
      }
    }
    if (!impl.watcher && !run_ended && Clock::now() >= next_attempt && (stopped_by.empty() || impl.learner_supervisor)) {
      std::string why;
      auto attempt = impl.connect(why);
      if (attempt == Impl::Attempt::refused) {
        impl.log->error("{}", why);
        return make_error(ErrorCode::conflict, why);
      }
      if (attempt == Impl::Attempt::joined) {
        if (impl.sessions > 1) reconnects += 1;
        impl.log->info("joined the coordinator at {}:{} (session {})", options.coordinator.host,
                       options.coordinator.port, impl.sessions);
        backoff.reset();
        failed_attempts = 0;
        probe_started = false;
      } else {
        if (failed_attempts++ == 0 || why != last_why) impl.log->warn("{}", why);
        last_why = why;
        next_attempt = Clock::now() + backoff.next_delay();
        if (!probe_started) probing = true;
        const double down_s = std::chrono::duration<double>(Clock::now() - disconnected_since).count();
        if (options.give_up_after_s > 0 && down_s > options.give_up_after_s) {
          return make_error(ErrorCode::unavailable, "gave up after " + std::to_string(static_cast<int>(down_s)) +
                                                        " s without the coordinator: " + why);
        }
      }
    }
    if (impl.learner_supervisor) {
      auto status = impl.supervisor_status();
      if (!status.empty() && status.value("running", 1) == 0 && status.value("restarting", 1) == 0) {
        if (stopped_by.empty()) stopped_by = "budget";
        break;
      }
      if (progress && elapsed() >= next_progress) {
        next_progress = elapsed() + (impl.runtime ? impl.runtime->progress_interval_s : 2.0);
        progress({{"elapsed_s", elapsed()}, {"connected", static_cast<bool>(impl.watcher)},
                  {"steps", status.value("steps_computed", int64_t{0})}, {"restarts", status.value("restarts", 0)}});
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Let the last updates and Leaves out of the emulated link before the process goes.
  wait_for_drain(impl.uplink, 2.0);
  auto status = impl.supervisor_status();
  const auto traffic = impl.stats->snapshot().total();
  nlohmann::json summary = {
      {"role", "node"}, {"node", options.name}, {"site", options.site},
      {"coordinator", options.coordinator.host + ":" + std::to_string(options.coordinator.port)},
      {"first_learner", impl.first_learner}, {"learners", options.learners},
      {"steps", status.value("steps_computed", int64_t{0})}, {"restarts", status.value("restarts", 0)},
      {"finished", status.value("finished", 0)}, {"failed", status.value("failed", 0)},
      {"sessions", impl.sessions}, {"reconnects", reconnects}, {"refused", impl.refusals->to_json()},
      {"bytes_sent", traffic.bytes_sent},
      {"bytes_received", traffic.bytes_received},
      {"uplink", {{"bandwidth_mbit", impl.uplink_spec.bandwidth_bits_per_s / 1e6},
                  {"latency_ms", impl.uplink_spec.latency_s * 1000}}},
      {"wall_s", elapsed()}, {"stopped_by", stopped_by}};
  return summary;
}

}  // namespace archipelago::actors

#include "run/node.hpp"
#include "remote/admin.hpp"
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
#include <mutex>
#include <thread>

#include <caf/all.hpp>

#include "actors/authorization.hpp"
#include "actors/compute_threads.hpp"
#include "training/precision_choice.hpp"
#include "run/run_setup.hpp"
#include "remote/shaped_link.hpp"
#include "remote/shard_router.hpp"
#include "actors/supervisor.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "net/backoff.hpp"
#include "net/certificate_authority.hpp"
#include "net/link_stats.hpp"
#include "net/names.hpp"
#include "net/sites.hpp"
#include "remote/client.hpp"

namespace archipelago::run {

using namespace archipelago::actors;  // the actors a process is assembled from
using namespace archipelago::remote;  // and the plane between processes

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
  int shard = -1;                                 // a sharded run: the shard this session is with
  std::map<caf::atom_value, caf::actor> routers;  // ... and the routers its deliveries go to
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
          int32_t shard, caf::actor& syncer, caf::actor& store, caf::actor& monitor) {
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
        st.shard = shard;
        if (shard >= 0) {
          for (auto& [role, facade] : st.facades) st.routers[role] = Directory::get(self->system(), role);
        }
      },
      [=](deliver_atom, const std::string& key, caf::atom_value role, caf::actor& learner, WireBytes& bytes) {
        auto& st = self->state;
        if (!keyed(key, "deliver")) return;
        st.stats->record_received(kCoordinatorPeer, st.coordinator_site, bytes.size());
        if (st.shard >= 0) {
          auto router = st.routers.find(role);
          if (router != st.routers.end() && router->second && learner) {
            self->send(router->second, shardmsg_atom::value, static_cast<int32_t>(st.shard), learner, std::move(bytes));
          }
          return;
        }
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

// One coordinator process the node is joined to: the run's only one, or one syncer shard.
struct ShardLink {
  HostPort address;
  std::unique_ptr<remote::NodePlane> plane;  // the cross-site plane to it
  int shard = -1;                            // which shard it is (its first join says)
  std::string site;                          // its site (links, accounting)
  net::LinkSpec uplink_spec;
  // The current session.
  caf::actor watcher;
  std::shared_ptr<SessionFlags> flags;
  std::shared_ptr<ShapedLink> uplink;
  std::vector<caf::actor> facades;
  int64_t sessions = 0;
  // Reconnecting.
  std::unique_ptr<net::Backoff> backoff;
  Clock::time_point next_attempt = Clock::now(), disconnected_since = Clock::now(), next_probe = Clock::now();
  bool probing = true, probe_started = false;  // probe the port while backing off; one early attempt per outage
  int64_t failed_attempts = 0, reconnects = 0;
  std::string last_why;

  std::string name() const { return address.host + ":" + std::to_string(address.port); }
};

struct Node::Impl {
  NodeOptions options;
  std::string certificate_name;  // under TLS, this node's certificate's: the join proof is bound to it
  caf::actor_system_config config;
  std::unique_ptr<caf::actor_system> system;
  std::vector<ShardLink> links;  // one per coordinator address: every syncer shard of the run
  std::shared_ptr<net::LinkStats> stats;
  std::shared_ptr<Refusals> refusals = std::make_shared<Refusals>();
  Clock::time_point started = Clock::now();
  std::shared_ptr<spdlog::logger> log = component_logger("node");
  // A sharded run: the routers learners see as syncer, store and monitor (empty: one coordinator,
  // whose session's facades learners see directly).
  std::vector<caf::actor> routers;
  std::shared_ptr<ShardRouterCounters> router_counters = std::make_shared<ShardRouterCounters>();
  struct Digests {
    std::mutex mutex;
    nlohmann::json learners = nlohmann::json::object();  // learner id -> [{version, digest}] per fragment
  };
  std::shared_ptr<Digests> digests = std::make_shared<Digests>();

  // The run, once the first join brought its configuration.
  std::shared_ptr<const RuntimeOptions> runtime;
  std::string run_config;  // the configuration it trains with (shard 0's; a restart may change run-control keys)
  std::shared_ptr<actors::SharedDeadline> run_deadline;  // its learners' end (train.max_seconds)
  RunSetup setup;
  int first_learner = -1;
  caf::actor learner_supervisor;

  ~Impl() { shutdown(); }

  bool sharded() const { return links.size() > 1; }

  void end_session(ShardLink& link, caf::exit_reason reason) {
    for (int i = 0; i < static_cast<int>(link.facades.size()); ++i) {
      if (sharded()) {
        if (link.shard >= 0) caf::anon_send(routers[i], attach_atom::value, static_cast<int32_t>(link.shard), caf::actor{});
      } else if (Directory::get(*system, role_at(i)) == link.facades[i]) {
        Directory::erase(*system, role_at(i));
      }
    }
    link.facades.clear();
    if (link.plane) link.plane->leave();
    if (link.watcher) caf::anon_send_exit(link.watcher, reason);
    link.watcher = caf::actor{};
    if (link.uplink) link.uplink->stop();
    link.uplink.reset();
    link.flags.reset();
  }

  void shutdown() {
    if (!system) return;
    for (auto& link : links) {
      end_session(link, caf::exit_reason::user_shutdown);
      link.plane.reset();
    }
    if (learner_supervisor) caf::anon_send_exit(learner_supervisor, caf::exit_reason::user_shutdown);
    learner_supervisor = caf::actor{};
    for (size_t i = 0; i < routers.size(); ++i) {
      Directory::erase(*system, role_at(static_cast<int>(i)));
      caf::anon_send_exit(routers[i], caf::exit_reason::user_shutdown);
    }
    routers.clear();
    system->await_all_actors_done();
    Directory::erase(*system, learner_supervisor_name());
    if (runtime) {
      for (int m = 0; m < runtime->setup.run.learners; ++m) Directory::erase(*system, learner_name(m));
    }
    system.reset();
  }

  // The learner supervisor's status (none when it has not answered within 5 s).
  std::optional<SupervisorStatus> supervisor_status() {
    if (!learner_supervisor) return std::nullopt;
    caf::scoped_actor self{*system};
    std::optional<SupervisorStatus> out;
    self->request(learner_supervisor, std::chrono::seconds(5), admin_atom::value, admin_request("node", "status"))
        .receive([&](WireBytes& bytes) {
                   auto j = read_admin_reply(std::move(bytes));
                   auto status = j ? decode_status<SupervisorStatus>(*j, "learner supervisor") : Expected<SupervisorStatus>(j.error());
                   if (status) out = std::move(*status);
                 },
                 [&](caf::error&) {});
    return out;
  }

  // Asks every running learner of this node for each fragment's version and the digest of the
  // global copy it holds; the answers land in `digests` as they come (nothing waits for a learner
  // in the middle of a step). Each learner's last answer while it held the model is kept: what a
  // run's end is checked against (the owner's stored version).
  void ask_learner_digests() {
    for (int i = 0; i < options.learners && first_learner >= 0; ++i) {
      auto learner = Directory::get(*system, learner_name(first_learner + i));
      if (!learner) continue;
      system->spawn([board = digests, learner, id = learner_id(first_learner + i)](caf::event_based_actor* self) {
        self->request(learner, std::chrono::seconds(1), admin_atom::value, admin_request("node", "digests"))
            .then(
                [=](WireBytes& bytes) {
                  auto j = read_admin_reply(std::move(bytes));
                  if (!j || !j->contains("fragments") || (*j)["fragments"].empty()) return;
                  std::lock_guard lock(board->mutex);
                  board->learners[id] = (*j)["fragments"];
                },
                [](caf::error&) {});
      });
    }
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

  // Whether the shard that answered fits the others: the first address is shard 0 (it gives the
  // learner slots the others are asked for), each shard is named once, and all agree on N.
  std::string shard_mismatch(const ShardLink& link, const remote::NodeSession& session) const {
    const int n = static_cast<int>(links.size());
    if (session.shards != n) {
      return "the coordinator at " + link.name() + " is one of " + std::to_string(session.shards) +
             " syncer shard(s), and --coordinator names " + std::to_string(n) + " address(es)";
    }
    if (link.shard >= 0 && link.shard != session.shard) {
      return link.name() + " was syncer shard " + std::to_string(link.shard) + " and is now shard " +
             std::to_string(session.shard);
    }
    if (&link == &links.front() && session.shard != 0) {
      return "the first --coordinator address must be syncer shard 0; " + link.name() + " is shard " +
             std::to_string(session.shard);
    }
    for (const auto& other : links) {
      if (&other != &link && other.shard == session.shard) {
        return other.name() + " and " + link.name() + " are both syncer shard " + std::to_string(session.shard);
      }
    }
    return "";
  }

  Attempt connect(ShardLink& link, std::string& why) {
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
    auto opened = link.plane->join(*options.secret,
                                   remote::NodeJoin{std::move(*join), options.learners, first_learner, certificate_name},
                                   session_watcher, options.transport.join_timeout_s);
    if (!opened) {
      why = "cannot join the coordinator at " + link.name() + ": " + opened.error().reason;
    } else {
      [&](remote::NodeSession& session) {
        auto envelope = unwrap(std::move(session.welcome));
        const Welcome* welcome = envelope ? std::get_if<Welcome>(&envelope->body) : nullptr;
        if (!welcome) {
          why = "malformed answer from the coordinator at " + link.name();
          return;
        }
        if (!welcome->accepted) {
          why = "the coordinator at " + link.name() + " refused this node: " + welcome->reason;
          // A wrong token or a request the coordinator will never take (a name, a slot count) stops
          // the node; no free slots, say, is retried.
          outcome = welcome->refusal == JoinRefusal::unauthenticated || welcome->refusal == JoinRefusal::bad_request
                        ? Attempt::refused
                        : Attempt::retry;
          return;
        }
        if (!session.link) {
          why = "the coordinator at " + link.name() + " admitted this node without a link";
          return;
        }
        if (auto mismatch = shard_mismatch(link, session); !mismatch.empty()) {
          why = mismatch;
          outcome = Attempt::refused;
          return;
        }
        if (!runtime) {
          if (&link != &links.front()) {
            why = "waiting for syncer shard 0 (" + links.front().name() + ") to give this node its learner slots";
            return;
          }
          auto status = begin_run(session.config_toml, session.tokenizer_model, session.first_learner);
          if (!status) {
            why = "cannot start from the coordinator's configuration: " + status.error().reason;
            outcome = Attempt::refused;
            return;
          }
        } else if (session.config_toml != run_config) {
          auto change = options.reconfigure ? options.reconfigure(run_config, session.config_toml)
                                            : Expected<RunControl>(make_error(ErrorCode::conflict, "its configuration changed"));
          if (!change) {
            why = "syncer shard " + std::to_string(session.shard) + " at " + link.name() + ": " + change.error().reason;
            outcome = Attempt::refused;
            return;
          }
          // Shard 0 gives the run its values; another shard may lag behind it until it restarts too.
          if (&link == &links.front()) take_run_control(*change, session.config_toml);
        }
        if (session.first_learner != first_learner) {
          why = "the coordinator at " + link.name() + " offered learners " + std::to_string(session.first_learner) +
                ".. instead of " + std::to_string(first_learner) + "..; retrying";
          return;
        }
        if (link.shard < 0) {
          link.shard = session.shard;
          link.site = session.coordinator_site;
          if (!session.topology_toml.empty()) {
            auto topology = net::parse_sites(session.topology_toml, "the coordinator's [sites]/[links]");
            if (!topology) {
              why = topology.error().reason;
              outcome = Attempt::refused;
              return;
            }
            link.uplink_spec = topology->link(options.site, link.site);
          }
          log->info("link to site {} ({}): {} Mbit/s, {} ms", link.site, link.name(),
                    link.uplink_spec.bandwidth_bits_per_s / 1e6, link.uplink_spec.latency_s * 1000);
        }
        open_session(link, session_watcher, session_flags, session.link, session.key);
        outcome = Attempt::joined;
      }(*opened);
    }
    if (outcome != Attempt::joined) {
      link.plane->leave();
      caf::anon_send_exit(session_watcher, caf::exit_reason::user_shutdown);
    }
    return outcome;
  }

  // The end of the run for this node's learners: train.max_seconds from the node's start.
  static std::chrono::steady_clock::time_point run_end(Clock::time_point started, double max_seconds) {
    if (!(max_seconds > 0)) return std::chrono::steady_clock::time_point::max();
    return started + std::chrono::milliseconds(static_cast<int64_t>(max_seconds * 1000));
  }

  // A restarted coordinator changed run-control keys only: its configuration becomes the run's and
  // the learners' end moves with train.max_seconds; they go on training.
  void take_run_control(const RunControl& change, const std::string& config_toml) {
    run_config = config_toml;
    if (run_deadline) run_deadline->move_to(run_end(started, change.max_seconds));
    std::string keys;
    for (const auto& k : change.keys) keys += (keys.empty() ? "" : ", ") + k;
    log->info("the coordinator's configuration changed run-control keys only ({}): taken; train.max_seconds is now {}",
              keys, change.max_seconds);
  }

  Status begin_run(const std::string& config_toml, const std::string& tokenizer_model, int first) {
    auto node_config = options.configure(config_toml, tokenizer_model);
    if (!node_config) return node_config.error();
    auto& runtime_options = node_config->runtime;
    runtime_options.syncer.auth_token = kSessionJoinToken;  // the plane proved the token for the session
    // A node's learners start from the committed versions they fetch: the coordinator's
    // model.init_from (a directory on its machine) is the coordinator's to apply.
    runtime_options.setup.model.init_from.clear();
    // inner.precision = "auto" is this machine's to measure, for its learners' share of its cores.
    auto& setup_options = runtime_options.setup;
    const auto precision = training::choose_precision(
        {setup_options.model, setup_options.inner, setup_options.run.device,
         learner_thread_share(setup_options.run.threads, options.learners)});
    setup_options.inner.precision = precision.precision;
    log->info("{}", precision.message);
    auto prepared = prepare_run(runtime_options, *node_config->corpus);
    if (!prepared) return prepared.error();
    setup = std::move(*prepared);
    if (first < 0 || first + options.learners > runtime_options.setup.run.learners) {
      return make_error(ErrorCode::inconsistent, "learner slots out of range");
    }
    runtime = std::make_shared<const RuntimeOptions>(runtime_options);
    run_config = config_toml;
    first_learner = first;
    if (sharded()) {
      for (int i = 0; i < 3; ++i) {
        routers.push_back(spawn_shard_router(*system, role_at(i), static_cast<int>(links.size()), router_counters));
        Directory::put(*system, role_at(i), routers.back());
      }
    }
    const int threads = configure_compute_threads(
        runtime->setup.run.threads, options.learners,
        runtime->setup.inner.precision);
    LearnerSlots slots;
    slots.first = first;
    slots.count = options.learners;
    run_deadline = std::make_shared<actors::SharedDeadline>(run_end(started, runtime->setup.run.max_seconds));
    slots.deadline = run_deadline;
    learner_supervisor = spawn_supervisor(*system, learner_supervisor_spec(runtime, node_config->corpus, setup, slots));
    Directory::put(*system, learner_supervisor_name(), learner_supervisor);
    log->info("node '{}' (site {}): learners {}..{} x {} compute thread(s), {} parameters{}", options.name, options.site,
              first, first + options.learners - 1, threads, setup.layout->parameter_count,
              sharded() ? ", " + std::to_string(links.size()) + " syncer shards" : std::string());
    return {};
  }

  void open_session(ShardLink& link, const caf::actor& session_watcher, std::shared_ptr<SessionFlags> session_flags,
                    const caf::actor& coordinator_link, const std::string& key) {
    link.watcher = session_watcher;
    link.flags = std::move(session_flags);
    link.uplink = std::make_shared<ShapedLink>(link.uplink_spec);
    link.facades.clear();
    for (int i = 0; i < 3; ++i) {
      link.facades.push_back(system->spawn(facade_behavior, FacadeSpec{key, role_at(i), coordinator_link, link.uplink,
                                                                       stats, link.site, refusals, log}));
    }
    // A sharded run's watcher hands what the shard sends to the routers, tagged with the shard.
    caf::anon_send(link.watcher, init_atom::value, process_key(), key, coordinator_link, link.site,
                   static_cast<int32_t>(sharded() ? link.shard : -1), link.facades[0], link.facades[1],
                   link.facades[2]);
    for (int i = 0; i < 3; ++i) {
      if (sharded()) {
        caf::anon_send(routers[i], attach_atom::value, static_cast<int32_t>(link.shard), link.facades[i]);
      } else {
        Directory::erase(*system, role_at(i));
        Directory::put(*system, role_at(i), link.facades[i]);
      }
    }
    link.sessions += 1;
  }
};

Node::Node(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Node::~Node() = default;

Expected<std::unique_ptr<Node>> Node::start(NodeOptions options) {
  if (!options.secret) return make_error(ErrorCode::invalid_argument, "a node needs a join token");
  if (options.learners < 1) return make_error(ErrorCode::invalid_argument, "--learners must be at least 1");
  if (!options.configure) return make_error(ErrorCode::invalid_argument, "a node needs a configure callback");
  if (options.coordinators.empty()) return make_error(ErrorCode::invalid_argument, "a node needs a coordinator address");
  for (size_t i = 0; i < options.coordinators.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (options.coordinators[i].host == options.coordinators[j].host &&
          options.coordinators[i].port == options.coordinators[j].port) {
        return make_error(ErrorCode::invalid_argument, "--coordinator names " + options.coordinators[i].host + ":" +
                                                           std::to_string(options.coordinators[i].port) + " twice");
      }
    }
  }
  std::string certificate_name;  // under TLS: the join proof is bound to it (remote::join_purpose)
  if (options.transport.tls) {
    // Under TLS a node is its certificate: its name is the certificate's (the coordinator requires it).
    auto named = net::certificate_name(options.transport.tls_certificate);
    if (!named) return named.error();
    certificate_name = *named;
    if (options.name.empty()) options.name = *named;
  }
  if (options.name.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    options.name = net::to_peer_name(std::string(host) + "-" + std::to_string(getpid()));
  }
  // The coordinator refuses names outside the alphabet; say so here, before any connection.
  if (auto checked = net::check_peer_name(options.name, "--name"); !checked) return checked.error();
  if (auto checked = net::check_peer_name(options.site, "--site"); !checked) return checked.error();
  if (auto checked = net::check_device_name(options.device); !checked) return checked.error();
  auto impl = std::make_unique<Impl>();
  impl->config.set("scheduler.max-threads", std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 2));
  impl->config.set("logger.file-verbosity", caf::atom("quiet"));
  impl->config.set("logger.console-verbosity", caf::atom("quiet"));
  if (auto status = validate_transport(options.transport); !status) return status.error();
  net::BackoffOptions backoff_options;
  backoff_options.initial = std::chrono::milliseconds(static_cast<int64_t>(options.transport.reconnect_initial_s * 1000));
  backoff_options.max = std::chrono::milliseconds(static_cast<int64_t>(options.transport.reconnect_max_s * 1000));
  if (auto status = net::validate(backoff_options); !status) return status.error();
  impl->system = std::make_unique<caf::actor_system>(impl->config);
  for (const auto& address : options.coordinators) {
    remote::Endpoint endpoint{address.host, address.port, tls_files(options.transport),
                              options.transport.insecure_plaintext, edge_limits(options.transport)};
    auto plane = remote::NodePlane::start(*impl->system, std::move(endpoint));
    if (!plane) return plane.error();
    ShardLink link;
    link.address = address;
    link.plane = std::move(*plane);
    backoff_options.seed = std::hash<std::string>{}(options.name + "/" + link.name());
    link.backoff = std::make_unique<net::Backoff>(backoff_options);
    impl->links.push_back(std::move(link));
  }
  impl->stats = std::make_shared<net::LinkStats>(options.site);
  impl->options = std::move(options);
  impl->certificate_name = certificate_name;
  return std::unique_ptr<Node>(new Node(std::move(impl)));
}

nlohmann::json to_json(const NodeSummary& s) {
  nlohmann::json j = {
      {"role", "node"}, {"node", s.node}, {"site", s.site}, {"coordinator", s.coordinator},
      {"first_learner", s.first_learner}, {"learners", s.learners},
      {"steps", s.steps}, {"restarts", s.restarts}, {"finished", s.finished}, {"failed", s.failed},
      {"sessions", s.sessions}, {"reconnects", s.reconnects}, {"refused", s.refused},
      {"bytes_sent", s.bytes_sent}, {"bytes_received", s.bytes_received},
      {"uplink", {{"bandwidth_mbit", s.uplink_bandwidth_mbit}, {"latency_ms", s.uplink_latency_ms}}},
      {"wall_s", s.wall_s}, {"stopped_by", s.stopped_by}, {"learner_digests", s.learner_digests}};
  if (!s.shards.is_null()) j["shards"] = s.shards;
  if (!s.routed.is_null()) j["routed"] = s.routed;
  return j;
}

Expected<NodeSummary> Node::run(const std::function<bool()>& stop_requested,
                                   const std::function<void(const nlohmann::json&)>& progress) {
  auto& impl = *impl_;
  const auto& options = impl.options;
  std::string stopped_by;
  double next_progress = 0;
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - impl.started).count(); };
  auto connected = [&] {
    return std::all_of(impl.links.begin(), impl.links.end(), [](const ShardLink& l) { return static_cast<bool>(l.watcher); });
  };

  while (true) {
    if (stopped_by.empty() && stop_requested()) {
      stopped_by = "signal";
      impl.log->info("stopping: learners finish their in-flight updates and leave");
      impl.stop_learners();
      if (!impl.learner_supervisor) break;
    }
    for (auto& link : impl.links) {
      if (link.flags && link.flags->stop_requested && stopped_by.empty()) {
        stopped_by = "coordinator";
        impl.log->info("the coordinator at {} ended the run: learners finish their in-flight updates and leave", link.name());
        impl.stop_learners();
      }
    }
    // A session that ends after the coordinator ended the run is not rejoined: the run is over, and a
    // rejoin would be admitted by a coordinator that is draining (a link closing as another node left
    // made a clean run count a third join).
    const bool run_ended = stopped_by == "coordinator";
    for (size_t i = 0; i < impl.links.size(); ++i) {
      auto& link = impl.links[i];
      if (link.flags && link.flags->lost) {
        impl.end_session(link, caf::exit_reason::remote_link_unreachable);
        if (run_ended) {
          impl.log->info("the coordinator's link ({}) closed after it ended the run; not rejoining", link.name());
        } else {
          impl.log->warn("lost the coordinator at {}; learners train on, reconnecting", link.name());
        }
        link.disconnected_since = Clock::now();
        link.next_attempt = Clock::now() + link.backoff->next_delay();
        link.probing = !run_ended;
      }
      // Backing off, probe the port: a coordinator restarted on it is joined at once instead of after
      // the rest of a delay that grew while it was down. One probe-started attempt per outage: if it
      // fails, the backoff alone paces the next ones (a port that accepts but cannot join is not
      // retried every probe).
      if (!link.watcher && link.probing && Clock::now() < link.next_attempt && Clock::now() >= link.next_probe) {
        link.next_probe = Clock::now() + kProbeEvery;
        if (port_accepts(link.address, kProbeEvery)) {
          link.next_attempt = Clock::now();
          link.probing = false;
          link.probe_started = true;
        }
      }
      // Shard 0 first: it gives the learner slots the other shards are asked for.
      const bool slots_known = i == 0 || impl.runtime;
      if (!link.watcher && slots_known && !run_ended && Clock::now() >= link.next_attempt &&
          (stopped_by.empty() || impl.learner_supervisor)) {
        std::string why;
        auto attempt = impl.connect(link, why);
        if (attempt == Impl::Attempt::refused) {
          impl.log->error("{}", why);
          return make_error(ErrorCode::conflict, why);
        }
        if (attempt == Impl::Attempt::joined) {
          if (link.sessions > 1) link.reconnects += 1;
          if (impl.sharded()) {
            impl.log->info("joined syncer shard {} at {} (session {})", link.shard, link.name(), link.sessions);
          } else {
            impl.log->info("joined the coordinator at {} (session {})", link.name(), link.sessions);
          }
          link.backoff->reset();
          link.failed_attempts = 0;
          link.probe_started = false;
        } else {
          if (link.failed_attempts++ == 0 || why != link.last_why) impl.log->warn("{}", why);
          link.last_why = why;
          link.next_attempt = Clock::now() + link.backoff->next_delay();
          if (!link.probe_started) link.probing = true;
          const double down_s = std::chrono::duration<double>(Clock::now() - link.disconnected_since).count();
          if (options.give_up_after_s > 0 && down_s > options.give_up_after_s) {
            return make_error(ErrorCode::unavailable, "gave up after " + std::to_string(static_cast<int>(down_s)) +
                                                          " s without the coordinator at " + link.name() + ": " + why);
          }
        }
      }
    }
    if (impl.learner_supervisor) {
      auto status = impl.supervisor_status();
      if (status && status->all_ended()) {
        if (stopped_by.empty()) stopped_by = "budget";
        break;
      }
      if (elapsed() >= next_progress) {
        next_progress = elapsed() + (impl.runtime ? impl.runtime->progress_interval_s : 2.0);
        impl.ask_learner_digests();
        if (progress) {
          progress({{"elapsed_s", elapsed()}, {"connected", connected()},
                    {"steps", status ? status->steps_computed : 0}, {"restarts", status ? status->restarts : 0}});
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // Let the last updates and Leaves out of the emulated links before the process goes.
  for (auto& link : impl.links) wait_for_drain(link.uplink, 2.0);
  const auto status = impl.supervisor_status().value_or(SupervisorStatus{});
  const auto traffic = impl.stats->snapshot().total();
  int64_t sessions = 0, reconnects = 0;
  std::vector<std::string> addresses;
  for (const auto& link : impl.links) {
    sessions += link.sessions;
    reconnects += link.reconnects;
    addresses.push_back(link.name());
  }
  const auto& first = impl.links.front();
  nlohmann::json learner_digests;
  {
    std::lock_guard lock(impl.digests->mutex);
    learner_digests = impl.digests->learners;
  }
  NodeSummary summary;
  summary.mode = impl.runtime ? impl.runtime->setup.run.mode : diloco::Mode::sync;
  summary.learners = options.learners;
  summary.steps = status.steps_computed;
  summary.wall_s = elapsed();
  summary.bytes_sent = static_cast<int64_t>(traffic.bytes_sent);
  summary.bytes_measured = true;
  summary.node = options.name;
  summary.site = options.site;
  summary.coordinator = impl.sharded() ? nlohmann::json(addresses) : nlohmann::json(first.name());
  summary.first_learner = impl.first_learner;
  summary.restarts = status.restarts;
  summary.finished = status.finished;
  summary.failed = status.failed;
  summary.sessions = sessions;
  summary.reconnects = reconnects;
  summary.refused = impl.refusals->to_json();
  summary.bytes_received = static_cast<int64_t>(traffic.bytes_received);
  summary.uplink_bandwidth_mbit = first.uplink_spec.bandwidth_bits_per_s / 1e6;
  summary.uplink_latency_ms = first.uplink_spec.latency_s * 1000;
  summary.stopped_by = stopped_by;
  summary.learner_digests = learner_digests;
  if (impl.sharded()) {
    summary.shards = nlohmann::json::array();
    for (const auto& link : impl.links) {
      summary.shards.push_back({{"shard", link.shard}, {"address", link.name()}, {"site", link.site},
                                {"sessions", link.sessions}, {"reconnects", link.reconnects}});
    }
    const auto& c = *impl.router_counters;
    summary.routed = {{"updates_routed", c.updates_routed.load()}, {"updates_dropped", c.updates_dropped.load()},
                      {"welcomes_merged", c.welcomes_merged.load()}, {"joins_replayed", c.joins_replayed.load()}};
  }
  return summary;
}

}  // namespace archipelago::run

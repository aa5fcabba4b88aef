// The product's path end to end, in one process: remote::Server (the coordinator's plane, on its
// own actor system) and remote::NodePlane (a node's, on another), joined with a real token proof.
// A bench learner actor's FragmentUpdate envelopes go to the session's link proxy as a node's
// facades send them, through the node's bridge and pump, the RPC, the coordinator's session checks
// (envelope kind, learner slot) and its bridge, to a bench link actor that counts them. What the
// bench replaces: the gateway actor (admits at once) and the link (counts, merges nothing).
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <caf/all.hpp>

#include "remote/gateway.hpp"
#include "remote/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "bench/multisite/transfer_pair.hpp"
#include "messages/message_types.hpp"
#include "net/auth.hpp"
#include "remote/client.hpp"
#include "remote/server.hpp"

namespace multisite_bench {
namespace {

namespace actors = archipelago::actors;
namespace messages = archipelago::messages;
namespace remote = archipelago::remote;
using actors::WireBytes;

// How far the learner may run ahead of the coordinator: the node cuts its link past
// max_pending_bytes queued, and a real learner sends one fragment's update at a time.
constexpr uint64_t kAheadBytes = 64ull << 20;

struct Received {
  std::atomic<uint64_t> bytes{0};
  uint64_t expected = 0;
  std::atomic<int64_t> end_ns{0};  // steady clock, when `expected` was reached
  void add(uint64_t n) {
    const uint64_t now_total = bytes += n;
    if (now_total >= expected && now_total - n < expected) end_ns = Clock::now().time_since_epoch().count();
  }
};

caf::behavior counting_link(caf::event_based_actor* self, std::shared_ptr<Received> received) {
  self->set_default_handler(caf::drop);
  return {[=](remote::up_atom, const std::string&, caf::atom_value, caf::actor&, WireBytes& bytes) { received->add(bytes.size()); }};
}

using JoinReply = std::tuple<WireBytes, std::string, std::string, std::string, int32_t, caf::actor, std::string>;

caf::behavior admitting_gateway(caf::event_based_actor* self, caf::actor link) {
  self->set_default_handler(caf::drop);
  return {[=](remote::nodejoin_atom, const std::string&, WireBytes&, int32_t, int32_t, caf::actor&, const std::string&) -> JoinReply {
    messages::Welcome welcome;
    welcome.accepted = true;
    auto bytes = actors::Outbox("gateway").wrap(welcome);
    return JoinReply{bytes ? std::move(*bytes) : WireBytes{}, "", "", "bench", 0, link, "bench-session"};
  }};
}

caf::behavior idle(caf::event_based_actor* self) {
  self->set_default_handler(caf::drop);
  return {[](actors::init_atom) {}};
}

double whole_process_cpu_s() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

std::set<pid_t> task_ids() {
  std::set<pid_t> ids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ids.insert(std::atoi(entry.path().filename().c_str()));
  return ids;
}

// The one thread that exists in `after` and not in `before` (-1 unless exactly one).
pid_t new_thread(const std::set<pid_t>& before, const std::set<pid_t>& after) {
  pid_t found = -1;
  for (pid_t id : after) {
    if (before.count(id)) continue;
    if (found >= 0) return -1;
    found = id;
  }
  return found;
}

// CPU seconds of thread `tid` of this process (its per-thread CPU clock, as pthread_getcpuclockid makes it).
double thread_cpu_s_of(pid_t tid) {
  if (tid < 0) return 0;
  const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6);
  timespec t{};
  if (clock_gettime(clock, &t) != 0) return 0;
  return t.tv_sec + t.tv_nsec / 1e9;
}

archipelago::Expected<archipelago::net::Secret> bench_token() {
  const auto path = std::filesystem::temp_directory_path() / ("bench-multisite-token-" + std::to_string(getpid()));
  std::ofstream(path) << "bench-multisite-join-token-0123456789abcdef\n";
  chmod(path.c_str(), 0600);
  auto secret = archipelago::net::load_token_file(path.string());
  std::filesystem::remove(path);
  return secret;
}

void quiet(caf::actor_system_config& config) {
  config.set("scheduler.max-threads", 2);
  config.set("logger.file-verbosity", caf::atom("quiet"));
  config.set("logger.console-verbosity", caf::atom("quiet"));
}

TransferResult failed(std::string why) {
  TransferResult result;
  result.error = std::move(why);
  return result;
}

}  // namespace

TransferResult product_copy(const TransferSpec& spec) {
  auto secret = bench_token();
  if (!secret) return failed(secret.error().reason);
  caf::actor_system_config coordinator_config, node_config;
  quiet(coordinator_config);
  quiet(node_config);
  caf::actor_system coordinator_system(coordinator_config), node_system(node_config);
  auto received = std::make_shared<Received>();
  auto link = coordinator_system.spawn(counting_link, received);
  auto gateway = coordinator_system.spawn(admitting_gateway, link);
  auto watcher = node_system.spawn(idle);
  auto learner = node_system.spawn(idle);
  auto end_actors = [&] {
    for (auto* a : {&link, &gateway, &watcher, &learner}) caf::anon_send_exit(*a, caf::exit_reason::user_shutdown);
  };

  TransferResult result;
  {
    remote::ServerSpec server_spec;
    server_spec.system = &coordinator_system;
    server_spec.gateway = gateway;
    server_spec.join_secret = std::make_shared<const archipelago::net::Secret>(*secret);
    server_spec.counters = std::make_shared<remote::RemoteCounters>();
    server_spec.tls = spec.tls;
    server_spec.limits = spec.limits;
    const auto before_server = task_ids();
    auto server = remote::Server::start(std::move(server_spec));
    const auto before_node = task_ids();
    if (!server) {
      end_actors();
      return failed("server: " + server.error().reason);
    }
    auto plane = remote::NodePlane::start(node_system, remote::Endpoint{"127.0.0.1", (*server)->port(), spec.tls, false, spec.limits});
    const pid_t coordinator_loop = new_thread(before_server, before_node), node_loop = new_thread(before_node, task_ids());
    if (!plane) {
      end_actors();
      return failed("node plane: " + plane.error().reason);
    }
    messages::Join join;
    join.node = "bench-node";
    join.site = "bench";
    auto join_bytes = actors::Outbox("bench-node").wrap(join);
    auto session = (*plane)->join(*secret, remote::NodeJoin{join_bytes ? *join_bytes : WireBytes{}, 1, -1}, watcher, 10.0);
    if (!session || !session->link) {
      end_actors();
      return failed(session ? "the join was refused" : "join: " + session.error().reason);
    }

    // One update envelope of chunk_bytes payload from learner-0, sent as often as total_bytes needs.
    auto payload = std::make_shared<std::vector<uint8_t>>(spec.chunk_bytes, 'x');
    messages::FragmentUpdate update;
    update.learner_id = actors::learner_id(0);
    update.chunk.element_count = payload->size() / 4;  // fp32
    update.chunk.total_bytes = payload->size();
    update.chunk.payload = messages::ByteView{payload->data(), payload->size(), payload};
    auto envelope = actors::Outbox(update.learner_id).wrap(update);
    if (!envelope) {
      end_actors();
      return failed("encode: " + envelope.error().reason);
    }
    const uint64_t chunks = (spec.total_bytes + spec.chunk_bytes - 1) / spec.chunk_bytes;
    received->expected = chunks * envelope->size();

    const auto start = Clock::now();
    const double cpu_at_start = whole_process_cpu_s(), producer_at_start = thread_cpu_s();
    const double coordinator_at_start = thread_cpu_s_of(coordinator_loop), node_at_start = thread_cpu_s_of(node_loop);
    uint64_t sent = 0;
    for (uint64_t i = 0; i < chunks; ++i) {
      while (sent - received->bytes > kAheadBytes) std::this_thread::sleep_for(std::chrono::microseconds(50));
      caf::anon_send(session->link, remote::up_atom::value, session->key, actors::syncer_name(), learner, WireBytes(*envelope));
      sent += envelope->size();
    }
    // The learner's own copy of each envelope (this thread) is not the plane's: taken out below.
    const double producer_cpu_s = thread_cpu_s() - producer_at_start;
    const auto deadline = Clock::now() + std::chrono::seconds(300);
    while (received->bytes < received->expected && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::microseconds(100));
    result.process_cpu_s = whole_process_cpu_s() - cpu_at_start - producer_cpu_s;
    result.receiver_cpu_s = thread_cpu_s_of(coordinator_loop) - coordinator_at_start;
    result.sender_cpu_s = thread_cpu_s_of(node_loop) - node_at_start;
    result.bytes = received->bytes;
    if (received->bytes < received->expected) {
      result.error = "the link counted " + std::to_string(received->bytes.load()) + " of " + std::to_string(received->expected) + " bytes";
    } else {
      result.ok = true;
      result.seconds = std::chrono::duration<double>(Clock::duration(received->end_ns.load()) - start.time_since_epoch()).count();
    }
    (*plane)->leave();
  }
  end_actors();
  return result;
}

}  // namespace multisite_bench

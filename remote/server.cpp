#include "remote/server.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>

#include <capnp/rpc-twoparty.h>
#include <caf/all.hpp>
#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <kj/debug.h>
#include <kj/timer.h>

#include "actors/authorization.hpp"
#include "remote/gateway.hpp"
#include "remote/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "messages/envelope.hpp"
#include "remote/bridge.hpp"
#include "remote/door_stream.hpp"
#include "remote/envelope_kind.hpp"
#include "remote/event_loop.hpp"
#include "remote/plane.capnp.h"
#include "remote/proof.hpp"
#include "remote/tls.hpp"

namespace archipelago::remote {
namespace {

using actors::Refusal;
using actors::WireBytes;
using JoinReply = std::tuple<WireBytes, std::string, std::string, std::string, int32_t, caf::actor, std::string>;
using AdminOpen = std::tuple<bool, std::string, std::string, caf::actor>;

using actors::monotonic_seconds;

// A proxy of one learner incarnation of a node: it only exists to end (as the learner did) so that
// the link's downlinks and the failure monitor see the learner go.
caf::behavior learner_proxy(caf::event_based_actor* self) {
  self->set_default_handler(caf::drop);
  return {[](actors::init_atom) {}};
}

wire::Role wire_role(caf::atom_value role) {
  return role == actors::store_name() ? wire::Role::STORE : role == actors::monitor_name() ? wire::Role::MONITOR : wire::Role::SYNCER;
}

struct Connection;

kj::Promise<void> ended() { return KJ_EXCEPTION(DISCONNECTED, "this connection has been closed"); }

}  // namespace

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  ServerSpec spec;
  std::shared_ptr<EdgeCounters> counters = std::make_shared<EdgeCounters>();
  std::unique_ptr<EventLoop> loop;
  uint16_t port = 0;
  std::shared_ptr<spdlog::logger> log = component_logger("remote");
  // Loop thread only:
  TlsHandle tls;
  kj::Own<kj::ConnectionReceiver> listener;
  kj::Maybe<kj::Promise<void>> accepting;
  std::map<uint64_t, std::shared_ptr<Connection>> connections;
  std::map<std::string, int> per_address;
  uint64_t next_id = 1;
  kj::Own<kj::PromiseFulfiller<void>> door_free;  // the accept loop waits on it while the door is full
  ~Impl() { loop.reset(); }  // first: the loop drops its objects on its own thread

  kj::Promise<void> accept_loop(EventLoop::Context& context);
  void admit(EventLoop::Context& context, kj::AuthenticatedStream stream);
  void start_rpc(EventLoop::Context& context, const std::shared_ptr<Connection>& connection, kj::Own<kj::AsyncIoStream> stream);
  void close(const std::shared_ptr<Connection>& connection, const std::string& why);
  // A connection proved a token or closed: the accept loop goes on if the door has room again.
  void door_changed();
  int unauthenticated() const;
  actors::Refusals& refusals() { return spec.counters->refusals; }
};

namespace {

struct Outgoing {
  wire::Role role;
  uint32_t handle;
  WireBytes bytes;
};

// One accepted connection; lives on the loop thread. Members are destroyed bottom-up: the RPC
// system before the network before the stream.
struct Connection : std::enable_shared_from_this<Connection> {
  uint64_t id = 0;
  std::string address;  // the peer's address without its port (per-address limit)
  Server::Impl* server = nullptr;
  EventLoop::Context* context = nullptr;
  bool closed = false;
  bool authenticated = false;
  double opened_s = monotonic_seconds(), last_heard_s = monotonic_seconds();
  double rpc_started_s = -1;  // when its RPC stream began (after TLS): the first-byte clock
  DoorStream* door = nullptr;  // the stream under the RPC system (owned by `stream`)
  std::string certificate_name;  // under TLS: the common name of the peer's certificate
  std::string nonce;
  int failed_proofs = 0;
  // The node session, once joined.
  bool joined = false;
  std::string node, key;
  int first = 0, count = 0;
  caf::actor link, sink_proxy;
  std::map<uint32_t, caf::actor> learners;         // handle -> proxy
  std::map<caf::actor_addr, uint32_t> handles;     // proxy -> handle
  std::map<uint32_t, caf::actor> ended_learners;   // handle -> proxy of the incarnations the node said were gone (newest 4096)
  std::deque<Outgoing> outgoing;
  uint64_t outgoing_bytes = 0;
  bool pumping = false;
  int admin_requests = 0;
  net::SessionBudget budget;  // the session's inbound budget (spec.limits.session), charged from its join on

  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  kj::Maybe<wire::NodeSink::Client> sink;
  kj::Maybe<kj::Promise<void>> watchdog;

  void heard() { last_heard_s = monotonic_seconds(); }

  caf::actor proxy_for(uint32_t handle) {
    auto it = learners.find(handle);
    if (it != learners.end()) return it->second;
    // A message the learner sent before it ended can arrive after its end (it waited in the node's
    // emulated link): it goes on as that incarnation, whose proxy has ended, never as a new one.
    if (auto gone = ended_learners.find(handle); gone != ended_learners.end()) return gone->second;
    // A node has at most a few incarnations of each slot alive at once; more handles are a flood.
    if (static_cast<int>(learners.size()) >= 4 * count + 4) return caf::actor{};
    auto proxy = server->spec.system->spawn(learner_proxy);
    learners.emplace(handle, proxy);
    handles.emplace(proxy.address(), handle);
    return proxy;
  }

  void end_learner(uint32_t handle, bool abnormal) {
    auto it = learners.find(handle);
    if (it == learners.end()) return;
    handles.erase(it->second.address());
    caf::anon_send_exit(it->second, abnormal ? caf::exit_reason::kill : caf::exit_reason::normal);
    ended_learners.emplace(handle, it->second);
    if (ended_learners.size() > 4096) ended_learners.erase(ended_learners.begin());
    learners.erase(it);
  }

  void deliver(caf::atom_value role, const caf::actor& learner, WireBytes&& bytes) {
    if (closed) return;
    auto it = handles.find(learner.address());
    if (it == handles.end()) return;  // that incarnation ended: nothing to deliver it to
    outgoing_bytes += bytes.size();
    outgoing.push_back(Outgoing{wire_role(role), it->second, std::move(bytes)});
    if (outgoing_bytes > server->spec.limits.max_pending_bytes) {
      server->counters->pending_limit_hits += 1;
      server->close(shared_from_this(), "the node does not read what is sent to it (" +
                                            std::to_string(outgoing_bytes >> 20) + " MiB pending)");
      return;
    }
    pump();
  }

  // Sends queued deliveries one streaming call at a time: the next leaves when flow control lets it.
  void pump() {
    if (pumping || outgoing.empty() || closed || sink == nullptr) return;
    Outgoing item = std::move(outgoing.front());
    outgoing.pop_front();
    outgoing_bytes -= item.bytes.size();
    auto request = KJ_ASSERT_NONNULL(sink).deliverRequest();
    request.setRole(item.role);
    request.setLearner(item.handle);
    request.setEnvelope(kj::arrayPtr(reinterpret_cast<const kj::byte*>(item.bytes.data()), item.bytes.size()));
    server->counters->bytes_sent += static_cast<int64_t>(item.bytes.size());
    pumping = true;
    std::weak_ptr<Connection> weak = shared_from_this();
    context->tasks.add(request.send().then(
        [weak] {
          if (auto self = weak.lock()) {
            self->pumping = false;
            self->pump();
          }
        },
        [weak](kj::Exception&& e) {
          if (auto self = weak.lock()) self->server->close(self, std::string("delivery failed: ") + e.getDescription().cStr());
        }));
  }

  void send_control(WireBytes&& bytes) {
    if (closed || sink == nullptr) return;
    auto request = KJ_ASSERT_NONNULL(sink).controlRequest();
    request.setEnvelope(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
    context->tasks.add(request.send().ignoreResult());
  }

  void send_stop() {
    if (closed || sink == nullptr) return;
    context->tasks.add(KJ_ASSERT_NONNULL(sink).stopRequest().send().ignoreResult());
  }
};

// What the link and its downlinks send "to the node's watcher": forwarded to the loop.
caf::behavior sink_proxy(caf::event_based_actor* self, EventLoop* loop, std::weak_ptr<Connection> weak) {
  return {
      [=](remote::deliver_atom, const std::string&, caf::atom_value role, caf::actor& learner, WireBytes& bytes) {
        loop->post([weak, role, learner, bytes = std::move(bytes)](EventLoop::Context&) mutable {
          if (auto connection = weak.lock()) connection->deliver(role, learner, std::move(bytes));
        });
      },
      [=](actors::stop_atom, const std::string&) {
        loop->post([weak](EventLoop::Context&) {
          if (auto connection = weak.lock()) connection->send_stop();
        });
      },
      [=](actors::control_atom, const std::string&, WireBytes& bytes) {
        loop->post([weak, bytes = std::move(bytes)](EventLoop::Context&) mutable {
          if (auto connection = weak.lock()) connection->send_control(std::move(bytes));
        });
      },
  };
}

// ---- Session: a node's admitted slots ------------------------------------------------------------

class SessionImpl final : public wire::Session::Server {
 public:
  explicit SessionImpl(std::weak_ptr<Connection> connection) : connection_(std::move(connection)) {}

  kj::Promise<void> join(JoinContext context) override {
    auto p = context.getParams();
    return forward(EnvelopeKind::join, actors::syncer_name(), p.getLearner(), p.getEnvelope());
  }
  kj::Promise<void> update(UpdateContext context) override {
    auto p = context.getParams();
    return forward(EnvelopeKind::fragment_update, actors::syncer_name(), p.getLearner(), p.getEnvelope());
  }
  kj::Promise<void> fetch(FetchContext context) override {
    auto p = context.getParams();
    return forward(EnvelopeKind::fetch, actors::store_name(), p.getLearner(), p.getEnvelope());
  }
  kj::Promise<void> heartbeat(HeartbeatContext context) override {
    auto p = context.getParams();
    return forward(EnvelopeKind::heartbeat, actors::monitor_name(), p.getLearner(), p.getEnvelope());
  }
  kj::Promise<void> slotReport(SlotReportContext context) override {
    auto p = context.getParams();
    return forward(EnvelopeKind::slot_report, actors::monitor_name(), p.getLearner(), p.getEnvelope());
  }
  kj::Promise<void> leave(LeaveContext context) override {
    auto p = context.getParams();
    return forward(EnvelopeKind::leave, p.getToMonitor() ? actors::monitor_name() : actors::syncer_name(),
                   p.getLearner(), p.getEnvelope());
  }
  kj::Promise<void> learnerGone(LearnerGoneContext context) override {
    auto call = arrive(0);
    if (call.connection) call.connection->end_learner(context.getParams().getLearner(), context.getParams().getAbnormal());
    return kj::mv(call.answer);
  }
  kj::Promise<void> ping(PingContext) override {
    auto call = arrive(0);
    return kj::mv(call.answer);
  }

 private:
  // A call as it arrives: charged to the session's budget and, if the session is still open after
  // that, heard. `connection` is null when the session is closed (or the charge cut it).
  struct Arrival {
    std::shared_ptr<Connection> connection;
    kj::Promise<void> answer;  // what the call returns once it is done with
  };
  Arrival arrive(size_t bytes) {
    auto c = connection_.lock();
    if (!c || c->closed) return {nullptr, ended()};
    auto answer = charge(*c, bytes);
    if (c->closed) return {nullptr, kj::mv(answer)};
    c->heard();
    return {std::move(c), kj::mv(answer)};
  }

  // Every call is charged to the session's budget on arrival, whatever becomes of it: within the
  // budget it is answered at once; in debt, after the debt's delay (a stream's sender waits for
  // it); past the debt bound the session is cut, so one sender cannot hold the plane's thread.
  kj::Promise<void> charge(Connection& c, size_t bytes) {
    auto& server = *c.server;
    auto decision = c.budget.charge(bytes, monotonic_seconds());
    if (decision.cut) {
      server.counters->budget_cuts += 1;
      server.close(c.shared_from_this(), "over its inbound budget: " + decision.reason);
      return KJ_EXCEPTION(OVERLOADED, "this session is over its inbound budget", decision.reason);
    }
    if (decision.delay_s <= 0) return kj::READY_NOW;
    server.counters->budget_delays += 1;
    return c.context->io.provider->getTimer().afterDelay(static_cast<int64_t>(decision.delay_s * 1e9) * kj::NANOSECONDS);
  }

  kj::Promise<void> forward(EnvelopeKind method, caf::atom_value role, uint32_t handle, capnp::Data::Reader envelope) {
    auto call = arrive(envelope.size());
    if (!call.connection) return kj::mv(call.answer);
    auto& c = call.connection;
    auto answer = kj::mv(call.answer);
    auto& server = *c->server;
    server.counters->bytes_received += static_cast<int64_t>(envelope.size());
    const std::string actor = "session of node '" + c->node + "'";
    auto refuse = [&](Refusal reason, const std::string& kind, const std::string& detail) {
      server.counters->calls_refused += 1;
      server.refusals().refuse(actor, kind, reason, *server.log, detail);
      return kj::mv(answer);
    };
    auto header = envelope_header(envelope.begin(), envelope.size());
    if (!header) return refuse(Refusal::malformed, to_string(method), header.error().reason);
    if (header->kind != method) {
      return refuse(Refusal::kind_not_allowed, header->name, std::string("sent as ") + to_string(method));
    }
    // Learner ids in canonical form only ("learner-1", never "learner-01"), of this session's slots.
    const int index = actors::learner_index(header->sender_id);
    if (index < 0 || actors::learner_id(index) != header->sender_id || index < c->first || index >= c->first + c->count) {
      server.spec.counters->rejected_foreign += 1;
      return refuse(Refusal::foreign_learner, header->name, "not a learner of this node's slots");
    }
    auto proxy = c->proxy_for(handle);
    if (!proxy) return refuse(Refusal::malformed, header->name, "too many learner handles on one session");
    WireBytes bytes(reinterpret_cast<const char*>(envelope.begin()), reinterpret_cast<const char*>(envelope.end()));
    caf::anon_send(c->link, remote::up_atom::value, c->key, role, proxy, std::move(bytes));
    return answer;
  }

  std::weak_ptr<Connection> connection_;
};

// ---- Admin: a console's session --------------------------------------------------------------------

class AdminImpl final : public wire::Admin::Server {
 public:
  AdminImpl(std::weak_ptr<Connection> connection, std::string key, caf::actor admin)
      : connection_(std::move(connection)), key_(std::move(key)), admin_(std::move(admin)) {}

  kj::Promise<void> request(RequestContext context) override {
    auto c = connection_.lock();
    if (!c || c->closed) return ended();
    c->heard();
    if (c->admin_requests >= 8) {
      c->server->counters->calls_refused += 1;
      return KJ_EXCEPTION(OVERLOADED, "at most 8 admin requests at once per session");
    }
    auto command = context.getParams().getCommand();
    WireBytes bytes(reinterpret_cast<const char*>(command.begin()), reinterpret_cast<const char*>(command.end()));
    c->admin_requests += 1;
    auto key = key_;
    auto admin = admin_;
    std::weak_ptr<Connection> weak = c;
    return ask<std::optional<WireBytes>>(*c->server->loop, *c->server->spec.system,
                                         [key, admin, bytes](caf::event_based_actor* self, auto done) {
                                           self->request(admin, std::chrono::seconds(30), actors::admin_atom::value, key, bytes)
                                               .then([done](WireBytes& reply) { done(std::move(reply)); },
                                                     [done](caf::error&) { done(std::nullopt); });
                                         })
        .then([context, weak](std::optional<WireBytes> reply) mutable {
          if (auto c = weak.lock()) c->admin_requests -= 1;
          KJ_REQUIRE(reply.has_value(), "the admin actor did not answer");
          context.getResults().setReply(kj::arrayPtr(reinterpret_cast<const kj::byte*>(reply->data()), reply->size()));
        });
  }

  kj::Promise<void> ping(PingContext) override {
    if (auto c = connection_.lock()) c->heard();
    return kj::READY_NOW;
  }

 private:
  std::weak_ptr<Connection> connection_;
  std::string key_;
  caf::actor admin_;
};

// ---- Gateway: the one capability of a connection ----------------------------------------------------

class GatewayImpl final : public wire::Gateway::Server {
 public:
  explicit GatewayImpl(std::weak_ptr<Connection> connection) : connection_(std::move(connection)) {}

  kj::Promise<void> challenge(ChallengeContext context) override {
    auto c = connection_.lock();
    if (!c || c->closed) return ended();
    c->nonce = random_nonce();
    context.getResults().setNonce(kj::arrayPtr(reinterpret_cast<const kj::byte*>(c->nonce.data()), c->nonce.size()));
    return kj::READY_NOW;
  }

  kj::Promise<void> join(JoinContext context) override {
    auto c = connection_.lock();
    if (!c || c->closed) return ended();
    auto& server = *c->server;
    auto request = context.getParams().getRequest();
    auto refuse = [&](messages::JoinRefusal code, const std::string& reason) {
      messages::Welcome welcome{0, 0, false, reason};
      welcome.refusal = code;
      auto bytes = actors::Outbox("gateway").wrap(welcome);
      auto answer = context.getResults().initAnswer();
      if (bytes) answer.setWelcome(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes->data()), bytes->size()));
      answer.setFirstLearner(-1);
    };
    if (c->joined) {
      refuse(messages::JoinRefusal::bad_request, "this connection already holds a session");
      return kj::READY_NOW;
    }
    if (!proved(*c, server.spec.join_secret.get(), join_purpose(c->certificate_name), request.getProof(), "join")) {
      if (!server.spec.join_secret) {
        server.spec.counters->joins_refused_other += 1;
        refuse(messages::JoinRefusal::no_free_slots, "this run takes no nodes (a local run: archipelago train)");
      } else {
        (request.getProof().size() == 0 ? server.spec.counters->joins_refused_missing_token
                                        : server.spec.counters->joins_refused_wrong_token) += 1;
        refuse(messages::JoinRefusal::unauthenticated, "unauthenticated: the join proof does not match this run's token");
      }
      return kj::READY_NOW;
    }
    auto envelope = request.getJoin();
    WireBytes join_bytes(reinterpret_cast<const char*>(envelope.begin()), reinterpret_cast<const char*>(envelope.end()));
    std::weak_ptr<Connection> weak = c;
    auto proxy = server.spec.system->spawn(sink_proxy, server.loop.get(), weak);
    const int32_t learners = request.getLearners(), preferred = request.getPreferredFirst();
    auto gateway = server.spec.gateway;
    const std::string identity = c->certificate_name;
    c->joined = true;  // one join in flight per connection
    c->sink = context.getParams().getSink();
    return ask<std::optional<JoinReply>>(
               *server.loop, *server.spec.system,
               [gateway, join_bytes, learners, preferred, proxy, identity](caf::event_based_actor* self, auto done) {
                 self->request(gateway, std::chrono::seconds(10), remote::nodejoin_atom::value, actors::process_key(),
                               join_bytes, learners, preferred, proxy, identity)
                     .then(
                         [done](WireBytes& welcome, std::string& config, std::string& topology, std::string& site,
                                int32_t first, caf::actor& link, std::string& key) {
                           done(JoinReply{std::move(welcome), std::move(config), std::move(topology), std::move(site),
                                          first, std::move(link), std::move(key)});
                         },
                         [done](caf::error&) { done(std::nullopt); });
               })
        .then([context, weak, proxy](std::optional<JoinReply> reply) mutable {
          auto c = weak.lock();
          if (!c || c->closed) {
            caf::anon_send_exit(proxy, caf::exit_reason::remote_link_unreachable);
            return;
          }
          auto answer = context.getResults().initAnswer();
          if (!reply) {
            caf::anon_send_exit(proxy, caf::exit_reason::user_shutdown);
            c->joined = false;
            c->sink = nullptr;
            KJ_FAIL_REQUIRE("the gateway did not answer; try again");
          }
          auto& [welcome, config, topology, site, first, link, key] = *reply;
          answer.setWelcome(kj::arrayPtr(reinterpret_cast<const kj::byte*>(welcome.data()), welcome.size()));
          answer.setConfigToml(config);
          answer.setTopologyToml(topology);
          answer.setCoordinatorSite(site);
          answer.setFirstLearner(first);
          answer.setShard(c->server->spec.shard);
          answer.setShards(c->server->spec.shards);
          if (link) {
            const std::string& model = c->server->spec.tokenizer_model;
            answer.setTokenizer(kj::arrayPtr(reinterpret_cast<const kj::byte*>(model.data()), model.size()));
          }
          if (!link) {  // refused by the gateway actor (slots, a malformed join): the Welcome says why
            caf::anon_send_exit(proxy, caf::exit_reason::user_shutdown);
            c->joined = false;
            c->sink = nullptr;
            return;
          }
          c->authenticated = true;
          c->door->lift();
          c->server->door_changed();
          c->link = link;
          c->key = key;
          c->sink_proxy = proxy;
          c->first = first;
          c->count = static_cast<int>(context.getParams().getRequest().getLearners());
          auto join_envelope = actors::unwrap(WireBytes(context.getParams().getRequest().getJoin().begin(),
                                                        context.getParams().getRequest().getJoin().end()));
          if (join_envelope) {
            if (auto* j = std::get_if<messages::Join>(&join_envelope->body)) c->node = j->node;
          }
          context.getResults().setSession(kj::heap<SessionImpl>(weak));
        });
  }

  kj::Promise<void> openAdmin(OpenAdminContext context) override {
    auto c = connection_.lock();
    if (!c || c->closed) return ended();
    auto& server = *c->server;
    if (!proved(*c, server.spec.admin_secret.get(), kAdminPurpose, context.getParams().getProof(), "admin")) {
      server.spec.counters->admin_sessions_refused += 1;
      context.getResults().setAccepted(false);
      context.getResults().setReason(server.spec.admin_secret ? "unauthenticated: the admin proof does not match"
                                                              : "this coordinator has no admin token (--admin-token-file)");
      return kj::READY_NOW;
    }
    auto gateway = server.spec.gateway;
    const std::string peer = "console@" + c->address;
    std::weak_ptr<Connection> weak = c;
    return ask<std::optional<AdminOpen>>(*server.loop, *server.spec.system,
                                         [gateway, peer](caf::event_based_actor* self, auto done) {
                                           self->request(gateway, std::chrono::seconds(10), remote::adminjoin_atom::value,
                                                         actors::process_key(), peer)
                                               .then([done](bool ok, std::string& reason, std::string& key, caf::actor& admin) {
                                                       done(AdminOpen{ok, std::move(reason), std::move(key), std::move(admin)});
                                                     },
                                                     [done](caf::error&) { done(std::nullopt); });
                                         })
        .then([context, weak](std::optional<AdminOpen> opened) mutable {
          auto c = weak.lock();
          if (!c || c->closed) return;
          auto results = context.getResults();
          if (!opened || !std::get<0>(*opened) || !std::get<3>(*opened)) {
            results.setAccepted(false);
            results.setReason(opened ? std::get<1>(*opened) : std::string("the gateway did not answer"));
            return;
          }
          c->authenticated = true;
          c->door->lift();
          c->server->door_changed();
          results.setAccepted(true);
          results.setAdmin(kj::heap<AdminImpl>(weak, std::get<2>(*opened), std::get<3>(*opened)));
        });
  }

 private:
  // Checks a proof against this connection's nonce, which it consumes. Too many failures cut the connection.
  bool proved(Connection& c, const net::Secret* secret, std::string_view purpose, capnp::Data::Reader proof, const char* what) {
    const std::string nonce = std::move(c.nonce);
    c.nonce.clear();
    const bool ok = secret && verify_proof(*secret, purpose, nonce,
                                           std::string_view(reinterpret_cast<const char*>(proof.begin()), proof.size()));
    if (ok) return true;
    auto& server = *c.server;
    server.counters->proofs_refused += 1;
    server.log->warn("refused a {} from {}: {} ({} refused so far)", what, c.address,
                     !secret ? "not configured" : nonce.empty() ? "no challenge asked" : "wrong proof",
                     server.counters->proofs_refused.load());
    if (++c.failed_proofs >= server.spec.limits.max_failed_proofs) {
      server.close(c.shared_from_this(), "too many wrong proofs");
    }
    return false;
  }

  std::weak_ptr<Connection> connection_;
};

std::string strip_port(const std::string& address) {
  // "1.2.3.4:5678" or "[::1]:5678" -> the host part.
  if (!address.empty() && address.front() == '[') {
    auto end = address.find(']');
    return end == std::string::npos ? address : address.substr(1, end - 1);
  }
  auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

int Server::Impl::unauthenticated() const {
  int n = 0;
  for (const auto& [id, c] : connections) n += !c->authenticated;
  return n;
}

void Server::Impl::door_changed() {
  if (door_free && unauthenticated() < spec.limits.max_unauthenticated) {
    door_free->fulfill();
    door_free = nullptr;
  }
}

kj::Promise<void> Server::Impl::accept_loop(EventLoop::Context& context) {
  if (unauthenticated() >= spec.limits.max_unauthenticated) {
    // Backpressure: no accept until a connection proves a token or closes.
    counters->accept_paused += 1;
    auto paf = kj::newPromiseAndFulfiller<void>();
    door_free = kj::mv(paf.fulfiller);
    return paf.promise.then([this, &context] { return accept_loop(context); });
  }
  return listener->acceptAuthenticated().then(
      [this, &context](kj::AuthenticatedStream stream) {
        admit(context, kj::mv(stream));
        return accept_loop(context);
      },
      [this, &context](kj::Exception&& e) -> kj::Promise<void> {
        // Out of descriptors, say: note it and keep accepting after a pause.
        log->warn("accept failed: {}", e.getDescription().cStr());
        return context.io.provider->getTimer().afterDelay(100 * kj::MILLISECONDS).then([this, &context] {
          return accept_loop(context);
        });
      });
}

void Server::Impl::admit(EventLoop::Context& context, kj::AuthenticatedStream accepted) {
  const std::string address = strip_port(accepted.peerIdentity->toString().cStr());
  if (static_cast<int>(connections.size()) >= spec.limits.max_connections) {
    counters->refused_connection_limit += 1;
    return;  // the stream closes as it goes out of scope
  }
  if (per_address[address] >= spec.limits.max_connections_per_address) {
    counters->refused_address_limit += 1;
    return;
  }
  auto connection = std::make_shared<Connection>();
  connection->id = next_id++;
  connection->address = address;
  connection->server = this;
  connection->context = &context;
  connection->budget = net::SessionBudget(spec.limits.session);
  per_address[address] += 1;
  connections.emplace(connection->id, connection);
  counters->connections_accepted += 1;
  counters->connections_open = static_cast<int64_t>(connections.size());

  // The watchdog: authenticate within the handshake timeout, then never fall silent past the idle one.
  std::weak_ptr<Connection> weak = connection;
  auto& timer = context.io.provider->getTimer();
  const double check_s =
      std::min({spec.limits.idle_timeout_s, spec.limits.handshake_timeout_s, spec.limits.first_byte_timeout_s}) / 4;
  auto watch_holder = std::make_shared<std::function<kj::Promise<void>()>>();
  *watch_holder = [this, weak, &timer, check_s, watch_holder_weak = std::weak_ptr<std::function<kj::Promise<void>()>>(watch_holder)]() -> kj::Promise<void> {
    return timer.afterDelay(kj_duration(check_s)).then([this, weak, watch_holder_weak]() -> kj::Promise<void> {
      auto c = weak.lock();
      if (!c || c->closed) return ended();
      const double now = monotonic_seconds();
      if (!c->authenticated && c->door && !c->door->heard() && now - c->rpc_started_s > spec.limits.first_byte_timeout_s) {
        counters->first_byte_timeouts += 1;
        close(c, "no byte within " + std::to_string(spec.limits.first_byte_timeout_s) + " s");
        return kj::READY_NOW;
      }
      if (!c->authenticated && now - c->opened_s > spec.limits.handshake_timeout_s) {
        counters->handshake_timeouts += 1;
        close(c, "not authenticated within " + std::to_string(spec.limits.handshake_timeout_s) + " s");
        return kj::READY_NOW;
      }
      if (c->authenticated && now - c->last_heard_s > spec.limits.idle_timeout_s) {
        counters->idle_timeouts += 1;
        close(c, "silent for " + std::to_string(spec.limits.idle_timeout_s) + " s");
        return kj::READY_NOW;
      }
      auto next = watch_holder_weak.lock();
      return next ? (*next)() : kj::Promise<void>(kj::READY_NOW);
    });
  };
  connection->watchdog = (*watch_holder)().attach(kj::heap<std::shared_ptr<std::function<kj::Promise<void>()>>>(watch_holder));

  if (tls) {
    context.tasks.add(context_of(*tls).wrapServer(kj::mv(accepted)).then(
        [this, weak, &context](kj::AuthenticatedStream secured) {
          auto c = weak.lock();
          if (!c || c->closed) return;
          // The certificate's name is the peer's identity: a node may join only under that name.
          auto& identity = kj::downcast<kj::TlsPeerIdentity>(*secured.peerIdentity);
          if (identity.hasCertificate()) c->certificate_name = identity.getCommonName().cStr();
          start_rpc(context, c, kj::mv(secured.stream));
        },
        [this, weak](kj::Exception&& e) {
          counters->tls_handshakes_failed += 1;
          if (auto c = weak.lock()) close(c, std::string("TLS handshake failed: ") + e.getDescription().cStr());
        }));
  } else {
    start_rpc(context, connection, kj::mv(accepted.stream));
  }
}

void Server::Impl::start_rpc(EventLoop::Context& context, const std::shared_ptr<Connection>& connection,
                             kj::Own<kj::AsyncIoStream> stream) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = spec.limits.max_message_bytes / 8;
  options.nestingLimit = 32;
  auto counters_kept = counters;
  auto door = kj::heap<DoorStream>(kj::mv(stream), spec.limits.pre_auth_message_bytes,
                                   [counters_kept] { counters_kept->frames_refused_unauthenticated += 1; });
  connection->door = door.get();
  connection->rpc_started_s = monotonic_seconds();
  connection->stream = kj::mv(door);
  connection->network = kj::heap<capnp::TwoPartyVatNetwork>(*connection->stream, capnp::rpc::twoparty::Side::SERVER, options);
  std::weak_ptr<Connection> weak = connection;
  connection->rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(
      capnp::makeRpcServer(*connection->network, wire::Gateway::Client(kj::heap<GatewayImpl>(weak))));
  connection->rpc->setFlowLimit(spec.limits.max_pending_bytes / 8);
  context.tasks.add(connection->network->onDisconnect().then([this, weak] {
    if (auto c = weak.lock()) close(c, "the peer closed the connection");
  }));
}

void Server::Impl::close(const std::shared_ptr<Connection>& connection, const std::string& why) {
  if (connection->closed) return;
  connection->closed = true;
  if (!connection->authenticated) counters->closed_unauthenticated += 1;
  if (connection->joined && connection->link) {
    log->info("session of node '{}' ({}) ended: {}", connection->node, connection->address, why);
  }
  if (auto it = per_address.find(connection->address); it != per_address.end() && --it->second <= 0) per_address.erase(it);
  for (auto& [handle, proxy] : connection->learners) caf::anon_send_exit(proxy, caf::exit_reason::remote_link_unreachable);
  connection->learners.clear();
  connection->handles.clear();
  if (connection->sink_proxy) caf::anon_send_exit(connection->sink_proxy, caf::exit_reason::remote_link_unreachable);
  connection->outgoing.clear();
  connections.erase(connection->id);
  counters->connections_open = static_cast<int64_t>(connections.size());
  door_changed();
  // Dropped a moment later: the RPC system may be inside one of its own callbacks, and the answer
  // that caused the cut (a refusal) should still reach the peer.
  std::shared_ptr<Connection> keep = connection;
  connection->context->tasks.add(connection->context->io.provider->getTimer().afterDelay(50 * kj::MILLISECONDS).then([keep]() mutable {
    keep->watchdog = nullptr;
    keep->sink = nullptr;
    keep->rpc = nullptr;
    keep->network = nullptr;
    keep->door = nullptr;
    keep->stream = nullptr;
  }));
}

Status check_plaintext_allowed(const std::string& host, bool tls, bool insecure_plaintext, const char* what) {
  if (tls || insecure_plaintext || is_loopback(host)) return Status::success();
  return make_error(ErrorCode::invalid_argument,
                    std::string(what) + " " + host +
                        " is not a loopback address and TLS is off: the join proof and every update would cross the "
                        "network in clear. Set [net] tls = true with the files of `archipelago ca`, or pass "
                        "--insecure-plaintext to accept that");
}

Expected<std::unique_ptr<Server>> Server::start(ServerSpec spec) {
  if (!spec.system || !spec.gateway || !spec.counters) return make_error(ErrorCode::invalid_argument, "a server needs a system, a gateway and counters");
  if (auto allowed = check_plaintext_allowed(spec.host, spec.tls.has_value(), spec.insecure_plaintext, "listening on"); !allowed) {
    return allowed.error();
  }
  auto impl = std::make_shared<Impl>();
  impl->spec = std::move(spec);
  auto loop = EventLoop::start("coordinator plane");
  if (!loop) return loop.error();
  impl->loop = std::move(*loop);
  Impl* raw = impl.get();
  Status listening = raw->loop->call<Status>([raw](EventLoop::Context& context) -> Status {
    try {
      if (raw->spec.tls) {
        auto tls = make_server_tls(*raw->spec.tls, context.io.provider->getTimer(), raw->spec.limits.handshake_timeout_s);
        if (!tls) return tls.error();
        raw->tls = std::move(*tls);
      }
      auto address = context.io.provider->getNetwork().parseAddress(raw->spec.host, raw->spec.port).wait(context.io.waitScope);
      raw->listener = address->listen();
      raw->port = static_cast<uint16_t>(raw->listener->getPort());
      raw->accepting = raw->accept_loop(context).eagerlyEvaluate([raw](kj::Exception&& e) {
        raw->log->error("the plane stopped accepting: {}", e.getDescription().cStr());
      });
      raw->loop->at_stop([raw] {
        for (auto& [id, c] : std::map<uint64_t, std::shared_ptr<Connection>>(raw->connections)) raw->close(c, "shutting down");
        raw->accepting = nullptr;
        raw->listener = nullptr;
        raw->tls.reset();
      });
      return Status::success();
    } catch (kj::Exception& e) {
      return make_error(ErrorCode::unavailable, "cannot listen on " + raw->spec.host + ":" + std::to_string(raw->spec.port) +
                                                    ": " + e.getDescription().cStr());
    }
  });
  if (!listening) return listening.error();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { impl_->loop.reset(); }
uint16_t Server::port() const { return impl_->port; }
bool Server::tls() const { return impl_->spec.tls.has_value(); }
std::shared_ptr<const EdgeCounters> Server::counters() const { return impl_->counters; }

}  // namespace archipelago::remote

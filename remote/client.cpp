#include "remote/client.hpp"

#include <algorithm>
#include <deque>
#include <future>
#include <map>
#include <optional>

#include <capnp/message.h>
#include <capnp/rpc-twoparty.h>
#include <caf/all.hpp>
#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <kj/debug.h>
#include <kj/timer.h>

#include "actors/authorization.hpp"
#include "remote/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "remote/bridge.hpp"
#include "remote/envelope_kind.hpp"
#include "remote/event_loop.hpp"
#include "remote/plane.capnp.h"
#include "remote/proof.hpp"
#include "remote/server.hpp"
#include "remote/tls.hpp"

namespace archipelago::remote {
namespace {

using actors::WireBytes;

using actors::monotonic_seconds;
kj::ArrayPtr<const kj::byte> bytes_of(const std::vector<char>& v) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(v.data()), v.size());
}
std::string string_of(capnp::Data::Reader data) { return std::string(reinterpret_cast<const char*>(data.begin()), data.size()); }

caf::atom_value role_of(wire::Role role) {
  return role == wire::Role::STORE ? actors::store_name() : role == wire::Role::MONITOR ? actors::monitor_name() : actors::syncer_name();
}

// Runs `work` on the loop and waits for the promise it returns, at most `timeout_s` (the kj side
// times out too, so nothing is left running).
template <typename T>
Expected<T> run_sync(EventLoop& loop, double timeout_s, std::function<kj::Promise<T>(EventLoop::Context&)> work) {
  auto result = std::make_shared<std::promise<Expected<T>>>();
  auto future = result->get_future();
  const bool posted = loop.post([result, work, timeout_s](EventLoop::Context& context) {
    auto promise = context.io.provider->getTimer().timeoutAfter(kj_duration(timeout_s), work(context));
    context.tasks.add(promise.then([result](T value) { result->set_value(std::move(value)); },
                                   [result](kj::Exception&& e) {
                                     const bool timeout = e.getType() == kj::Exception::Type::OVERLOADED &&
                                                          kj::StringPtr(e.getDescription()).startsWith("operation timed out");
                                     result->set_value(make_error(timeout ? ErrorCode::unavailable : ErrorCode::io,
                                                                  timeout ? std::string("timed out") : std::string(e.getDescription().cStr())));
                                   }));
  });
  if (!posted) return make_error(ErrorCode::unavailable, "the plane has stopped");
  if (future.wait_for(std::chrono::milliseconds(static_cast<int64_t>((timeout_s + 5) * 1000))) != std::future_status::ready) {
    return make_error(ErrorCode::unavailable, "timed out");
  }
  return future.get();
}

// One dialled connection; lives on the loop thread. Members are destroyed bottom-up.
struct Dialled : std::enable_shared_from_this<Dialled> {
  EventLoop::Context* context = nullptr;
  EdgeLimits limits;
  bool closed = false;
  double last_answer_s = monotonic_seconds();
  std::function<void()> on_close;

  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
  kj::Maybe<wire::Gateway::Client> gateway;
  kj::Maybe<kj::Promise<void>> pinger;

  void close() {
    if (closed) return;
    closed = true;
    if (on_close) on_close();
    on_close = nullptr;
    std::shared_ptr<Dialled> keep = shared_from_this();
    context->tasks.add(kj::evalLater([keep] { keep->drop(); }));
  }
  virtual void drop() {
    pinger = nullptr;
    gateway = nullptr;
    rpc = nullptr;
    network = nullptr;
    stream = nullptr;
  }
  virtual ~Dialled() = default;

  // Pings with `send` every ping_interval_s; cuts the connection after idle_timeout_s without an answer.
  void keep_alive(std::function<kj::Promise<void>()> send) {
    std::weak_ptr<Dialled> weak = shared_from_this();
    auto& timer = context->io.provider->getTimer();
    auto loop = std::make_shared<std::function<kj::Promise<void>()>>();
    std::weak_ptr<std::function<kj::Promise<void>()>> again = loop;
    *loop = [weak, &timer, send, again]() -> kj::Promise<void> {
      auto self = weak.lock();
      if (!self || self->closed) return kj::READY_NOW;
      if (monotonic_seconds() - self->last_answer_s > self->limits.idle_timeout_s) {
        component_logger("remote")->warn("the coordinator has not answered for {} s: cutting the link", self->limits.idle_timeout_s);
        self->close();
        return kj::READY_NOW;
      }
      self->context->tasks.add(send().then([weak] {
        if (auto s = weak.lock()) s->last_answer_s = monotonic_seconds();
      }));
      return timer.afterDelay(kj_duration(self->limits.ping_interval_s)).then([again] {
        auto next = again.lock();
        return next ? (*next)() : kj::Promise<void>(kj::READY_NOW);
      });
    };
    pinger = (*loop)().attach(kj::heap<std::shared_ptr<std::function<kj::Promise<void>()>>>(loop));
  }
};

// Dials, wraps in TLS, starts the RPC client and asks for the bootstrap Gateway.
kj::Promise<void> dial(EventLoop::Context& context, std::shared_ptr<Dialled> dialled, const Endpoint& endpoint, Tls* tls) {
  dialled->context = &context;
  dialled->limits = endpoint.limits;
  const std::string host = endpoint.host;
  return context.io.provider->getNetwork()
      .parseAddress(host, endpoint.port)
      .then([](kj::Own<kj::NetworkAddress> address) { return address->connect().attach(kj::mv(address)); })
      .then([tls, host](kj::Own<kj::AsyncIoStream> stream) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
        if (!tls) return kj::mv(stream);
        return context_of(*tls).wrapClient(kj::mv(stream), host);
      })
      .then([dialled](kj::Own<kj::AsyncIoStream> stream) {
        capnp::ReaderOptions options;
        options.traversalLimitInWords = dialled->limits.max_message_bytes / 8;
        options.nestingLimit = 32;
        dialled->stream = kj::mv(stream);
        dialled->network = kj::heap<capnp::TwoPartyVatNetwork>(*dialled->stream, capnp::rpc::twoparty::Side::CLIENT, options);
        dialled->rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(capnp::makeRpcClient(*dialled->network));
        dialled->rpc->setFlowLimit(dialled->limits.max_pending_bytes / 8);
        capnp::MallocMessageBuilder message(8);
        auto vat = message.initRoot<capnp::rpc::twoparty::VatId>();
        vat.setSide(capnp::rpc::twoparty::Side::SERVER);
        dialled->gateway = dialled->rpc->bootstrap(vat).castAs<wire::Gateway>();
        std::weak_ptr<Dialled> weak = dialled;
        dialled->context->tasks.add(dialled->network->onDisconnect().then([weak] {
          if (auto d = weak.lock()) d->close();
        }));
      });
}

kj::Promise<std::string> ask_nonce(Dialled& dialled) {
  return KJ_ASSERT_NONNULL(dialled.gateway).challengeRequest().send().then([](auto response) {
    return string_of(response.getNonce());
  });
}

Status check_endpoint(const Endpoint& endpoint) {
  return check_plaintext_allowed(endpoint.host, endpoint.tls.has_value(), endpoint.insecure_plaintext, "the coordinator at");
}

// ---- node session ------------------------------------------------------------------------------------

struct Upload {
  EnvelopeKind kind;
  caf::atom_value role;
  uint32_t handle;
  WireBytes bytes;
  std::optional<bool> gone;  // set: not a message but the learner's end (abnormal or not)
  bool late = false;         // sent by a learner that has ended since (nothing is delivered to it)
};

struct NodeConnection final : Dialled {
  std::shared_ptr<EdgeCounters> counters;
  caf::actor watcher, link;
  std::string key;
  std::map<uint32_t, caf::actor> learners;  // handle -> local learner
  kj::Maybe<wire::Session::Client> session;
  std::deque<Upload> uploads;
  uint64_t upload_bytes = 0;
  bool pumping = false;

  void drop() override {
    session = nullptr;
    Dialled::drop();
  }

  void up(Upload&& upload, const caf::actor& learner) {
    if (closed || session == nullptr) return;
    if (!upload.late) learners[upload.handle] = learner;
    counters->bytes_sent += static_cast<int64_t>(upload.bytes.size());
    if (upload.kind == EnvelopeKind::heartbeat || upload.kind == EnvelopeKind::slot_report) {
      send_now(upload);  // liveness never waits behind bulk
      return;
    }
    upload_bytes += upload.bytes.size();
    uploads.push_back(std::move(upload));
    if (upload_bytes > limits.max_pending_bytes) {
      counters->pending_limit_hits += 1;
      component_logger("remote")->warn("{} MiB wait to be sent to the coordinator: cutting the link", upload_bytes >> 20);
      close();
      return;
    }
    pump();
  }

  void send_now(const Upload& u) {
    auto& s = KJ_ASSERT_NONNULL(session);
    auto envelope = bytes_of(u.bytes);
    switch (u.kind) {
      case EnvelopeKind::join: {
        auto r = s.joinRequest(); r.setLearner(u.handle); r.setEnvelope(envelope); context->tasks.add(r.send().ignoreResult()); break;
      }
      case EnvelopeKind::fetch: {
        auto r = s.fetchRequest(); r.setLearner(u.handle); r.setEnvelope(envelope); context->tasks.add(r.send().ignoreResult()); break;
      }
      case EnvelopeKind::heartbeat: {
        auto r = s.heartbeatRequest(); r.setLearner(u.handle); r.setEnvelope(envelope); context->tasks.add(r.send().ignoreResult()); break;
      }
      case EnvelopeKind::slot_report: {
        auto r = s.slotReportRequest(); r.setLearner(u.handle); r.setEnvelope(envelope); context->tasks.add(r.send().ignoreResult()); break;
      }
      case EnvelopeKind::leave: {
        auto r = s.leaveRequest(); r.setLearner(u.handle); r.setToMonitor(u.role == actors::monitor_name()); r.setEnvelope(envelope);
        context->tasks.add(r.send().ignoreResult()); break;
      }
      case EnvelopeKind::fragment_update:
      case EnvelopeKind::other: break;
    }
  }

  // In order; an update waits for the stream's flow control before the next item leaves.
  void pump() {
    while (!pumping && !uploads.empty() && !closed) {
      Upload u = std::move(uploads.front());
      uploads.pop_front();
      upload_bytes -= u.bytes.size();
      if (u.gone) {
        send_gone(u.handle, *u.gone);
        continue;
      }
      if (u.kind != EnvelopeKind::fragment_update) {
        send_now(u);
        continue;
      }
      auto r = KJ_ASSERT_NONNULL(session).updateRequest();
      r.setLearner(u.handle);
      r.setEnvelope(bytes_of(u.bytes));
      pumping = true;
      std::weak_ptr<Dialled> weak = shared_from_this();
      context->tasks.add(r.send().then(
          [weak] {
            if (auto d = std::static_pointer_cast<NodeConnection>(weak.lock())) {
              d->pumping = false;
              d->pump();
            }
          },
          [weak](kj::Exception&&) {
            if (auto d = weak.lock()) d->close();
          }));
    }
  }

  // A learner's end leaves after what it sent before it ended, never ahead of a queued update: the
  // coordinator would otherwise take the late message for a new incarnation of the slot.
  void learner_gone(uint32_t handle, bool abnormal) {
    learners.erase(handle);
    if (closed || session == nullptr) return;
    if (pumping || !uploads.empty()) {
      uploads.push_back(Upload{EnvelopeKind::other, actors::syncer_name(), handle, {}, abnormal});
      pump();
      return;
    }
    send_gone(handle, abnormal);
  }

  void send_gone(uint32_t handle, bool abnormal) {
    auto r = KJ_ASSERT_NONNULL(session).learnerGoneRequest();
    r.setLearner(handle);
    r.setAbnormal(abnormal);
    context->tasks.add(r.send().ignoreResult());
  }
};

class NodeSinkImpl final : public wire::NodeSink::Server {
 public:
  explicit NodeSinkImpl(std::weak_ptr<NodeConnection> connection) : connection_(std::move(connection)) {}

  kj::Promise<void> deliver(DeliverContext context) override {
    auto c = connection_.lock();
    if (!c || c->closed) return kj::READY_NOW;
    c->last_answer_s = monotonic_seconds();
    auto p = context.getParams();
    auto it = c->learners.find(p.getLearner());
    if (it == c->learners.end()) return kj::READY_NOW;  // that incarnation is gone
    auto envelope = p.getEnvelope();
    c->counters->bytes_received += static_cast<int64_t>(envelope.size());
    WireBytes bytes(reinterpret_cast<const char*>(envelope.begin()), reinterpret_cast<const char*>(envelope.end()));
    caf::anon_send(c->watcher, remote::deliver_atom::value, c->key, role_of(p.getRole()), it->second, std::move(bytes));
    return kj::READY_NOW;
  }
  kj::Promise<void> control(ControlContext context) override {
    auto c = connection_.lock();
    if (!c || c->closed) return kj::READY_NOW;
    auto envelope = context.getParams().getEnvelope();
    WireBytes bytes(reinterpret_cast<const char*>(envelope.begin()), reinterpret_cast<const char*>(envelope.end()));
    caf::anon_send(c->watcher, actors::control_atom::value, c->key, std::move(bytes));
    return kj::READY_NOW;
  }
  kj::Promise<void> stop(StopContext) override {
    if (auto c = connection_.lock(); c && !c->closed) caf::anon_send(c->watcher, actors::stop_atom::value, c->key);
    return kj::READY_NOW;
  }

 private:
  std::weak_ptr<NodeConnection> connection_;
};

struct LinkState {
  std::map<caf::actor_addr, uint32_t> handles;
  // Learners that ended lately, with their handles: a message one sent before it ended may still be
  // on its way through its facade's shaped link, behind the down message. It keeps its incarnation's
  // handle: a new one would reach the coordinator as a new incarnation of the slot, alive again after
  // its death. The newest 256.
  std::deque<std::pair<caf::actor_addr, uint32_t>> ended;
  uint32_t next_handle = 1;
  const char* name = "node_plane_link";
};

// Stands for the coordinator's link in this process: facades send it what their learners send.
caf::behavior link_proxy(caf::stateful_actor<LinkState>* self, EventLoop* loop, std::weak_ptr<NodeConnection> weak,
                         std::string key, std::shared_ptr<actors::Refusals> refusals) {
  auto log = component_logger("node");
  self->set_down_handler([=](caf::down_msg& down) {
    auto& handles = self->state.handles;
    auto it = handles.find(down.source);
    if (it == handles.end()) return;
    const uint32_t handle = it->second;
    const bool abnormal = down.reason && down.reason != caf::exit_reason::normal;
    handles.erase(it);
    auto& ended = self->state.ended;
    ended.emplace_back(down.source, handle);
    if (ended.size() > 256) ended.pop_front();
    loop->post([weak, handle, abnormal](EventLoop::Context&) {
      if (auto c = weak.lock()) c->learner_gone(handle, abnormal);
    });
  });
  actors::refuse_unmatched(self, "node plane link", refusals, log);
  return {
      [=](remote::up_atom, const std::string& presented, caf::atom_value role, caf::actor& learner, WireBytes& bytes) {
        if (!actors::keys_equal(presented, key)) {
          refusals->refuse("node plane link", "up", actors::Refusal::wrong_key, *log);
          return;
        }
        auto header = envelope_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
        if (!header || header->kind == EnvelopeKind::other || !learner) {
          refusals->refuse("node plane link", header ? header->name : "up", actors::Refusal::kind_not_allowed, *log,
                           "not a kind a learner sends to the coordinator");
          return;
        }
        auto& handles = self->state.handles;
        uint32_t handle = 0;
        bool late = false;
        if (auto it = handles.find(learner.address()); it != handles.end()) {
          handle = it->second;
        } else {
          const auto& ended = self->state.ended;
          auto gone = std::find_if(ended.begin(), ended.end(), [&](const auto& e) { return e.first == learner.address(); });
          if (gone != ended.end()) {
            handle = gone->second;
            late = true;
          } else {
            handle = self->state.next_handle++;
            handles.emplace(learner.address(), handle);
            self->monitor(learner);
          }
        }
        Upload upload{header->kind, role, handle, std::move(bytes), std::nullopt, late};
        loop->post([weak, upload = std::move(upload), learner](EventLoop::Context&) mutable {
          if (auto c = weak.lock()) c->up(std::move(upload), learner);
        });
      },
  };
}

}  // namespace

// ---- NodePlane ---------------------------------------------------------------------------------------

struct NodePlane::Impl {
  caf::actor_system* system = nullptr;
  Endpoint endpoint;
  std::unique_ptr<EventLoop> loop;
  std::shared_ptr<EdgeCounters> counters = std::make_shared<EdgeCounters>();
  std::shared_ptr<actors::Refusals> refusals = std::make_shared<actors::Refusals>();
  // Loop thread only:
  TlsHandle tls;
  std::shared_ptr<NodeConnection> current;
  ~Impl() { loop.reset(); }  // first: the loop drops its objects on its own thread
};

NodePlane::NodePlane(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
NodePlane::~NodePlane() {
  leave();
  impl_->loop.reset();
}

Expected<std::unique_ptr<NodePlane>> NodePlane::start(caf::actor_system& system, Endpoint endpoint) {
  if (auto allowed = check_endpoint(endpoint); !allowed) return allowed.error();
  auto impl = std::make_unique<Impl>();
  impl->system = &system;
  impl->endpoint = std::move(endpoint);
  auto loop = EventLoop::start("node plane");
  if (!loop) return loop.error();
  impl->loop = std::move(*loop);
  Impl* raw = impl.get();
  Status ready = raw->loop->call<Status>([raw](EventLoop::Context&) -> Status {
    if (raw->endpoint.tls) {
      auto tls = make_client_tls(*raw->endpoint.tls);
      if (!tls) return tls.error();
      raw->tls = std::move(*tls);
    }
    raw->loop->at_stop([raw] {
      if (raw->current) raw->current->close();
      raw->current.reset();
      raw->tls.reset();
    });
    return Status::success();
  });
  if (!ready) return ready.error();
  return std::unique_ptr<NodePlane>(new NodePlane(std::move(impl)));
}

void NodePlane::leave() {
  Impl* raw = impl_.get();
  raw->loop->post([raw](EventLoop::Context&) {
    if (raw->current) raw->current->close();
    raw->current.reset();
  });
}

std::shared_ptr<const EdgeCounters> NodePlane::counters() const { return impl_->counters; }

Expected<NodeSession> NodePlane::join(const net::Secret& secret, NodeJoin request, caf::actor watcher, double timeout_s) {
  leave();
  Impl* raw = impl_.get();
  auto secret_copy = std::make_shared<net::Secret>(secret);
  auto result = run_sync<NodeSession>(*raw->loop, timeout_s, [raw, secret_copy, request, watcher](EventLoop::Context& context) {
    auto connection = std::make_shared<NodeConnection>();
    connection->counters = raw->counters;
    connection->watcher = watcher;
    connection->key = actors::random_key();
    raw->current = connection;
    return dial(context, connection, raw->endpoint, raw->tls.get())
        .then([connection] { return ask_nonce(*connection); })
        .then([raw, connection, secret_copy, request](std::string nonce) {
          auto call = KJ_ASSERT_NONNULL(connection->gateway).joinRequest();
          auto r = call.initRequest();
          r.setJoin(bytes_of(request.join));
          r.setLearners(request.learners);
          r.setPreferredFirst(request.preferred_first);
          const std::string proof = prove(*secret_copy, join_purpose(request.certificate_name), nonce);
          r.setProof(kj::arrayPtr(reinterpret_cast<const kj::byte*>(proof.data()), proof.size()));
          call.setSink(kj::heap<NodeSinkImpl>(connection));
          return call.send();
        })
        .then([raw, connection](auto response) {
          auto answer = response.getAnswer();
          NodeSession session;
          auto welcome = answer.getWelcome();
          session.welcome.assign(reinterpret_cast<const char*>(welcome.begin()), reinterpret_cast<const char*>(welcome.end()));
          session.config_toml = answer.getConfigToml();
          session.topology_toml = answer.getTopologyToml();
          session.coordinator_site = answer.getCoordinatorSite();
          auto tokenizer = answer.getTokenizer();
          session.tokenizer_model.assign(reinterpret_cast<const char*>(tokenizer.begin()), tokenizer.size());
          session.first_learner = answer.getFirstLearner();
          session.shard = answer.getShard();
          session.shards = std::max(1, answer.getShards());
          if (!response.hasSession()) {
            connection->close();
            return session;
          }
          connection->session = response.getSession();
          session.key = connection->key;
          session.link = raw->system->spawn(link_proxy, raw->loop.get(), std::weak_ptr<NodeConnection>(connection),
                                            connection->key, raw->refusals);
          connection->link = session.link;
          caf::actor link = session.link;
          connection->on_close = [link] { caf::anon_send_exit(link, caf::exit_reason::remote_link_unreachable); };
          std::weak_ptr<NodeConnection> weak = connection;
          connection->keep_alive([weak]() -> kj::Promise<void> {
            auto c = weak.lock();
            if (!c || c->closed || c->session == nullptr) return kj::READY_NOW;
            return KJ_ASSERT_NONNULL(c->session).pingRequest().send().ignoreResult();
          });
          return session;
        });
  });
  if (!result) leave();
  return result;
}

// ---- AdminClient -------------------------------------------------------------------------------------

struct AdminConnection final : Dialled {
  kj::Maybe<wire::Admin::Client> admin;
  void drop() override {
    admin = nullptr;
    Dialled::drop();
  }
};

struct AdminClient::Impl {
  Endpoint endpoint;
  std::unique_ptr<EventLoop> loop;
  TlsHandle tls;  // loop thread only
  std::shared_ptr<AdminConnection> connection;  // loop thread only
  ~Impl() { loop.reset(); }  // first: the loop drops its objects on its own thread
};

AdminClient::AdminClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
AdminClient::~AdminClient() { impl_->loop.reset(); }

Expected<std::unique_ptr<AdminClient>> AdminClient::open(Endpoint endpoint, const net::Secret& admin_secret, double timeout_s) {
  if (auto allowed = check_endpoint(endpoint); !allowed) return allowed.error();
  auto impl = std::make_unique<Impl>();
  impl->endpoint = std::move(endpoint);
  auto loop = EventLoop::start("console plane");
  if (!loop) return loop.error();
  impl->loop = std::move(*loop);
  Impl* raw = impl.get();
  raw->loop->at_stop([raw] {
    if (raw->connection) raw->connection->close();
    raw->connection.reset();
    raw->tls.reset();
  });
  auto secret = std::make_shared<net::Secret>(admin_secret);
  auto opened = run_sync<std::string>(*raw->loop, timeout_s, [raw, secret](EventLoop::Context& context) -> kj::Promise<std::string> {
    if (raw->endpoint.tls && !raw->tls) {
      auto tls = make_client_tls(*raw->endpoint.tls);
      if (!tls) return KJ_EXCEPTION(FAILED, tls.error().reason.c_str());
      raw->tls = std::move(*tls);
    }
    auto connection = std::make_shared<AdminConnection>();
    raw->connection = connection;
    return dial(context, connection, raw->endpoint, raw->tls.get())
        .then([connection] { return ask_nonce(*connection); })
        .then([connection, secret](std::string nonce) {
          auto call = KJ_ASSERT_NONNULL(connection->gateway).openAdminRequest();
          const std::string proof = prove(*secret, kAdminPurpose, nonce);
          call.setProof(kj::arrayPtr(reinterpret_cast<const kj::byte*>(proof.data()), proof.size()));
          return call.send();
        })
        .then([connection](auto response) -> std::string {
          if (!response.getAccepted()) {
            std::string reason = response.getReason();
            return reason.empty() ? "refused" : reason;
          }
          connection->admin = response.getAdmin();
          std::weak_ptr<AdminConnection> weak = connection;
          connection->keep_alive([weak]() -> kj::Promise<void> {
            auto c = weak.lock();
            if (!c || c->closed || c->admin == nullptr) return kj::READY_NOW;
            return KJ_ASSERT_NONNULL(c->admin).pingRequest().send().ignoreResult();
          });
          return "";
        });
  });
  if (!opened) return make_error(ErrorCode::unavailable, "cannot reach the coordinator at " + raw->endpoint.host + ":" +
                                                             std::to_string(raw->endpoint.port) + ": " + opened.error().reason);
  if (!opened->empty()) return make_error(ErrorCode::conflict, *opened);
  return std::unique_ptr<AdminClient>(new AdminClient(std::move(impl)));
}

Expected<std::vector<char>> AdminClient::request(const std::vector<char>& command, double timeout_s) {
  Impl* raw = impl_.get();
  return run_sync<std::vector<char>>(*raw->loop, timeout_s, [raw, command](EventLoop::Context&) -> kj::Promise<std::vector<char>> {
    auto c = raw->connection;
    if (!c || c->closed || c->admin == nullptr) return KJ_EXCEPTION(DISCONNECTED, "the admin session has ended");
    auto call = KJ_ASSERT_NONNULL(c->admin).requestRequest();
    call.setCommand(bytes_of(command));
    return call.send().then([](auto response) {
      auto reply = response.getReply();
      return std::vector<char>(reinterpret_cast<const char*>(reply.begin()), reinterpret_cast<const char*>(reply.end()));
    });
  });
}

}  // namespace archipelago::remote

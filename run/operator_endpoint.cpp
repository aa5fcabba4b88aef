#include "run/operator_endpoint.hpp"

#include <caf/all.hpp>

#include "remote/admin.hpp"
#include "run/cluster.hpp"
#include "actors/directory.hpp"
#include "remote/gateway.hpp"
#include "common/log.hpp"
#include "remote/server.hpp"

namespace archipelago::run {

using namespace archipelago::actors;  // the actors a process is assembled from
using namespace archipelago::remote;  // and the plane between processes

struct OperatorEndpoint::Impl {
  caf::actor_system* system = nullptr;
  caf::actor admin, gateway;
  std::shared_ptr<RemoteCounters> counters = std::make_shared<RemoteCounters>();
  std::unique_ptr<remote::Server> server;
  uint16_t port = 0;

  ~Impl() {
    server.reset();
    if (!system) return;
    if (gateway) caf::anon_send_exit(gateway, caf::exit_reason::user_shutdown);
    if (admin) caf::anon_send_exit(admin, caf::exit_reason::user_shutdown);
    Directory::erase(*system, caf::atom("gateway"));
  }
};

OperatorEndpoint::OperatorEndpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
OperatorEndpoint::~OperatorEndpoint() = default;
uint16_t OperatorEndpoint::port() const { return impl_->port; }
int64_t OperatorEndpoint::sessions_refused() const { return impl_->counters->admin_sessions_refused; }

Expected<std::unique_ptr<OperatorEndpoint>> OperatorEndpoint::start(LocalCluster& cluster, const HostPort& listen,
                                                                     std::shared_ptr<const net::Secret> admin_secret,
                                                                     const TransportOptions& transport) {
  if (!admin_secret) {
    return make_error(ErrorCode::invalid_argument,
                      "an admin console needs an admin token (--admin-token-file or $ARCHIPELAGO_ADMIN_TOKEN_FILE)");
  }
  auto& system = cluster.system();
  if (auto status = validate_transport(transport); !status) return status.error();
  auto impl = std::make_unique<Impl>();
  impl->system = &system;
  const auto& options = cluster.options();
  AdminSpec admin;
  admin.sessions = std::make_shared<AdminSessions>();
  admin.counters = impl->counters;
  admin.mode = options.setup.run.mode;
  admin.run_dir = options.run_dir;
  admin.started_s = cluster.started_s();
  admin.learner_slots = cluster.learner_slots();
  admin.events = options.events;
  admin.accounting_at_start = cluster.accounting_at_start();
  admin.control = [&system](const messages::LearnerControl& control) -> Expected<nlohmann::json> {
    if (control.action == messages::ControlAction::kill_node) {
      return make_error(ErrorCode::invalid_argument, "a local run has no nodes: kill learner ID or kill syncer");
    }
    auto done = apply_learner_control(system, control);
    if (done) (*done)["node"] = "local";
    return done;
  };
  admin.drain = [&cluster] { cluster.request_drain(); };
  auto sessions = admin.sessions;
  impl->admin = spawn_admin(system, std::move(admin));
  GatewaySpec gateway;  // no join secret and no learner slots: every node join is refused
  gateway.site = "local";
  gateway.counters = impl->counters;
  gateway.admin_secret = std::move(admin_secret);
  gateway.admin = impl->admin;
  gateway.admin_sessions = sessions;
  auto admin_secret_of_plane = gateway.admin_secret;
  impl->gateway = spawn_gateway(system, std::move(gateway));
  Directory::put(system, caf::atom("gateway"), impl->gateway);
  remote::ServerSpec plane;
  plane.system = &system;
  plane.gateway = impl->gateway;
  plane.admin_secret = admin_secret_of_plane;
  plane.counters = impl->counters;
  plane.host = listen.host;
  plane.port = listen.port;
  plane.tls = tls_files(transport);
  plane.insecure_plaintext = transport.insecure_plaintext;
  plane.limits = edge_limits(transport);
  auto server = remote::Server::start(std::move(plane));
  if (!server) return server.error();
  impl->server = std::move(*server);
  impl->counters->edge = impl->server->counters();
  impl->port = impl->server->port();
  component_logger("admin")->info("admin console on {}:{}{}", listen.host, impl->port, transport.tls ? " (TLS)" : "");
  return std::unique_ptr<OperatorEndpoint>(new OperatorEndpoint(std::move(impl)));
}

}  // namespace archipelago::run

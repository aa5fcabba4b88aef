// The admin console of a local run (`archipelago train --admin-listen HOST:PORT`): the same admin
// actor and gateway as a coordinator's (remote/admin.hpp, remote/gateway.hpp), on the local
// cluster's actor system, served by the cross-site plane (remote/server.hpp; TLS when [net] tls).
//
//   OperatorEndpoint::start(cluster, ...)  after LocalCluster::start: spawns the admin actor and a
//                                          gateway with no learner slots (the plane refuses every
//                                          node join) and serves it on listen.host:listen.port
//
// Everything a coordinator's console does works here, with the same admin token rules and audit
// log; learner control goes straight to the learners of this process, `kill node` is refused (a
// local run has no nodes) and `drain` ends the run through LocalCluster::request_drain().
#pragma once

#include <cstdint>
#include <memory>

#include "remote/remote_protocol.hpp"
#include "actors/runtime_options.hpp"
#include "common/error.hpp"
#include "net/auth.hpp"

namespace archipelago::run {

class LocalCluster;

class OperatorEndpoint {
 public:
  // `admin_secret` is required: without it no console session could ever be opened.
  static Expected<std::unique_ptr<OperatorEndpoint>> start(LocalCluster& cluster, const remote::HostPort& listen,
                                                           std::shared_ptr<const net::Secret> admin_secret,
                                                           const remote::TransportOptions& transport);
  ~OperatorEndpoint();
  OperatorEndpoint(const OperatorEndpoint&) = delete;
  OperatorEndpoint& operator=(const OperatorEndpoint&) = delete;

  uint16_t port() const;
  int64_t sessions_refused() const;  // wrong or missing admin tokens so far

  struct Impl;

 private:
  explicit OperatorEndpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace archipelago::run

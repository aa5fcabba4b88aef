#include "actors/remote_protocol.hpp"

#include <chrono>
#include <filesystem>

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

namespace archipelago::actors {

Status configure_transport(caf::actor_system_config& config, const TransportOptions& options) {
  auto span = [](double s) {
    return caf::timespan{std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(s))};
  };
  config.load<caf::io::middleman>();
  config.set("middleman.heartbeat-interval", span(options.heartbeat_interval_s));
  config.set("middleman.connection-timeout", span(options.connection_timeout_s));
  if (!options.tls) return {};
  for (const auto& [key, path] : {std::pair{"net.tls_certificate", options.tls_certificate},
                                  std::pair{"net.tls_key", options.tls_key}, std::pair{"net.tls_ca", options.tls_ca}}) {
    if (path.empty()) return make_error(ErrorCode::invalid_argument, std::string(key) + " must be set when net.tls = true");
    if (!std::filesystem::is_regular_file(path)) {
      return make_error(ErrorCode::not_found, std::string(key) + ": no such file: " + path);
    }
  }
  config.load<caf::openssl::manager>();
  config.openssl_certificate = options.tls_certificate;
  config.openssl_key = options.tls_key;
  config.openssl_cafile = options.tls_ca;
  return {};
}

Expected<HostPort> parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    return make_error(ErrorCode::invalid_argument, "'" + text + "': expected HOST:PORT");
  }
  HostPort out;
  out.host = text.substr(0, colon);
  if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']') out.host = out.host.substr(1, out.host.size() - 2);
  int port = 0;
  for (size_t i = colon + 1; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9' || port > 65535) return make_error(ErrorCode::invalid_argument, "'" + text + "': bad port");
    port = port * 10 + (text[i] - '0');
  }
  if (port > 65535) return make_error(ErrorCode::invalid_argument, "'" + text + "': bad port");
  out.port = static_cast<uint16_t>(port);
  return out;
}

}  // namespace archipelago::actors

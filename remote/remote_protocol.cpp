#include "remote/remote_protocol.hpp"

#include <chrono>
#include <filesystem>


namespace archipelago::remote {

Status validate_transport(const TransportOptions& options) {
  if (!options.tls) return {};
  for (const auto& [key, path] : {std::pair{"net.tls_certificate", options.tls_certificate},
                                  std::pair{"net.tls_key", options.tls_key}, std::pair{"net.tls_ca", options.tls_ca}}) {
    if (path.empty()) return make_error(ErrorCode::invalid_argument, std::string(key) + " must be set when net.tls = true");
    if (!std::filesystem::is_regular_file(path)) {
      return make_error(ErrorCode::not_found, std::string(key) + ": no such file: " + path);
    }
  }
  return {};
}

remote::EdgeLimits edge_limits(const TransportOptions& options) {
  auto limits = options.limits;
  limits.ping_interval_s = options.heartbeat_interval_s;
  limits.idle_timeout_s = options.connection_timeout_s;
  return limits;
}

std::optional<remote::TlsFiles> tls_files(const TransportOptions& options) {
  if (!options.tls) return std::nullopt;
  return remote::TlsFiles{options.tls_certificate, options.tls_key, options.tls_ca};
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

}  // namespace archipelago::remote

// Mutual TLS for the plane (kj-tls over OpenSSL): a context built from a run's CA files
// (`archipelago ca`). The server side requires a client certificate signed by the run's CA
// (verifyClients) and bounds the handshake; the client side verifies the server's certificate
// against the same CA and the host name (or IP address) it dialled. The system trust store is
// never used: only the run's CA is trusted. Create and use on the plane's loop thread.
#pragma once

#include <memory>

#include "common/error.hpp"
#include "remote/edge.hpp"

namespace kj {
class TlsContext;
class Timer;
}  // namespace kj

namespace archipelago::remote {

struct Tls;  // the context and the key material it refers to

struct TlsDeleter {
  void operator()(Tls* tls) const;
};
using TlsHandle = std::unique_ptr<Tls, TlsDeleter>;

// Errors: a file that cannot be read or parsed, named with its path (never its contents).
Expected<TlsHandle> make_server_tls(const TlsFiles& files, kj::Timer& timer, double handshake_timeout_s);
Expected<TlsHandle> make_client_tls(const TlsFiles& files);

kj::TlsContext& context_of(Tls& tls);

// Reads a PEM file of at most 1 MiB. Errors: missing, unreadable, or too large.
Expected<std::string> read_pem(const std::string& path, const char* what);

}  // namespace archipelago::remote

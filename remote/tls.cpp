#include "remote/tls.hpp"

#include <fstream>
#include <optional>
#include <vector>
#include <sstream>

#include <kj/compat/tls.h>
#include <kj/timer.h>

namespace archipelago::remote {

struct Tls {
  std::optional<kj::TlsKeypair> keypair;
  std::vector<kj::TlsCertificate> trusted;
  kj::Own<kj::TlsContext> context;
};

void TlsDeleter::operator()(Tls* tls) const { delete tls; }

kj::TlsContext& context_of(Tls& tls) { return *tls.context; }

Expected<std::string> read_pem(const std::string& path, const char* what) {
  if (path.empty()) return make_error(ErrorCode::invalid_argument, std::string("no ") + what + " file ([net] tls_*)");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorCode::not_found, std::string("cannot read the ") + what + " file " + path);
  std::ostringstream text;
  text << in.rdbuf();
  std::string pem = text.str();
  if (pem.size() > (1u << 20)) return make_error(ErrorCode::invalid_argument, std::string("the ") + what + " file " + path + " is over 1 MiB");
  return pem;
}

namespace {

Expected<TlsHandle> make_tls(const TlsFiles& files, bool server, kj::Timer* timer, double handshake_timeout_s) {
  auto certificate = read_pem(files.certificate, "TLS certificate");
  if (!certificate) return certificate.error();
  auto key = read_pem(files.key, "TLS key");
  if (!key) return key.error();
  auto ca = read_pem(files.ca, "TLS CA");
  if (!ca) return ca.error();
  TlsHandle tls(new Tls);
  std::string stage = "certificate " + files.certificate;
  try {
    kj::TlsCertificate chain(kj::StringPtr(certificate->c_str()));
    stage = "key " + files.key;
    kj::TlsPrivateKey private_key(kj::StringPtr(key->c_str()));
    stage = "CA " + files.ca;
    tls->trusted.emplace_back(kj::StringPtr(ca->c_str()));
    stage = "TLS context";
    tls->keypair.emplace(kj::TlsKeypair{kj::mv(private_key), kj::mv(chain)});
    kj::TlsContext::Options options;
    options.useSystemTrustStore = false;
    options.trustedCertificates = kj::arrayPtr(tls->trusted.data(), tls->trusted.size());
    options.defaultKeypair = *tls->keypair;
    options.minVersion = kj::TlsVersion::TLS_1_2;
    if (server) {
      options.verifyClients = true;
      options.timer = *timer;
      options.acceptTimeout = static_cast<int64_t>(handshake_timeout_s * 1000) * kj::MILLISECONDS;
    }
    tls->context = kj::heap<kj::TlsContext>(kj::mv(options));
  } catch (kj::Exception& e) {
    // The description may quote OpenSSL's reason; it never holds the file's bytes.
    return make_error(ErrorCode::invalid_argument, "TLS " + stage + ": " + e.getDescription().cStr());
  }
  return tls;
}

}  // namespace

Expected<TlsHandle> make_server_tls(const TlsFiles& files, kj::Timer& timer, double handshake_timeout_s) {
  return make_tls(files, true, &timer, handshake_timeout_s);
}

Expected<TlsHandle> make_client_tls(const TlsFiles& files) { return make_tls(files, false, nullptr, 0); }

}  // namespace archipelago::remote

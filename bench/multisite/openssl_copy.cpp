// A second TLS baseline: OpenSSL straight on blocking sockets (SSL_set_fd), the same certificate
// files, mutual verification and minimum version as remote/tls.cpp. kj-tls moves every byte
// through an 8 KiB buffer each way (kj/compat/readiness-io.h) and an event-loop turn per fill;
// this row shows what TLS itself costs on this machine without that.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "bench/multisite/transfer_pair.hpp"

namespace multisite_bench {
namespace {

std::string openssl_error(const char* what) {
  char text[256] = "";
  ERR_error_string_n(ERR_get_error(), text, sizeof text);
  return std::string(what) + ": " + text;
}

struct Context {
  SSL_CTX* ctx = nullptr;
  ~Context() { SSL_CTX_free(ctx); }
};

void configure(Context& c, const archipelago::remote::TlsFiles& files, bool server) {
  c.ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!c.ctx) throw std::runtime_error(openssl_error("SSL_CTX_new"));
  SSL_CTX_set_min_proto_version(c.ctx, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(c.ctx, files.certificate.c_str()) != 1 ||
      SSL_CTX_use_PrivateKey_file(c.ctx, files.key.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_load_verify_locations(c.ctx, files.ca.c_str(), nullptr) != 1) {
    throw std::runtime_error(openssl_error("certificate files"));
  }
  SSL_CTX_set_verify(c.ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
}

struct Connection {
  int fd = -1;
  SSL* ssl = nullptr;
  ~Connection() {
    if (ssl) SSL_free(ssl);
    if (fd >= 0) ::close(fd);
  }
};

void wait_for(const std::atomic<bool>& flag, const Pair& pair) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (!flag && !pair.failed && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void openssl_receive(Pair& pair, uint16_t) {
  Context c;
  configure(c, *pair.spec.tls, true);
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 || ::listen(listener, 4) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    ::close(listener);
    throw std::runtime_error(std::string("cannot listen: ") + std::strerror(errno));
  }
  pair.port.set_value(ntohs(address.sin_port));
  Connection peer;
  pollfd waiting{listener, POLLIN, 0};
  if (::poll(&waiting, 1, 30'000) == 1) peer.fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ::close(listener);
  if (peer.fd < 0) throw std::runtime_error("the sender did not connect");
  peer.ssl = SSL_new(c.ctx);
  SSL_set_fd(peer.ssl, peer.fd);
  if (SSL_accept(peer.ssl) != 1) throw std::runtime_error(openssl_error("SSL_accept"));
  const double cpu_at_start = thread_cpu_s();
  std::vector<char> buffer(1 << 20);
  ByteCount count;
  while (count.got < pair.spec.total_bytes) {
    const int n = SSL_read(peer.ssl, buffer.data(), static_cast<int>(buffer.size()));
    if (n <= 0) break;
    count.add(static_cast<uint64_t>(n), pair);
  }
  pair.receiver_cpu_s = thread_cpu_s() - cpu_at_start;
  pair.bytes = count.got;
  if (count.got < pair.spec.total_bytes) pair.fail("the receiver counted " + std::to_string(count.got) + " bytes");
  pair.receiver_done = true;
  wait_for(pair.sender_done, pair);
}

void openssl_send(Pair& pair, uint16_t port) {
  const auto& spec = pair.spec;
  Context c;
  configure(c, *spec.tls, false);
  Connection out;
  out.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  if (::connect(out.fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    throw std::runtime_error(std::string("cannot connect: ") + std::strerror(errno));
  }
  out.ssl = SSL_new(c.ctx);
  SSL_set_fd(out.ssl, out.fd);
  SSL_set1_host(out.ssl, "127.0.0.1");
  if (SSL_connect(out.ssl) != 1) throw std::runtime_error(openssl_error("SSL_connect"));
  const std::vector<char> chunk(spec.chunk_bytes, 'x');
  pair.start = Clock::now();
  const double cpu_at_start = thread_cpu_s();
  for (uint64_t left = spec.total_bytes; left > 0;) {
    const int size = static_cast<int>(std::min<uint64_t>(chunk.size(), left));
    if (SSL_write(out.ssl, chunk.data(), size) != size) throw std::runtime_error(openssl_error("SSL_write"));
    left -= static_cast<uint64_t>(size);
  }
  pair.sender_cpu_s = thread_cpu_s() - cpu_at_start;
  int window = 0;
  socklen_t length = sizeof window;
  ::getsockopt(out.fd, SOL_SOCKET, SO_SNDBUF, &window, &length);
  pair.window_bytes = window;
  pair.sender_done = true;
  wait_for(pair.receiver_done, pair);
}

}  // namespace

TransferResult openssl_copy(const TransferSpec& spec) {
  if (!spec.tls) return TransferResult{false, "no TLS files"};
  TransferSpec one = spec;
  one.streams = 1;
  return run_pair(one, openssl_receive, openssl_send);
}

}  // namespace multisite_bench

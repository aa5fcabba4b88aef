// The run CA: the files and modes it writes, what OpenSSL makes of its certificates (chain
// verification, SAN, EKU, key match), every refusal, and a mutual-TLS handshake through kj-tls.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <kj/async-io.h>
#include <kj/async.h>
#include <kj/compat/tls.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/certificate_authority.hpp"

using namespace archipelago;
using namespace archipelago::net;

namespace {

// A private temporary directory, removed with its files at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char pattern[] = "/tmp/net-ca-XXXXXX";
    path = ::mkdtemp(pattern);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
  std::string ca() const { return path + "/ca"; }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

mode_t mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

struct X509Free { void operator()(X509* c) const { X509_free(c); } };
struct KeyFree { void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); } };
using Certificate = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// Every certificate of a PEM file, in file order.
std::vector<Certificate> read_certificates(const std::string& path) {
  const std::string text = read_text(path);
  BIO* bio = BIO_new_mem_buf(text.data(), int(text.size()));
  std::vector<Certificate> certificates;
  while (X509* certificate = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) certificates.emplace_back(certificate);
  BIO_free(bio);
  ERR_clear_error();  // the end of the file reads as an error
  return certificates;
}

Key read_key(const std::string& path) {
  const std::string text = read_text(path);
  BIO* bio = BIO_new_mem_buf(text.data(), int(text.size()));
  Key key(PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return key;
}

// X509_verify_cert of `leaf` against a store holding only `ca`, for a TLS client or server purpose.
int verify(X509* leaf, X509* ca, int purpose) {
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, ca);
  X509_STORE_CTX* context = X509_STORE_CTX_new();
  X509_STORE_CTX_init(context, store, leaf, nullptr);
  X509_STORE_CTX_set_purpose(context, purpose);
  const int verdict = X509_verify_cert(context);
  X509_STORE_CTX_free(context);
  X509_STORE_free(store);
  return verdict;
}

// The subjectAltName entries as "DNS:..." / "IP:..." strings, in certificate order.
std::vector<std::string> alt_names(X509* certificate) {
  std::vector<std::string> names;
  auto* entries = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(certificate, NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; entries && i < sk_GENERAL_NAME_num(entries); ++i) {
    const GENERAL_NAME* entry = sk_GENERAL_NAME_value(entries, i);
    if (entry->type == GEN_DNS) {
      names.push_back("DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(entry->d.dNSName)),
                                           std::size_t(ASN1_STRING_length(entry->d.dNSName))));
    } else if (entry->type == GEN_IPADD) {
      char* text = OPENSSL_buf2hexstr(ASN1_STRING_get0_data(entry->d.iPAddress), ASN1_STRING_length(entry->d.iPAddress));
      names.push_back("IP:" + std::string(text));
      OPENSSL_free(text);
    }
  }
  GENERAL_NAMES_free(entries);
  return names;
}

std::string common_name(X509* certificate) {
  char text[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(certificate), NID_commonName, text, sizeof text);
  return text;
}

// Days from now to the certificate's notAfter, rounded down.
int days_left(X509* certificate) {
  int days = 0, seconds = 0;
  ASN1_TIME_diff(&days, &seconds, nullptr, X509_get0_notAfter(certificate));
  return days;
}

}  // namespace

TEST_CASE("init writes a self-signed CA certificate and its PKCS#8 key, mode 0600 from the start") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());

  CHECK(mode_of(dir.ca()) == 0700);
  CHECK(mode_of(dir.ca() + "/ca.key") == 0600);
  CHECK(read_text(dir.ca() + "/ca.key").rfind("-----BEGIN PRIVATE KEY-----", 0) == 0);

  auto certificates = read_certificates(dir.ca() + "/ca.pem");
  REQUIRE(certificates.size() == 1);
  X509* ca = certificates[0].get();
  CHECK(X509_check_ca(ca) == 1);
  CHECK(common_name(ca) == kCaCommonName);
  CHECK(verify(ca, ca, X509_PURPOSE_ANY) == 1);  // self-signed, trusted as itself
  CHECK((X509_get_key_usage(ca) & (KU_KEY_CERT_SIGN | KU_CRL_SIGN)) == (KU_KEY_CERT_SIGN | KU_CRL_SIGN));
  int critical = -1;
  auto* constraints = static_cast<BASIC_CONSTRAINTS*>(X509_get_ext_d2i(ca, NID_basic_constraints, &critical, nullptr));
  REQUIRE(constraints != nullptr);
  CHECK(constraints->ca != 0);
  CHECK(critical == 1);
  BASIC_CONSTRAINTS_free(constraints);
  CHECK(days_left(ca) >= kCaValidityDays - 1);
  CHECK(EVP_PKEY_get_bits(X509_get0_pubkey(ca)) == 256);
  BIGNUM* serial = ASN1_INTEGER_to_BN(X509_get0_serialNumber(ca), nullptr);
  CHECK(BN_num_bits(serial) > 64);  // 128 random bits; fewer than 65 once in 2^64
  BN_free(serial);

  Key key = read_key(dir.ca() + "/ca.key");
  REQUIRE(key);
  CHECK(X509_check_private_key(ca, key.get()) == 1);
}

TEST_CASE("a second init of the same directory is refused and leaves the CA untouched") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());
  const std::string key_before = read_text(dir.ca() + "/ca.key");
  const std::string certificate_before = read_text(dir.ca() + "/ca.pem");

  Status again = init_certificate_authority(dir.ca());
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == ErrorCode::conflict);
  CHECK(again.error().reason.find("never overwritten") != std::string::npos);
  CHECK(read_text(dir.ca() + "/ca.key") == key_before);
  CHECK(read_text(dir.ca() + "/ca.pem") == certificate_before);
}

TEST_CASE("an issued certificate verifies against its CA, names its hosts, and serves both ends of a link") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());
  REQUIRE(issue_certificate(dir.ca(), "node-a", {"127.0.0.1", "node-a.example", "::1", "NODE-A", "127.0.0.1"}).ok());

  CHECK(mode_of(private_key_path(dir.ca(), "node-a")) == 0600);
  auto chain = read_certificates(certificate_path(dir.ca(), "node-a"));
  REQUIRE(chain.size() == 2);  // the leaf, then the CA
  auto ca = read_certificates(dir.ca() + "/ca.pem");
  REQUIRE(ca.size() == 1);
  X509* leaf = chain[0].get();
  CHECK(X509_cmp(chain[1].get(), ca[0].get()) == 0);

  CHECK(verify(leaf, ca[0].get(), X509_PURPOSE_SSL_SERVER) == 1);
  CHECK(verify(leaf, ca[0].get(), X509_PURPOSE_SSL_CLIENT) == 1);
  CHECK(X509_check_ca(leaf) == 0);
  CHECK(common_name(leaf) == "node-a");
  CHECK((X509_get_extended_key_usage(leaf) & (XKU_SSL_SERVER | XKU_SSL_CLIENT)) == (XKU_SSL_SERVER | XKU_SSL_CLIENT));
  // An address is an IP entry and a DNS entry of the same text (kj-tls checks the dialled host as a name).
  CHECK(alt_names(leaf) == std::vector<std::string>{"DNS:node-a", "IP:7F:00:00:01", "DNS:127.0.0.1", "DNS:node-a.example",
                                                    "IP:00:00:00:00:00:00:00:00:00:00:00:00:00:00:00:01", "DNS:::1"});
  CHECK(X509_check_ip_asc(leaf, "127.0.0.1", 0) == 1);
  CHECK(X509_check_host(leaf, "127.0.0.1", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(leaf, "node-a.example", 0, 0, nullptr) == 1);
  CHECK(X509_check_host(leaf, "node-b", 0, 0, nullptr) == 0);
  CHECK(days_left(leaf) >= kDefaultCertificateValidityDays - 1);
  CHECK(days_left(leaf) <= kDefaultCertificateValidityDays);

  TempDir other;
  REQUIRE(init_certificate_authority(other.ca()).ok());
  auto other_ca = read_certificates(other.ca() + "/ca.pem");
  REQUIRE(other_ca.size() == 1);
  CHECK(verify(leaf, other_ca[0].get(), X509_PURPOSE_SSL_CLIENT) != 1);
}

TEST_CASE("the issued key is the key of the issued certificate, and not the CA's") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());
  REQUIRE(issue_certificate(dir.ca(), "coordinator", {}).ok());
  auto chain = read_certificates(certificate_path(dir.ca(), "coordinator"));
  REQUIRE(chain.size() == 2);
  Key key = read_key(private_key_path(dir.ca(), "coordinator"));
  REQUIRE(key);
  CHECK(X509_check_private_key(chain[0].get(), key.get()) == 1);
  CHECK(X509_check_private_key(chain[1].get(), key.get()) != 1);
  ERR_clear_error();
}

TEST_CASE("--days sets the validity, out of range or past the CA's end is refused") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());
  REQUIRE(issue_certificate(dir.ca(), "short", {}, IssueOptions{30}).ok());
  auto chain = read_certificates(certificate_path(dir.ca(), "short"));
  REQUIRE(chain.size() == 2);
  CHECK(days_left(chain[0].get()) >= 29);
  CHECK(days_left(chain[0].get()) <= 30);

  for (int days : {0, -1, kCaValidityDays + 1}) {
    CAPTURE(days);
    Status refused = issue_certificate(dir.ca(), "long", {}, IssueOptions{days});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
    CHECK_FALSE(exists(private_key_path(dir.ca(), "long")));
  }

  // A CA with 10 days left: its certificate re-signed with an earlier end.
  auto ca = read_certificates(dir.ca() + "/ca.pem");
  REQUIRE(ca.size() == 1);
  Key ca_key = read_key(dir.ca() + "/ca.key");
  REQUIRE(X509_time_adj_ex(X509_getm_notAfter(ca[0].get()), 10, 0, nullptr));
  REQUIRE(X509_sign(ca[0].get(), ca_key.get(), EVP_sha256()) > 0);
  FILE* file = std::fopen((dir.ca() + "/ca.pem").c_str(), "w");
  REQUIRE(file);
  PEM_write_X509(file, ca[0].get());
  std::fclose(file);
  Status outlives = issue_certificate(dir.ca(), "long", {}, IssueOptions{30});
  REQUIRE_FALSE(outlives.ok());
  CHECK(outlives.error().code == ErrorCode::invalid_argument);
  CHECK(outlives.error().reason.find("outlive its CA") != std::string::npos);
  CHECK(issue_certificate(dir.ca(), "long", {}, IssueOptions{9}).ok());
}

TEST_CASE("bad names and hosts are refused without being echoed, and write nothing") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());
  const std::string bad_names[] = {"", "a/b", "../x", ".hidden", "-rf", "ca", "two words", "na\xc3\xafve",
                                   "evil\x1b[31m", std::string("nul\0x", 5),
                                   std::string(kMaxCertificateNameBytes + 1, 'n')};
  for (const auto& name : bad_names) {
    CAPTURE(name);
    Status refused = issue_certificate(dir.ca(), name, {});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
    if (!name.empty() && name != kCaName) CHECK(refused.error().reason.find(name) == std::string::npos);
  }
  CHECK(issue_certificate(dir.ca(), std::string(kMaxCertificateNameBytes, 'n'), {}).ok());

  const std::string bad_hosts[] = {"", "a,DNS:evil", "two words", "evil\x1b[31m", "[::1]", std::string("127.0.0.1\0x", 11),
                                   std::string(kMaxHostBytes + 1, 'h')};
  for (const auto& host : bad_hosts) {
    CAPTURE(host);
    Status refused = issue_certificate(dir.ca(), "node", {"127.0.0.1", host});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
    CHECK(refused.error().reason.find("host 2") != std::string::npos);
    if (!host.empty()) CHECK(refused.error().reason.find(host) == std::string::npos);
  }
  CHECK_FALSE(exists(private_key_path(dir.ca(), "node")));
  CHECK_FALSE(exists(certificate_path(dir.ca(), "node")));
}

TEST_CASE("a CA key others may read is refused, a group-readable one is accepted") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());
  const std::string ca_key = dir.ca() + "/ca.key";

  for (mode_t mode : {mode_t(0644), mode_t(0604), mode_t(0602)}) {
    CAPTURE(mode);
    REQUIRE(::chmod(ca_key.c_str(), mode) == 0);
    Status refused = issue_certificate(dir.ca(), "node", {});
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
    CHECK(refused.error().reason.find("accessible by others") != std::string::npos);
    CHECK_FALSE(exists(private_key_path(dir.ca(), "node")));
  }
  REQUIRE(::chmod(ca_key.c_str(), 0640) == 0);
  CHECK(issue_certificate(dir.ca(), "node", {}).ok());
}

TEST_CASE("issuing a name twice is refused and keeps the first key, no CA is not_found") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());
  REQUIRE(issue_certificate(dir.ca(), "node", {}).ok());
  const std::string first_key = read_text(private_key_path(dir.ca(), "node"));
  const std::string first_certificate = read_text(certificate_path(dir.ca(), "node"));

  Status again = issue_certificate(dir.ca(), "node", {"10.0.0.1"});
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().code == ErrorCode::conflict);
  CHECK(read_text(private_key_path(dir.ca(), "node")) == first_key);
  CHECK(read_text(certificate_path(dir.ca(), "node")) == first_certificate);

  Status no_ca = issue_certificate(dir.path + "/nothing-here", "node", {});
  REQUIRE_FALSE(no_ca.ok());
  CHECK(no_ca.error().code == ErrorCode::not_found);
}

TEST_CASE("kj-tls loads the issued files, completes a mutual-TLS handshake with them, and refuses another CA's client") {
  TempDir dir;
  REQUIRE(init_certificate_authority(dir.ca()).ok());
  REQUIRE(issue_certificate(dir.ca(), "coordinator", {"127.0.0.1"}).ok());
  REQUIRE(issue_certificate(dir.ca(), "node-a", {}).ok());
  const std::string ca_text = read_text(dir.ca() + "/ca.pem");
  const std::string server_chain = read_text(certificate_path(dir.ca(), "coordinator"));
  const std::string server_key = read_text(private_key_path(dir.ca(), "coordinator"));
  const std::string client_chain = read_text(certificate_path(dir.ca(), "node-a"));
  const std::string client_key = read_text(private_key_path(dir.ca(), "node-a"));

  CHECK_NOTHROW(kj::TlsCertificate(server_chain.c_str()));
  CHECK_NOTHROW(kj::TlsPrivateKey(server_key.c_str()));

  kj::EventLoop loop;
  kj::WaitScope wait_scope(loop);
  const kj::TlsCertificate trusted[] = {kj::TlsCertificate(ca_text.c_str())};
  const kj::TlsKeypair server_keypair{kj::TlsPrivateKey(server_key.c_str()), kj::TlsCertificate(server_chain.c_str())};
  const kj::TlsKeypair client_keypair{kj::TlsPrivateKey(client_key.c_str()), kj::TlsCertificate(client_chain.c_str())};
  auto options = [&](const kj::TlsKeypair& keypair) {
    kj::TlsContext::Options o;
    o.useSystemTrustStore = false;
    o.verifyClients = true;
    o.trustedCertificates = kj::arrayPtr(trusted, 1);
    o.defaultKeypair = keypair;
    return o;
  };
  kj::TlsContext server(options(server_keypair));
  kj::TlsContext client(options(client_keypair));

  auto pipe = kj::newTwoWayPipe();
  // Both handshakes run at once in this thread's event loop; each side checks the other's chain.
  auto streams = kj::joinPromises(kj::arr(server.wrapServer(kj::mv(pipe.ends[0])),
                                          client.wrapClient(kj::mv(pipe.ends[1]), "coordinator")))
                     .wait(wait_scope);
  REQUIRE(streams.size() == 2);

  const char hello[] = "hello";
  char received[sizeof hello] = {};
  auto write = streams[1]->write(hello, sizeof hello).eagerlyEvaluate(nullptr);
  streams[0]->read(received, sizeof hello).wait(wait_scope);
  write.wait(wait_scope);
  CHECK(std::string(received) == "hello");

  // A client whose certificate another run's CA signed is refused by the server.
  TempDir other;
  REQUIRE(init_certificate_authority(other.ca()).ok());
  REQUIRE(issue_certificate(other.ca(), "node-a", {}).ok());
  const std::string stranger_chain = read_text(certificate_path(other.ca(), "node-a"));
  const std::string stranger_key = read_text(private_key_path(other.ca(), "node-a"));
  const kj::TlsKeypair stranger_keypair{kj::TlsPrivateKey(stranger_key.c_str()),
                                        kj::TlsCertificate(stranger_chain.c_str())};
  kj::TlsContext stranger(options(stranger_keypair));
  auto stranger_pipe = kj::newTwoWayPipe();
  auto refused = server.wrapServer(kj::mv(stranger_pipe.ends[0])).eagerlyEvaluate(nullptr);
  auto stranger_side = stranger.wrapClient(kj::mv(stranger_pipe.ends[1]), "coordinator").eagerlyEvaluate(nullptr);
  CHECK_THROWS(refused.wait(wait_scope));
}

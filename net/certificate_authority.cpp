// Keys, certificates and their files, with OpenSSL's libcrypto. See certificate_authority.hpp for the
// contract.
#include "net/certificate_authority.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <string_view>
#include <utility>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "common/log.hpp"
#include "net/auth.hpp"

namespace archipelago::net {
namespace {

template <class T, void (*Free)(T*)>
struct OpenSslFree {
  void operator()(T* object) const { Free(object); }
};
template <class T, void (*Free)(T*)>
using Owned = std::unique_ptr<T, OpenSslFree<T, Free>>;

using Key = Owned<EVP_PKEY, EVP_PKEY_free>;
using Certificate = Owned<X509, X509_free>;
using Bio = Owned<BIO, BIO_free_all>;
using Extension = Owned<X509_EXTENSION, X509_EXTENSION_free>;
using Bignum = Owned<BIGNUM, BN_free>;
using GeneralName = Owned<GENERAL_NAME, GENERAL_NAME_free>;
using GeneralNames = Owned<GENERAL_NAMES, GENERAL_NAMES_free>;
using Asn1String = Owned<ASN1_STRING, ASN1_STRING_free>;

constexpr std::size_t kMaxPemBytes = 64 * 1024;  // a key or a chain of two certificates is ~2 KiB

// Text that held a private key: wiped when it goes.
struct WipedText {
  std::string text;
  ~WipedText() { OPENSSL_cleanse(text.data(), text.size()); }
};

// `what`, then every entry of this thread's OpenSSL error queue (which this empties).
Error openssl_error(ErrorCode code, const std::string& what) {
  std::string reason = what;
  const char* separator = ": ";
  while (unsigned long entry = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(entry, text, sizeof text);
    reason += separator;
    reason += text;
    separator = "; ";
  }
  return make_error(code, reason);
}

Error system_error(const std::string& what, int err) {
  return make_error(err == ENOENT ? ErrorCode::not_found : ErrorCode::io, what + ": " + std::strerror(err));
}

std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", unsigned(mode & 07777));
  return text;
}

// ---- files ----------------------------------------------------------------------------------------

Status write_and_close(int fd, const std::string& path, std::string_view bytes) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return system_error("cannot write " + path, err);
    }
    written += std::size_t(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return system_error("cannot sync " + path, err);
  }
  if (::close(fd) != 0) return system_error("cannot close " + path, errno);
  return Status::success();
}

// O_EXCL: an existing key (or a link in its place) is never followed or overwritten; 0600 from birth.
Status write_new_private_key(const std::string& path, std::string_view pem) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST)
      return make_error(ErrorCode::conflict, path + " exists; a private key is never overwritten");
    return system_error("cannot create " + path, err);
  }
  Status written = write_and_close(fd, path, pem);
  if (!written.ok()) ::unlink(path.c_str());
  return written;
}

Status write_certificate_file(const std::string& path, std::string_view pem) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return system_error("cannot create " + path, errno);
  return write_and_close(fd, path, pem);
}

// The checks apply to the descriptor read, so the file cannot be swapped between check and read.
Status read_pem_file(const std::string& path, bool private_key, std::string& out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return system_error("cannot open " + path, errno);
  struct FdCloser { int fd; ~FdCloser() { ::close(fd); } } closer{fd};

  struct stat info {};
  if (::fstat(fd, &info) != 0) return system_error("cannot stat " + path, errno);
  if (!S_ISREG(info.st_mode)) return make_error(ErrorCode::invalid_argument, path + " is not a regular file");
  if (private_key) {
    switch (check_token_permissions(info.st_mode)) {
      case PermissionVerdict::refuse_world_readable:
        return make_error(ErrorCode::invalid_argument, path + " is accessible by others (mode " +
                                                           octal_mode(info.st_mode) + "); refusing it: run `chmod 600 " +
                                                           path + "` and consider the CA compromised");
      case PermissionVerdict::warn_group_readable:
        component_logger("ca")->warn("{} is accessible by its group (mode {}); chmod 600 is safer", path,
                                     octal_mode(info.st_mode));
        break;
      case PermissionVerdict::ok: break;
    }
  }

  out.assign(kMaxPemBytes + 1, '\0');
  std::size_t filled = 0;
  while (filled < out.size()) {
    const ssize_t n = ::read(fd, out.data() + filled, out.size() - filled);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return system_error("cannot read " + path, errno);
    if (n == 0) break;
    filled += std::size_t(n);
  }
  if (filled > kMaxPemBytes) return make_error(ErrorCode::oversized, path + " is larger than a PEM file of this CA");
  out.resize(filled);
  return Status::success();
}

// ---- keys and certificates ---------------------------------------------------------------------------

Expected<Key> generate_key() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return openssl_error(ErrorCode::io, "cannot generate an EC P-256 key");
  return key;
}

Expected<std::string> certificate_pem(X509* certificate) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), certificate) != 1)
    return openssl_error(ErrorCode::io, "cannot encode a certificate as PEM");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, std::size_t(size));
}

// PKCS#8, unencrypted: the file's mode is what protects it.
Status private_key_pem(EVP_PKEY* key, WipedText& out) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PKCS8PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1)
    return openssl_error(ErrorCode::io, "cannot encode a private key as PEM");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  out.text.assign(data, std::size_t(size));
  return Status::success();
}

// A certificate with everything but its issuer, extensions and signature: version 3, a random 128-bit
// serial, the validity window, subject CN = `common_name`, the public half of `key`.
Expected<Certificate> new_certificate(EVP_PKEY* key, const std::string& common_name, int validity_days) {
  Certificate certificate(X509_new());
  Bignum serial(BN_new());
  if (!certificate || !serial || X509_set_version(certificate.get(), X509_VERSION_3) != 1)
    return openssl_error(ErrorCode::io, "cannot create a certificate");
  do {
    if (BN_rand(serial.get(), 128, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1)
      return openssl_error(ErrorCode::io, "cannot draw a serial number");
  } while (BN_is_zero(serial.get()));
  X509_NAME* subject = X509_get_subject_name(certificate.get());
  if (!BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(certificate.get())) ||
      !X509_gmtime_adj(X509_getm_notBefore(certificate.get()), -kBackdateSeconds) ||
      !X509_time_adj_ex(X509_getm_notAfter(certificate.get()), validity_days, 0, nullptr) ||
      X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0) != 1 ||
      X509_set_pubkey(certificate.get(), key) != 1)
    return openssl_error(ErrorCode::io, "cannot fill in a certificate");
  return certificate;
}

// One extension in OpenSSL's configuration syntax; `context` names the issuer and the subject.
Status add_extension(X509* certificate, X509V3_CTX* context, int nid, const char* value) {
  Extension extension(X509V3_EXT_nconf_nid(nullptr, context, nid, value));
  if (!extension || X509_add_ext(certificate, extension.get(), -1) != 1)
    return openssl_error(ErrorCode::io, std::string("cannot add the extension ") + OBJ_nid2sn(nid) + " = " + value);
  return Status::success();
}

// Built entry by entry, not through the configuration syntax, so no host text is ever parsed as syntax.
// An address is written twice: as an IP entry, and as a DNS entry of the same text, because kj-tls
// checks the host a client dialled as a DNS name (X509_check_host), even when it is an address.
Status add_subject_alt_names(X509* certificate, const std::vector<std::string>& entries) {
  GeneralNames names(sk_GENERAL_NAME_new_null());
  if (!names) return openssl_error(ErrorCode::io, "cannot create subjectAltName");
  auto push = [&](int type, const void* bytes, int size) -> Status {
    GeneralName name(GENERAL_NAME_new());
    Asn1String value(type == GEN_IPADD ? ASN1_OCTET_STRING_new() : ASN1_IA5STRING_new());
    if (!name || !value) return openssl_error(ErrorCode::io, "cannot create a subjectAltName entry");
    if (ASN1_STRING_set(value.get(), bytes, size) != 1) return openssl_error(ErrorCode::io, "cannot fill a subjectAltName entry");
    GENERAL_NAME_set0_value(name.get(), type, value.release());
    if (sk_GENERAL_NAME_push(names.get(), name.get()) == 0)
      return openssl_error(ErrorCode::io, "cannot add a subjectAltName entry");
    name.release();
    return Status::success();
  };
  for (const std::string& entry : entries) {
    unsigned char address[16];
    int address_bytes = 0;
    if (::inet_pton(AF_INET, entry.c_str(), address) == 1) address_bytes = 4;
    else if (::inet_pton(AF_INET6, entry.c_str(), address) == 1) address_bytes = 16;
    if (address_bytes) {
      if (auto s = push(GEN_IPADD, address, address_bytes); !s) return s;
    }
    if (auto s = push(GEN_DNS, entry.data(), static_cast<int>(entry.size())); !s) return s;
  }
  if (X509_add1_ext_i2d(certificate, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1)
    return openssl_error(ErrorCode::io, "cannot add subjectAltName");
  return Status::success();
}

Status sign(X509* certificate, EVP_PKEY* issuer_key) {
  if (X509_sign(certificate, issuer_key, EVP_sha256()) <= 0)
    return openssl_error(ErrorCode::io, "cannot sign a certificate");
  return Status::success();
}

// The key first: its O_EXCL is what makes a second init or issue lose; a certificate is only written
// for a key that is ours, and the key is removed again when its certificate cannot be written.
Status write_key_and_certificate(const std::string& dir, const std::string& name, EVP_PKEY* key,
                                 const std::string& certificate_text) {
  WipedText key_text;
  if (Status encoded = private_key_pem(key, key_text); !encoded.ok()) return encoded;
  const std::string key_file = private_key_path(dir, name);
  if (Status written = write_new_private_key(key_file, key_text.text); !written.ok()) return written;
  Status written = write_certificate_file(certificate_path(dir, name), certificate_text);
  if (!written.ok()) ::unlink(key_file.c_str());
  return written;
}

struct LoadedCa {
  Certificate certificate;
  Key key;
};

Expected<LoadedCa> load_ca(const std::string& dir) {
  const std::string certificate_file = certificate_path(dir, kCaName);
  const std::string key_file = private_key_path(dir, kCaName);
  WipedText key_text;
  if (Status read = read_pem_file(key_file, true, key_text.text); !read.ok()) return read.error();
  std::string certificate_text;
  if (Status read = read_pem_file(certificate_file, false, certificate_text); !read.ok()) return read.error();

  // No passphrase callback may prompt on a terminal: an encrypted key is simply refused.
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  LoadedCa ca;
  Bio key_bio(BIO_new_mem_buf(key_text.text.data(), int(key_text.text.size())));
  if (key_bio) ca.key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, no_passphrase, nullptr));
  if (!ca.key) return openssl_error(ErrorCode::corrupt, key_file + " holds no unencrypted PEM private key");
  Bio certificate_bio(BIO_new_mem_buf(certificate_text.data(), int(certificate_text.size())));
  if (certificate_bio) ca.certificate.reset(PEM_read_bio_X509(certificate_bio.get(), nullptr, no_passphrase, nullptr));
  if (!ca.certificate) return openssl_error(ErrorCode::corrupt, certificate_file + " holds no PEM certificate");

  if (X509_check_ca(ca.certificate.get()) != 1)
    return make_error(ErrorCode::inconsistent, certificate_file + " is not a CA certificate");
  if (X509_check_private_key(ca.certificate.get(), ca.key.get()) != 1) {
    ERR_clear_error();
    return make_error(ErrorCode::inconsistent, key_file + " is not the key of " + certificate_file);
  }
  if (X509_cmp_current_time(X509_get0_notAfter(ca.certificate.get())) <= 0)
    return make_error(ErrorCode::invalid_argument, certificate_file + " has expired; make a new CA");
  return ca;
}

std::string lowercase(std::string text) {
  for (char& c : text)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return text;
}

std::string join_path(const std::string& dir, const std::string& file) {
  if (!dir.empty() && dir.back() == '/') return dir + file;
  return dir + "/" + file;
}

}  // namespace

std::string certificate_path(const std::string& dir, const std::string& name) { return join_path(dir, name + ".pem"); }
std::string private_key_path(const std::string& dir, const std::string& name) { return join_path(dir, name + ".key"); }

Status check_certificate_name(const std::string& name) {
  const bool valid = !name.empty() && name.size() <= kMaxCertificateNameBytes &&
                     is_letter_or_digit(name.front()) &&
                     std::all_of(name.begin(), name.end(), is_name_byte) && name != kCaName;
  if (valid) return Status::success();
  // The name itself stays out of the reason: it may hold anything, a terminal escape included.
  return make_error(ErrorCode::invalid_argument,
                    "a certificate name is 1.." + std::to_string(kMaxCertificateNameBytes) +
                        " characters of A-Z a-z 0-9 . _ -, starts with a letter or digit, and is not \"" + kCaName +
                        "\"");
}

Expected<std::string> certificate_name(const std::string& path) {
  std::string text;
  if (Status read = read_pem_file(path, false, text); !read.ok()) return read.error();
  pem_password_cb* no_passphrase = [](char*, int, int, void*) { return 0; };
  Bio bio(BIO_new_mem_buf(text.data(), int(text.size())));
  Certificate certificate;
  if (bio) certificate.reset(PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr));
  if (!certificate) return openssl_error(ErrorCode::corrupt, path + " holds no PEM certificate");
  char name[kMaxCertificateNameBytes + 2] = {0};
  const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(certificate.get()), NID_commonName, name, sizeof name);
  if (n <= 0) return make_error(ErrorCode::invalid_argument, path + " names no common name");
  return std::string(name, static_cast<size_t>(n));
}

Status check_certificate_host(const std::string& host) {
  unsigned char address[16];
  const bool whole = host.find('\0') == std::string::npos;  // inet_pton would stop at a NUL
  if (whole && (::inet_pton(AF_INET, host.c_str(), address) == 1 || ::inet_pton(AF_INET6, host.c_str(), address) == 1))
    return Status::success();
  if (!host.empty() && host.size() <= kMaxHostBytes && std::all_of(host.begin(), host.end(), is_name_byte))
    return Status::success();
  return make_error(ErrorCode::invalid_argument,
                    "a host is an IPv4 or IPv6 address or a DNS name of 1.." + std::to_string(kMaxHostBytes) +
                        " characters of A-Z a-z 0-9 . _ -");
}

Status init_certificate_authority(const std::string& dir) {
  if (dir.empty()) return make_error(ErrorCode::invalid_argument, "the CA directory is empty");
  if (::mkdir(dir.c_str(), 0700) != 0) {
    const int err = errno;
    struct stat info {};
    if (err != EEXIST) return system_error("cannot create the CA directory " + dir, err);
    if (::stat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
      return make_error(ErrorCode::invalid_argument, dir + " exists and is not a directory");
  }
  ERR_clear_error();

  Expected<Key> key = generate_key();
  if (!key.ok()) return key.error();
  Expected<Certificate> certificate = new_certificate(key->get(), kCaCommonName, kCaValidityDays);
  if (!certificate.ok()) return certificate.error();
  X509* ca = certificate->get();
  if (X509_set_issuer_name(ca, X509_get_subject_name(ca)) != 1)
    return openssl_error(ErrorCode::io, "cannot set the CA's issuer");
  X509V3_CTX context;
  X509V3_set_ctx(&context, ca, ca, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:TRUE"},
                                   std::pair{NID_key_usage, "critical,keyCertSign,cRLSign"},
                                   std::pair{NID_subject_key_identifier, "hash"}})
    if (Status added = add_extension(ca, &context, nid, value); !added.ok()) return added;
  if (Status signed_ = sign(ca, key->get()); !signed_.ok()) return signed_;

  Expected<std::string> ca_text = certificate_pem(ca);
  if (!ca_text.ok()) return ca_text.error();
  return write_key_and_certificate(dir, kCaName, key->get(), *ca_text);
}

Status issue_certificate(const std::string& dir, const std::string& name, const std::vector<std::string>& hosts,
                         const IssueOptions& options) {
  if (Status checked = check_certificate_name(name); !checked.ok()) return checked;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    if (Status checked = check_certificate_host(hosts[i]); !checked.ok())
      return make_error(ErrorCode::invalid_argument, "host " + std::to_string(i + 1) + ": " + checked.error().reason);
  }
  if (options.validity_days < 1 || options.validity_days > kCaValidityDays)
    return make_error(ErrorCode::invalid_argument,
                      "validity is 1.." + std::to_string(kCaValidityDays) + " days, not " +
                          std::to_string(options.validity_days));
  ERR_clear_error();
  Expected<LoadedCa> ca = load_ca(dir);
  if (!ca.ok()) return ca.error();

  // DNS:NAME first, then the hosts; an entry seen before (DNS case-insensitively) is dropped.
  std::vector<std::string> requested{name};
  requested.insert(requested.end(), hosts.begin(), hosts.end());
  std::vector<std::string> alt_names;
  std::vector<std::string> seen;
  for (const std::string& entry : requested) {
    const std::string key = lowercase(entry);
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
    seen.push_back(key);
    alt_names.push_back(entry);
  }

  Expected<Key> key = generate_key();
  if (!key.ok()) return key.error();
  Expected<Certificate> certificate = new_certificate(key->get(), name, options.validity_days);
  if (!certificate.ok()) return certificate.error();
  X509* leaf = certificate->get();
  X509* issuer = ca->certificate.get();
  if (ASN1_TIME_compare(X509_get0_notAfter(leaf), X509_get0_notAfter(issuer)) > 0)
    return make_error(ErrorCode::invalid_argument, "a certificate valid " + std::to_string(options.validity_days) +
                                                       " days would outlive its CA; ask for fewer days");
  if (X509_set_issuer_name(leaf, X509_get_subject_name(issuer)) != 1)
    return openssl_error(ErrorCode::io, "cannot set the certificate's issuer");
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, leaf, nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
                                   std::pair{NID_key_usage, "critical,digitalSignature"},
                                   std::pair{NID_ext_key_usage, "serverAuth,clientAuth"},
                                   std::pair{NID_subject_key_identifier, "hash"},
                                   std::pair{NID_authority_key_identifier, "keyid:always"}})
    if (Status added = add_extension(leaf, &context, nid, value); !added.ok()) return added;
  if (Status added = add_subject_alt_names(leaf, alt_names); !added.ok()) return added;
  if (Status signed_ = sign(leaf, ca->key.get()); !signed_.ok()) return signed_;

  Expected<std::string> leaf_text = certificate_pem(leaf);
  if (!leaf_text.ok()) return leaf_text.error();
  Expected<std::string> ca_text = certificate_pem(issuer);
  if (!ca_text.ok()) return ca_text.error();
  return write_key_and_certificate(dir, name, key->get(), *leaf_text + *ca_text);
}

}  // namespace archipelago::net

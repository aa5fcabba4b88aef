// A run's own certificate authority for mutual TLS: one CA per run, one certificate per process.
//
// `init_certificate_authority(DIR)` makes DIR/ca.pem (a self-signed EC P-256 CA certificate, 10 years)
// and DIR/ca.key (its PKCS#8 PEM key). `issue_certificate(DIR, NAME, hosts)` signs a fresh EC P-256
// key with that CA and writes DIR/NAME.pem (the leaf, then the CA: a chain file) and DIR/NAME.key.
// The three files of a process go into [net] as tls_certificate = NAME.pem, tls_key = NAME.key and
// tls_ca = ca.pem. A leaf is good for both ends of a link (extendedKeyUsage serverAuth + clientAuth)
// and names NAME and every host it is reached by in its subjectAltName.
//
// Invariants: a private key file is created with mode 0600 by the open() that creates it (O_CREAT |
// O_EXCL, never a chmod afterwards, so no moment exists at which it is readable by others), and an
// existing key file is never overwritten: a second init of the same DIR and a second issue of the
// same NAME are refused with ErrorCode::conflict. A CA key that others may read is refused. When a
// step after the key file fails, the key file just made is removed again. Certificates are public;
// an old one without its key is overwritten. A rejected NAME or host never appears in an error reason.
//
// Thread-safety: the functions touch only the files named above and OpenSSL's thread-safe state;
// call them from any thread. Two processes issuing the same NAME at once: one wins, one is refused.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "net/names.hpp"

namespace archipelago::net {

inline constexpr const char* kCaName = "ca";  // DIR/ca.pem and DIR/ca.key: the CA's own files
inline constexpr const char* kCaCommonName = "archipelago run CA";
inline constexpr int kCaValidityDays = 3650;
inline constexpr int kDefaultCertificateValidityDays = 365;
inline constexpr std::size_t kMaxCertificateNameBytes = kMaxNameBytes;
inline constexpr std::size_t kMaxHostBytes = 253;  // the longest DNS name
// notBefore lies this far in the past, so a site whose clock runs a little behind the issuer's
// accepts a certificate issued a moment ago.
inline constexpr long kBackdateSeconds = 300;

// Creates DIR (mode 0700) when it does not exist (its parent must), then DIR/ca.key and DIR/ca.pem.
// Refused with ErrorCode::conflict when DIR/ca.key exists.
Status init_certificate_authority(const std::string& dir);

struct IssueOptions {
  int validity_days = kDefaultCertificateValidityDays;  // 1..kCaValidityDays, and not past the CA's end
};

// Signs a certificate for NAME with DIR's CA and writes DIR/NAME.key (0600) and DIR/NAME.pem.
// subjectAltName: DNS:NAME, then each host in order (duplicates dropped) as IP:... when it parses
// as an IPv4 or IPv6 address, else DNS:... Refused with invalid_argument on a bad NAME, a bad host or
// a bad validity, and on a CA key readable or writable by others; with conflict when DIR/NAME.key
// exists; with not_found when DIR holds no CA.
Status issue_certificate(const std::string& dir, const std::string& name, const std::vector<std::string>& hosts,
                         const IssueOptions& options = {});

// NAME is 1..kMaxCertificateNameBytes bytes of [A-Za-z0-9._-], starts with a letter or digit (no
// hidden files, nothing that reads as a command-line option) and is not "ca" (the CA's own files).
Status check_certificate_name(const std::string& name);

// The common name of the first certificate in the PEM file at `path` (a node's name under TLS).
Expected<std::string> certificate_name(const std::string& path);

// A host is an IPv4 or IPv6 address, or a DNS name: 1..kMaxHostBytes bytes of [A-Za-z0-9._-].
Status check_certificate_host(const std::string& host);

// The files a call writes, for messages and for tests; NAME kCaName gives the CA's.
std::string certificate_path(const std::string& dir, const std::string& name);  // DIR/NAME.pem
std::string private_key_path(const std::string& dir, const std::string& name);   // DIR/NAME.key

}  // namespace archipelago::net

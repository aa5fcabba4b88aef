#include "remote/proof.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace archipelago::remote {

std::string random_nonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), static_cast<int>(nonce.size())) != 1) {
    throw std::runtime_error("the OS random generator failed");
  }
  return nonce;
}

std::string join_purpose(std::string_view certificate_name) {
  std::string purpose(kJoinPurpose);
  if (!certificate_name.empty()) purpose.append("|").append(certificate_name);
  return purpose;
}

std::string prove(const net::Secret& secret, std::string_view purpose, std::string_view nonce) {
  std::string message;
  message.reserve(purpose.size() + nonce.size());
  message.append(purpose).append(nonce);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.bytes().data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest, &length);
  return std::string(reinterpret_cast<const char*>(digest), length);
}

bool verify_proof(const net::Secret& secret, std::string_view purpose, std::string_view nonce, std::string_view proof) {
  if (nonce.empty()) return false;
  return net::tokens_equal(prove(secret, purpose, nonce), proof);
}

}  // namespace archipelago::remote

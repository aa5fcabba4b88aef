// Proof of a shared secret without sending it: challenge–response over a connection's nonce.
//
// The coordinator hands each connection a fresh random nonce (Gateway.challenge); a node proves the
// join token with HMAC-SHA256(token, purpose || nonce) and the coordinator compares the proof with
// its own in constant time. The token's bytes never cross the wire, so an impostor coordinator
// records only a proof that is useless for any other nonce. `purpose` separates the join proof
// from the admin proof, so one can never be replayed as the other, and under TLS binds the join
// proof to the client certificate of the connection (join_purpose). A plaintext proof can still be
// relayed live, within its nonce's connection, by an impostor that a node dials.
// Pure functions; any thread.
#pragma once

#include <string>
#include <string_view>

#include "net/auth.hpp"

namespace archipelago::remote {

inline constexpr std::string_view kJoinPurpose = "archipelago-join-v1";
inline constexpr std::string_view kAdminPurpose = "archipelago-admin-v1";
inline constexpr std::size_t kNonceBytes = 32;

// kNonceBytes random bytes from the OS.
std::string random_nonce();

// The join proof's purpose on a connection. Under TLS it names the client certificate of that
// connection (channel binding): a node proves "join|<its certificate's name>" and the coordinator
// checks against the name of the certificate it saw, so a proof relayed by an impostor from a
// node's connection to one of its own (another certificate) does not verify. In plaintext
// (`certificate_name` empty) it is kJoinPurpose alone: nothing binds the proof to the channel, and
// an impostor that a node dials can relay it (README, docs/SECURITY.md).
std::string join_purpose(std::string_view certificate_name);

// HMAC-SHA256(secret, purpose || nonce): 32 bytes.
std::string prove(const net::Secret& secret, std::string_view purpose, std::string_view nonce);

// Whether `proof` proves `secret` for `purpose` and `nonce` (constant time; false for an empty nonce).
bool verify_proof(const net::Secret& secret, std::string_view purpose, std::string_view nonce, std::string_view proof);

}  // namespace archipelago::remote

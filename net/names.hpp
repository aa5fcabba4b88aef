// The names a peer gives itself (a node, its site, its device) and the names of a run's certificates
// share one alphabet: ASCII letters, digits, '.', '_' and '-'. A name in it is safe in a log line, a
// terminal, a file name and a Prometheus label, so nothing a peer names itself needs escaping later.
// Pure; any thread.
#pragma once

#include <cstddef>
#include <string>

#include "common/error.hpp"

namespace archipelago::net {

inline constexpr std::size_t kMaxNameBytes = 64;

// [A-Za-z0-9._-], by hand: std::isalnum would follow the process's locale.
bool is_letter_or_digit(char c);
bool is_name_byte(char c);

// A node's or a site's name: 1..kMaxNameBytes bytes of [A-Za-z0-9._-]. invalid_argument names
// `what` and the rule, never the name itself (it may hold anything, a terminal escape included).
Status check_peer_name(const std::string& name, const std::string& what);
// A device: the same, and ':' ("cuda:1").
Status check_device_name(const std::string& name);

// `host` with every byte outside the alphabet replaced by '-', cut to kMaxNameBytes ("-" if empty):
// a default node name from a host name.
std::string to_peer_name(const std::string& host);

}  // namespace archipelago::net

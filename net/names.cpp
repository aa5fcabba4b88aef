#include "net/names.hpp"

#include <algorithm>

namespace archipelago::net {

bool is_letter_or_digit(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
bool is_name_byte(char c) { return is_letter_or_digit(c) || c == '.' || c == '_' || c == '-'; }

namespace {

template <typename Allowed>
Status check(const std::string& name, const std::string& what, Allowed allowed, const char* alphabet) {
  if (!name.empty() && name.size() <= kMaxNameBytes && std::all_of(name.begin(), name.end(), allowed)) return {};
  return make_error(ErrorCode::invalid_argument,
                    what + " must be 1.." + std::to_string(kMaxNameBytes) + " bytes of " + alphabet);
}

}  // namespace

Status check_peer_name(const std::string& name, const std::string& what) {
  return check(name, what, is_name_byte, "A-Z a-z 0-9 . _ -");
}

Status check_device_name(const std::string& name) {
  return check(name, "the device name", [](char c) { return is_name_byte(c) || c == ':'; }, "A-Z a-z 0-9 . _ - :");
}

std::string to_peer_name(const std::string& host) {
  std::string name = host.substr(0, kMaxNameBytes);
  std::replace_if(name.begin(), name.end(), [](char c) { return !is_name_byte(c); }, '-');
  return name.empty() ? "-" : name;
}

}  // namespace archipelago::net

#include "training/tokenizer.hpp"

namespace archipelago::training {

std::vector<uint8_t> encode_bytes(std::string_view text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

std::string decode_bytes(const std::vector<uint8_t>& tokens) {
  return std::string(tokens.begin(), tokens.end());
}

}  // namespace archipelago::training

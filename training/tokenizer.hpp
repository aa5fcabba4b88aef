// Byte-level tokenizer: every byte is one token (vocabulary 256), so any input round-trips exactly,
// UTF-8 or not. Pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace archipelago::training {

constexpr int kByteVocabulary = 256;

std::vector<uint8_t> encode_bytes(std::string_view text);
std::string decode_bytes(const std::vector<uint8_t>& tokens);

}  // namespace archipelago::training

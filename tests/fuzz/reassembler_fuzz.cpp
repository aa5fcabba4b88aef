// libFuzzer target: the input is a stream of decoded-envelope chunks fed to one Reassembler.
// The input is split on the 4-byte marker "CHNK"; each piece is decoded as an Envelope and its
// tensor chunk, if any, is added. Whatever the order, duplicates or lies in the chunks, the
// reassembler must answer with a Status and never write outside its buffer.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <variant>

#include "messages/chunking.hpp"
#include "messages/envelope.hpp"

namespace {

const archipelago::messages::TensorChunk* chunk_of(const archipelago::messages::Message& m) {
  using namespace archipelago::messages;
  if (auto* u = std::get_if<FragmentUpdate>(&m)) return &u->chunk;
  if (auto* g = std::get_if<GlobalFragment>(&m)) return &g->chunk;
  if (auto* p = std::get_if<Persist>(&m)) return &p->chunk;
  return nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace archipelago::messages;
  DecodeLimits limits;
  limits.max_tensor_bytes = 1 << 20;
  limits.max_payload_bytes = 1 << 16;
  Reassembler reassembler(1 << 20, 1 << 16);
  static constexpr uint8_t kMarker[4] = {'C', 'H', 'N', 'K'};
  size_t start = 0;
  while (start <= size) {
    size_t end = start;
    while (end + 4 <= size && std::memcmp(data + end, kMarker, 4) != 0) ++end;
    if (end + 4 > size) end = size;
    auto decoded = decode(data + start, end - start, limits);
    if (decoded.ok()) {
      if (const TensorChunk* chunk = chunk_of(decoded->body)) (void)reassembler.add(*chunk);
    }
    if (reassembler.complete()) {
      auto whole = reassembler.take();
      if (!whole.ok()) __builtin_trap();  // complete() promised a tensor
    }
    start = end + 4;
  }
  (void)reassembler.missing();
  return 0;
}

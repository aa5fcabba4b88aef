// libFuzzer target: arbitrary bytes into the Envelope decoder. It must return (ok or an Error)
// without crashing, leaking, throwing or reading out of bounds; a decoded message must re-encode.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "messages/envelope.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace archipelago::messages;
  DecodeLimits limits;
  limits.max_tensor_bytes = 1 << 20;  // keep claimed sizes small enough for the sanitizers
  auto decoded = decode(data, size, limits);
  if (decoded.ok()) {
    std::vector<uint8_t> again;
    if (!encode(*decoded, again).ok()) std::abort();  // valid input must stay encodable
    if (!decode(again.data(), again.size(), limits).ok()) std::abort();
  }
  return 0;
}

// libFuzzer target: arbitrary bytes into every tensor codec's decoder. A decode either refuses the
// bytes with an Error or yields only finite values; the per-chunk check agrees with it; and what it
// yields encodes again and decodes to finite values (fp32: to the same bits).
//
// Input: byte 0 picks the codec (its raw value mod 8, so unknown codecs are tried too); byte 1 bit 0
// set: bytes 2..5 are the element count (little-endian, any value, so sizes that do not match are
// tried), clear: the count is the largest whose encoding fits the rest, and the rest is cut to it.
// The next byte picks where the payload is cut in two chunks for check_finite_range. Then the payload.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "messages/protocol.hpp"
#include "messages/tensor_codec.hpp"

namespace {

using namespace archipelago::messages;

// The largest element count whose encoding fits in `size` bytes (0 for an unknown codec).
uint64_t count_that_fits(Codec codec, size_t size) {
  uint64_t low = 0, high = uint64_t{2} * size + 1;  // no codec packs more than 2 elements a byte
  while (high - low > 1) {
    const uint64_t mid = low + (high - low) / 2;
    auto bytes = encoded_size(codec, mid);
    (bytes.ok() && *bytes <= size ? low : high) = mid;
  }
  return low;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const Codec codec = static_cast<Codec>(data[0] % 8);
  const bool explicit_count = (data[1] & 1) != 0;
  size_t header = 2;
  uint64_t count = 0;
  if (explicit_count) {
    if (size < 7) return 0;
    uint32_t raw;
    std::memcpy(&raw, data + 2, 4);
    count = raw;
    header = 6;
  }
  const uint8_t cut_byte = data[header++];
  const uint8_t* payload = data + header;
  size_t payload_size = size - header;
  if (!explicit_count) {
    count = count_that_fits(codec, payload_size);
    if (auto fitted = encoded_size(codec, count); fitted.ok()) payload_size = *fitted;
  }

  auto decoded = decode_tensor(codec, payload, payload_size, count);
  const auto expected_size = encoded_size(codec, count);
  const bool well_sized = is_known_codec(static_cast<uint8_t>(codec)) && expected_size.ok() &&
                          *expected_size == payload_size;
  if (!decoded.ok()) {
    if (!well_sized) return 0;  // refused for its size: nothing more to compare
  } else {
    if (!well_sized) std::abort();  // decoded bytes that do not fit codec and count
    for (float x : *decoded) {
      if (!std::isfinite(x)) std::abort();  // the promise under test
    }
  }

  // The same bytes in two chunks, cut at an aligned offset: both pass iff the whole decodes.
  const size_t cut = std::min(payload_size, (cut_byte * kChunkAlignment) % (payload_size + 1)) / kChunkAlignment *
                     kChunkAlignment;
  const bool chunks_ok = check_finite_range(codec, count, 0, payload, cut).ok() &&
                         check_finite_range(codec, count, cut, payload + cut, payload_size - cut).ok();
  if (chunks_ok != decoded.ok()) std::abort();
  if (!decoded.ok()) return 0;

  // What decoded is finite, so it must encode again, and that encoding decode.
  std::vector<uint8_t> again;
  if (!encode_tensor(codec, decoded->data(), decoded->size(), again).ok()) std::abort();
  auto twice = decode_tensor(codec, again.data(), again.size(), count);
  if (!twice.ok()) std::abort();
  for (float x : *twice) {
    if (!std::isfinite(x)) std::abort();
  }
  if (codec == Codec::fp32 && payload_size > 0 && std::memcmp(again.data(), payload, payload_size) != 0) std::abort();
  return 0;
}

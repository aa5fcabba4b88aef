// Tensor codecs. The loops are written for the auto-vectorizer: fixed-size blocks, no branches in
// the element loops, memcpy for type punning (the wire bytes have no alignment guarantee), and
// NaN/Inf detection folded into an integer max over |bits| (finite floats order like their bits).
#include "messages/tensor_codec.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "common/parallel.hpp"
#include "messages/protocol.hpp"

namespace archipelago::messages {
namespace {

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kExponentMask = 0x7f800000u;  // |bits| >= this <=> NaN or Inf
// Adding then subtracting 1.5 * 2^23 rounds a float of magnitude < 2^22 to the nearest integer
// (ties to even) using plain adds, which vectorize where std::nearbyint does not.
constexpr float kRoundMagic = 12582912.0f;

inline uint32_t load_u32(const uint8_t* p) { uint32_t u; std::memcpy(&u, p, 4); return u; }
inline float load_f32(const uint8_t* p) { float f; std::memcpy(&f, p, 4); return f; }
inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// Largest |bits| of `count` floats; >= kExponentMask iff one is NaN/Inf.
uint32_t max_abs_bits(const float* values, size_t count) {
  uint32_t m = 0;
  for (size_t i = 0; i < count; ++i) m = std::max(m, float_bits(values[i]) & kAbsMask);
  return m;
}

// True if any of `count` floats at `bytes` is NaN/Inf. An OR of compares (not a max) so that it
// vectorizes with plain SSE2.
bool any_non_finite(const uint8_t* bytes, size_t count) {
  uint32_t bad = 0;
  for (size_t i = 0; i < count; ++i) bad |= (load_u32(bytes + 4 * i) & kExponentMask) == kExponentMask;
  return bad != 0;
}

// Copies fp32 bytes and checks them in cache-sized blocks: libc memcpy keeps its speed and the
// check reads the block back from L2 instead of making a second trip to memory.
constexpr size_t kCheckBlockElements = 16384;  // 64 KiB
bool copy_fp32_checked(const uint8_t* src, size_t count, uint8_t* dst) {
  for (size_t start = 0; start < count; start += kCheckBlockElements) {
    const size_t len = std::min(kCheckBlockElements, count - start);
    std::memcpy(dst + 4 * start, src + 4 * start, 4 * len);
    if (any_non_finite(dst + 4 * start, len)) return false;
  }
  return true;
}

Error non_finite_input() { return make_error(ErrorCode::non_finite, "tensor to encode holds NaN/Inf"); }
Error non_finite_bytes() { return make_error(ErrorCode::non_finite, "encoded tensor holds NaN/Inf"); }

// ---- scale bounds of the quantized codecs ----

// The largest |code| the wire format can hold, whatever the encoder writes: int8 codes are
// -128..127, two's complement nibbles -8..7, E2M1 magnitudes up to 6.
float largest_code(Codec codec) {
  switch (codec) {
    case Codec::int8: return 128.0f;
    case Codec::int4_e2m1: return 6.0f;
    case Codec::int4_uniform: return 8.0f;
    default: return 0.0f;
  }
}

// The largest scale s for which largest_code · s, in fp32 as decode computes it, is finite. Every
// smaller code times s is then finite too (rounding is monotonic).
float largest_scale_of(float code) {
  float s = std::numeric_limits<float>::max() / code;
  while (!std::isfinite(s * code)) s = std::nextafter(s, 0.0f);
  return s;
}
float largest_scale(Codec codec) {
  static const float int8 = largest_scale_of(largest_code(Codec::int8));
  static const float e2m1 = largest_scale_of(largest_code(Codec::int4_e2m1));
  static const float uniform4 = largest_scale_of(largest_code(Codec::int4_uniform));
  switch (codec) {
    case Codec::int8: return int8;
    case Codec::int4_e2m1: return e2m1;
    case Codec::int4_uniform: return uniform4;
    default: return 0.0f;
  }
}

// Largest raw bit pattern of `count` scales at `bytes`. A scale is valid iff its bits are at most
// those of largest_scale: positive floats order like their bits, and NaN, Inf and every negative
// value (sign bit set) compare above.
uint32_t max_raw_bits(const uint8_t* bytes, size_t count) {
  uint32_t m = 0;
  for (size_t i = 0; i < count; ++i) m = std::max(m, load_u32(bytes + 4 * i));
  return m;
}

std::string float_text(float f) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(f));
  return text;
}

// Checks the scales of blocks [first_block, first_block + count) stored at `bytes`, which came in
// the chunk at byte 4·first_block (`in_chunk`) or are a whole tensor's. The error names the codec,
// the chunk, the first bad block and why.
Status check_scales(Codec codec, const uint8_t* bytes, size_t count, uint64_t first_block, bool in_chunk) {
  const float bound = largest_scale(codec);
  if (max_raw_bits(bytes, count) <= float_bits(bound)) return Status::success();
  size_t i = 0;
  while (load_u32(bytes + 4 * i) <= float_bits(bound)) ++i;
  const float scale = load_f32(bytes + 4 * i);
  const uint64_t block = first_block + i;
  std::string reason = std::string(codec_name(codec)) + " tensor" +
                       (in_chunk ? " (chunk at byte " + std::to_string(4 * first_block) + ")" : std::string()) +
                       ": the scale of block " + std::to_string(block) + " (byte " + std::to_string(4 * block) +
                       ") is " + float_text(scale);
  if (!std::isnan(scale) && std::signbit(scale)) {
    return make_error(ErrorCode::inconsistent, reason + ": no encoder writes a negative scale");
  }
  return make_error(ErrorCode::non_finite, reason + ": decoding would give NaN/Inf (a scale must be at most " +
                                               float_text(bound) + ", so that the largest code, " +
                                               float_text(largest_code(codec)) + ", times it stays finite)");
}

// Scale for a block whose largest magnitude is `absmax`, mapping it to `levels`. A zero (or
// denormal, whose inverse would overflow) block gets scale 0 and decodes to zeros. A block whose
// absmax/levels would exceed `largest` (magnitudes near FLT_MAX) gets `largest` and `saturate`: its
// codes are clamped at ±levels, so encode never writes a scale that decode refuses. The clamp has a
// loop of its own: in the loop every other block takes it would stop the vectorizer.
struct BlockScale { float scale; float inverse; bool saturate; };
BlockScale block_scale(float absmax, float levels, float largest) {
  const float inverse = levels / absmax;
  if (!(absmax > 0.0f) || !(inverse < std::numeric_limits<float>::max())) return {0.0f, 0.0f, false};
  const float scale = absmax / levels;
  if (scale <= largest) return {scale, inverse, false};
  return {largest, 1.0f / largest, true};
}

// ---- fp32 / bf16 ----


void encode_bf16(const float* values, size_t count, uint8_t* out) {
  for (size_t i = 0; i < count; ++i) {
    const uint32_t u = float_bits(values[i]);
    uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    // Rounding the largest finite floats up would give Inf: saturate to the largest bf16 instead.
    r = ((r & 0x7f80u) == 0x7f80u) ? ((r & 0x8000u) | 0x7f7fu) : r;
    const uint16_t h = static_cast<uint16_t>(r);
    std::memcpy(out + 2 * i, &h, 2);
  }
}


uint32_t max_abs_bf16(const uint8_t* bytes, size_t count) {
  uint32_t m = 0;
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    m = std::max(m, static_cast<uint32_t>(h & 0x7fffu));
  }
  return m;
}

bool decode_bf16(const uint8_t* bytes, size_t count, float* out) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    out[i] = bits_float(static_cast<uint32_t>(h) << 16);
  }
  return !any_non_finite(reinterpret_cast<const uint8_t*>(out), count);
}

// ---- int8: per-block absmax scale, symmetric [-127, 127] ----

template <bool kSaturate>
void quantize_int8(const float* v, size_t len, float inverse, int8_t* q) {
  for (size_t i = 0; i < len; ++i) {
    const float x = kSaturate ? std::min(std::max(v[i] * inverse, -127.0f), 127.0f) : v[i] * inverse;
    const float r = (x + kRoundMagic) - kRoundMagic;
    q[i] = static_cast<int8_t>(static_cast<int32_t>(r));
  }
}

bool encode_int8(const float* values, size_t count, uint8_t* out) {
  const size_t blocks = ceil_div(count, kInt8BlockSize);
  int8_t* codes = reinterpret_cast<int8_t*>(out + 4 * blocks);
  const float largest = largest_scale(Codec::int8);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t start = b * kInt8BlockSize;
    const size_t len = std::min(kInt8BlockSize, count - start);
    const uint32_t absmax_bits = max_abs_bits(values + start, len);
    if (absmax_bits >= kExponentMask) return false;
    const BlockScale s = block_scale(bits_float(absmax_bits), 127.0f, largest);
    std::memcpy(out + 4 * b, &s.scale, 4);
    if (s.saturate) quantize_int8<true>(values + start, len, s.inverse, codes + start);
    else quantize_int8<false>(values + start, len, s.inverse, codes + start);
  }
  return true;
}

void decode_int8(const uint8_t* bytes, size_t count, float* out) {
  const size_t blocks = ceil_div(count, kInt8BlockSize);
  const int8_t* codes = reinterpret_cast<const int8_t*>(bytes + 4 * blocks);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t start = b * kInt8BlockSize;
    const size_t len = std::min(kInt8BlockSize, count - start);
    const float scale = load_f32(bytes + 4 * b);
    for (size_t i = 0; i < len; ++i) out[start + i] = static_cast<float>(codes[start + i]) * scale;
  }
}

// ---- 4-bit: per-block scale, nibble codes ----

// E2M1 magnitudes for codes 0..7 (sign in bit 3); the largest, 6, is mapped to the block absmax.
constexpr std::array<float, 8> kE2m1Levels = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Nibble -> value tables for both 4-bit flavours, one entry per byte giving both elements, so that
// decode is one lookup per two elements.
struct PairTable { std::array<std::array<float, 2>, 256> pairs; };
PairTable make_pair_table(bool e2m1) {
  std::array<float, 16> nibble{};
  for (int n = 0; n < 16; ++n) {
    nibble[n] = e2m1 ? (n & 8 ? -kE2m1Levels[n & 7] : kE2m1Levels[n & 7])
                     : static_cast<float>((n ^ 8) - 8);  // two's complement nibble
  }
  PairTable t;
  for (int b = 0; b < 256; ++b) t.pairs[b] = {nibble[b & 15], nibble[b >> 4]};
  return t;
}
const PairTable kE2m1Pairs = make_pair_table(true);
const PairTable kUniformPairs = make_pair_table(false);

void quantize_e2m1(const float* v, size_t len, float inverse, uint8_t* nibbles) {
  for (size_t i = 0; i < len; ++i) {
    const float a = std::fabs(v[i]) * inverse;
    // Index of the nearest level: count the midpoints between levels that `a` lies above.
    const int idx = (a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) +
                    (a > 3.5f) + (a > 5.0f);
    nibbles[i] = static_cast<uint8_t>(idx | ((float_bits(v[i]) >> 28) & 8u));
  }
}

template <bool kSaturate>
void quantize_uniform4(const float* v, size_t len, float inverse, uint8_t* nibbles) {
  for (size_t i = 0; i < len; ++i) {
    const float x = kSaturate ? std::min(std::max(v[i] * inverse, -7.0f), 7.0f) : v[i] * inverse;
    const float r = (x + kRoundMagic) - kRoundMagic;
    nibbles[i] = static_cast<uint8_t>(static_cast<int32_t>(r) & 15);
  }
}

bool encode_int4(bool e2m1, const float* values, size_t count, uint8_t* out) {
  const size_t blocks = ceil_div(count, kInt4BlockSize);
  uint8_t* packed = out + 4 * blocks;
  const float levels = e2m1 ? 6.0f : 7.0f;
  const float largest = largest_scale(e2m1 ? Codec::int4_e2m1 : Codec::int4_uniform);
  for (size_t b = 0; b < blocks; ++b) {
    const size_t start = b * kInt4BlockSize;
    const size_t len = std::min(kInt4BlockSize, count - start);
    const uint32_t absmax_bits = max_abs_bits(values + start, len);
    if (absmax_bits >= kExponentMask) return false;
    const BlockScale s = block_scale(bits_float(absmax_bits), levels, largest);
    std::memcpy(out + 4 * b, &s.scale, 4);
    std::array<uint8_t, kInt4BlockSize> nibbles{};  // zero pad: an odd tail packs a 0 high nibble
    if (e2m1) quantize_e2m1(values + start, len, s.inverse, nibbles.data());
    else if (s.saturate) quantize_uniform4<true>(values + start, len, s.inverse, nibbles.data());
    else quantize_uniform4<false>(values + start, len, s.inverse, nibbles.data());
    uint8_t* dst = packed + start / 2;  // block size is even, so blocks start on a byte
    for (size_t j = 0; j < (len + 1) / 2; ++j) {
      dst[j] = static_cast<uint8_t>(nibbles[2 * j] | (nibbles[2 * j + 1] << 4));
    }
  }
  return true;
}

void decode_int4(bool e2m1, const uint8_t* bytes, size_t count, float* out) {
  const PairTable& table = e2m1 ? kE2m1Pairs : kUniformPairs;
  const size_t blocks = ceil_div(count, kInt4BlockSize);
  const uint8_t* packed = bytes + 4 * blocks;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t start = b * kInt4BlockSize;
    const size_t len = std::min(kInt4BlockSize, count - start);
    const float scale = load_f32(bytes + 4 * b);
    const uint8_t* src = packed + start / 2;
    float* dst = out + start;
    for (size_t j = 0; j < len / 2; ++j) {
      const auto& pair = table.pairs[src[j]];
      dst[2 * j] = pair[0] * scale;
      dst[2 * j + 1] = pair[1] * scale;
    }
    if (len % 2) dst[len - 1] = table.pairs[src[len / 2]][0] * scale;
  }
}

uint64_t scale_count(Codec codec, uint64_t element_count) {
  switch (codec) {
    case Codec::int8: return ceil_div(element_count, kInt8BlockSize);
    case Codec::int4_e2m1:
    case Codec::int4_uniform: return ceil_div(element_count, kInt4BlockSize);
    default: return 0;
  }
}

}  // namespace

bool is_known_codec(uint32_t raw) { return raw <= static_cast<uint32_t>(Codec::int4_uniform); }

const char* codec_name(Codec codec) {
  switch (codec) {
    case Codec::fp32: return "fp32";
    case Codec::bf16: return "bf16";
    case Codec::int8: return "int8";
    case Codec::int4_e2m1: return "int4_e2m1";
    case Codec::int4_uniform: return "int4_uniform";
  }
  return "unknown";
}

Expected<Codec> parse_codec(std::string_view name) {
  if (name == "int4") return kInt4;
  for (uint32_t raw = 0; is_known_codec(raw); ++raw) {
    if (name == codec_name(static_cast<Codec>(raw))) return static_cast<Codec>(raw);
  }
  return make_error(ErrorCode::invalid_argument, "unknown codec '" + std::string(name) + "'");
}

Expected<uint64_t> encoded_size(Codec codec, uint64_t element_count) {
  // 2^60 elements is far beyond any tensor and keeps every product below in range.
  if (element_count > (uint64_t{1} << 60)) {
    return make_error(ErrorCode::oversized, "element count " + std::to_string(element_count));
  }
  switch (codec) {
    case Codec::fp32: return element_count * 4;
    case Codec::bf16: return element_count * 2;
    case Codec::int8: return scale_count(codec, element_count) * 4 + element_count;
    case Codec::int4_e2m1:
    case Codec::int4_uniform:
      return scale_count(codec, element_count) * 4 + ceil_div(element_count, 2);
  }
  return make_error(ErrorCode::unknown_type, "unknown codec");
}

Status encode_tensor(Codec codec, const float* values, size_t count, std::vector<uint8_t>& out) {
  auto size = encoded_size(codec, count);
  if (!size) return size.error();
  out.resize(*size);
  switch (codec) {
    case Codec::fp32:
      return copy_fp32_checked(reinterpret_cast<const uint8_t*>(values), count, out.data())
                 ? Status::success()
                 : non_finite_input();
    case Codec::bf16:
      if (any_non_finite(reinterpret_cast<const uint8_t*>(values), count)) return non_finite_input();
      encode_bf16(values, count, out.data());
      return Status::success();
    case Codec::int8:
      return encode_int8(values, count, out.data()) ? Status::success() : non_finite_input();
    case Codec::int4_e2m1:
    case Codec::int4_uniform:
      return encode_int4(codec == Codec::int4_e2m1, values, count, out.data()) ? Status::success()
                                                                            : non_finite_input();
  }
  return make_error(ErrorCode::unknown_type, "unknown codec");
}

namespace {

// inconsistent unless `size` is what `count` elements of `codec` take.
Status check_encoded_size(Codec codec, size_t size, size_t count) {
  auto expected = encoded_size(codec, count);
  if (!expected) return expected.error();
  if (*expected == size) return Status::success();
  return make_error(ErrorCode::inconsistent, std::string(codec_name(codec)) + " tensor of " + std::to_string(count) +
                                                 " elements needs " + std::to_string(*expected) + " bytes, got " +
                                                 std::to_string(size));
}

// decode_tensor's checks of a quantized tensor: its size, then every scale.
Status decode_tensor_checks(Codec codec, const uint8_t* bytes, size_t size, size_t count) {
  if (Status sized = check_encoded_size(codec, size, count); !sized) return sized;
  // Codes are bounded, so the output is finite iff every scale is within the codec's bound.
  return check_scales(codec, bytes, scale_count(codec, count), 0, false);
}

}  // namespace

Status decode_tensor(Codec codec, const uint8_t* bytes, size_t size, float* out, size_t count) {
  if (Status sized = check_encoded_size(codec, size, count); !sized) return sized;
  switch (codec) {
    case Codec::fp32:
      return copy_fp32_checked(bytes, count, reinterpret_cast<uint8_t*>(out)) ? Status::success()
                                                                              : non_finite_bytes();
    case Codec::bf16:
      return decode_bf16(bytes, count, out) ? Status::success() : non_finite_bytes();
    case Codec::int8:
    case Codec::int4_e2m1:
    case Codec::int4_uniform: {
      // Codes are bounded, so the output is finite iff every scale is within the codec's bound.
      Status scales = check_scales(codec, bytes, scale_count(codec, count), 0, false);
      if (!scales) return scales;
      if (codec == Codec::int8) decode_int8(bytes, count, out);
      else decode_int4(codec == Codec::int4_e2m1, bytes, count, out);
      return Status::success();
    }
  }
  return make_error(ErrorCode::unknown_type, "unknown codec");
}

Expected<std::vector<float>> decode_tensor(Codec codec, const uint8_t* bytes, size_t size,
                                           size_t count) {
  auto expected = encoded_size(codec, count);
  if (!expected) return expected.error();
  if (*expected != size) {
    Status status = decode_tensor(codec, bytes, size, nullptr, count);  // builds the reason
    return status.error();
  }
  std::vector<float> out(count);
  Status status = decode_tensor(codec, bytes, size, out.data(), count);
  if (!status) return status.error();
  return out;
}

bool is_quantized(Codec codec) {
  return codec == Codec::int8 || codec == Codec::int4_e2m1 || codec == Codec::int4_uniform;
}

namespace {

// The size and scale checks of decode_tensor for a quantized codec.
Status check_quantized(Codec codec, const uint8_t* bytes, size_t size, size_t count) {
  if (!is_quantized(codec)) return make_error(ErrorCode::invalid_argument, "not a quantized codec");
  return decode_tensor_checks(codec, bytes, size, count);
}

// Squares of both elements of a 4-bit pair byte, summed: one lookup per two elements.
struct PairSquares { std::array<float, 256> sum; std::array<float, 256> low; };
PairSquares make_pair_squares(const PairTable& t) {
  PairSquares s;
  for (int b = 0; b < 256; ++b) {
    s.sum[b] = t.pairs[b][0] * t.pairs[b][0] + t.pairs[b][1] * t.pairs[b][1];
    s.low[b] = t.pairs[b][0] * t.pairs[b][0];  // an odd tail's last byte: its high nibble is padding
  }
  return s;
}
const PairSquares kE2m1Squares = make_pair_squares(kE2m1Pairs);
const PairSquares kUniformSquares = make_pair_squares(kUniformPairs);

}  // namespace

Expected<double> quantized_norm(Codec codec, const uint8_t* bytes, size_t size, size_t count) {
  if (Status ok = check_quantized(codec, bytes, size, count); !ok) return ok.error();
  double squared = 0;
  if (codec == Codec::int8) {
    const size_t blocks = ceil_div(count, kInt8BlockSize);
    const int8_t* codes = reinterpret_cast<const int8_t*>(bytes + 4 * blocks);
    for (size_t b = 0; b < blocks; ++b) {
      const size_t start = b * kInt8BlockSize, len = std::min(kInt8BlockSize, count - start);
      int64_t codes_squared = 0;
      for (size_t i = 0; i < len; ++i) codes_squared += int64_t{codes[start + i]} * codes[start + i];
      const double scale = load_f32(bytes + 4 * b);
      squared += scale * scale * static_cast<double>(codes_squared);
    }
    return std::sqrt(squared);
  }
  const PairSquares& table = codec == Codec::int4_e2m1 ? kE2m1Squares : kUniformSquares;
  const size_t blocks = ceil_div(count, kInt4BlockSize);
  const uint8_t* packed = bytes + 4 * blocks;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t start = b * kInt4BlockSize, len = std::min(kInt4BlockSize, count - start);
    const uint8_t* src = packed + start / 2;
    float codes_squared = 0;  // at most 64 × 64: exact in fp32
    for (size_t j = 0; j < len / 2; ++j) codes_squared += table.sum[src[j]];
    if (len % 2) codes_squared += table.low[src[len / 2]];
    const double scale = load_f32(bytes + 4 * b);
    squared += scale * scale * static_cast<double>(codes_squared);
  }
  return std::sqrt(squared);
}

Status accumulate_quantized(Codec codec, const uint8_t* bytes, size_t size, size_t count, float factor, float* sum,
                            int threads) {
  if (Status ok = check_quantized(codec, bytes, size, count); !ok) return ok;
  const size_t block = codec == Codec::int8 ? kInt8BlockSize : kInt4BlockSize;
  const auto blocks = static_cast<int64_t>(ceil_div(count, block));
  const PairTable& table = codec == Codec::int4_e2m1 ? kE2m1Pairs : kUniformPairs;
  parallel_ranges(blocks, pass_threads(static_cast<int64_t>(count), threads), [&](int64_t first, int64_t end, int) {
    for (auto b = static_cast<size_t>(first); b < static_cast<size_t>(end); ++b) {
      const size_t start = b * block, len = std::min(block, count - start);
      const float f = factor * load_f32(bytes + 4 * b);
      float* dst = sum + start;
      if (codec == Codec::int8) {
        const int8_t* codes = reinterpret_cast<const int8_t*>(bytes + 4 * static_cast<size_t>(blocks)) + start;
        for (size_t i = 0; i < len; ++i) dst[i] += f * static_cast<float>(codes[i]);
        continue;
      }
      const uint8_t* src = bytes + 4 * static_cast<size_t>(blocks) + start / 2;
      for (size_t j = 0; j < len / 2; ++j) {
        const auto& pair = table.pairs[src[j]];
        dst[2 * j] += f * pair[0];
        dst[2 * j + 1] += f * pair[1];
      }
      if (len % 2) dst[len - 1] += f * table.pairs[src[len / 2]][0];
    }
  });
  return Status::success();
}

Status check_finite_range(Codec codec, uint64_t element_count, uint64_t offset,
                          const uint8_t* bytes, size_t size) {
  if (offset % kChunkAlignment != 0) {
    return make_error(ErrorCode::invalid_argument, "chunk offset not aligned");
  }
  switch (codec) {
    case Codec::fp32:
      return any_non_finite(bytes, size / 4) ? non_finite_bytes() : Status::success();
    case Codec::bf16:
      return max_abs_bf16(bytes, size / 2) < 0x7f80u ? Status::success() : non_finite_bytes();
    case Codec::int8:
    case Codec::int4_e2m1:
    case Codec::int4_uniform: {
      const uint64_t scale_end = scale_count(codec, element_count) * 4;
      if (offset >= scale_end) return Status::success();
      const uint64_t end = std::min<uint64_t>(scale_end, offset + size);
      return check_scales(codec, bytes, (end - offset) / 4, offset / 4, true);
    }
  }
  return make_error(ErrorCode::unknown_type, "unknown codec");
}

}  // namespace archipelago::messages

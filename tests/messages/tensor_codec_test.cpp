// Tensor codecs: exactness of fp32, error bounds of the lossy codecs, layouts at awkward sizes,
// and NaN/Inf refusal on both sides.
#include "messages/tensor_codec.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <doctest/doctest.h>

#include "tests/messages/test_data.hpp"

namespace archipelago::messages {
namespace {

constexpr Codec kAllCodecs[] = {Codec::fp32, Codec::bf16, Codec::int8, Codec::int4_e2m1,
                                Codec::int4_uniform};

std::vector<float> round_trip(Codec codec, const std::vector<float>& values) {
  std::vector<uint8_t> bytes;
  REQUIRE(encode_tensor(codec, values.data(), values.size(), bytes).ok());
  REQUIRE(bytes.size() == *encoded_size(codec, values.size()));
  auto decoded = decode_tensor(codec, bytes.data(), bytes.size(), values.size());
  REQUIRE(decoded.ok());
  return *decoded;
}

TEST_CASE("fp32 is lossless and bf16 keeps 8 bits of mantissa") {
  const auto values = test::gaussian(10001, 1);
  CHECK(round_trip(Codec::fp32, values) == values);
  CHECK(test::relative_l2(values, round_trip(Codec::bf16, values)) < 0.0025);
}

TEST_CASE("relative L2 error of each codec stays within its bound") {
  struct Row { Codec codec; double gaussian_bound; double heavy_tailed_bound; };
  // Bounds are ~20% above the errors measured with these seeds (see bench/messages/README.md).
  const Row rows[] = {
      {Codec::bf16, 0.0025, 0.0025},
      {Codec::int8, 0.0085, 0.015},
      {Codec::int4_e2m1, 0.125, 0.062},
      {Codec::int4_uniform, 0.13, 0.072},
  };
  const auto gaussian = test::gaussian(1 << 16, 2);
  const auto heavy = test::heavy_tailed(1 << 16, 3);
  for (const Row& row : rows) {
    const std::string name = codec_name(row.codec);
    CAPTURE(name);
    const double g = test::relative_l2(gaussian, round_trip(row.codec, gaussian));
    const double h = test::relative_l2(heavy, round_trip(row.codec, heavy));
    MESSAGE(std::string(codec_name(row.codec)), " gaussian ", g, " heavy-tailed ", h);
    CHECK(g < row.gaussian_bound);
    CHECK(h < row.heavy_tailed_bound);
  }
}

TEST_CASE("\"int4\" names the default 4-bit codec") {
  CHECK(*parse_codec("int4") == kInt4);
  CHECK(encoded_size(kInt4, 1 << 16).value() == encoded_size(Codec::int4_e2m1, 1 << 16).value());
}

TEST_CASE("awkward sizes round trip: empty, odd, partial last block") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{63}, size_t{65}, size_t{255},
                   size_t{257}, size_t{1001}}) {
    const auto values = test::gaussian(n, 6);
    for (Codec codec : kAllCodecs) {
      CAPTURE(n);
      const std::string name = codec_name(codec);
      CAPTURE(name);
      const auto decoded = round_trip(codec, values);
      REQUIRE(decoded.size() == n);
      if (n > 0) CHECK(test::relative_l2(values, decoded) < 0.2);
    }
  }
}

TEST_CASE("all-zero and tiny blocks decode to finite values") {
  std::vector<float> values(300, 0.0f);
  values[299] = std::numeric_limits<float>::denorm_min();
  for (Codec codec : kAllCodecs) {
    for (float x : round_trip(codec, values)) CHECK(std::isfinite(x));
  }
}

TEST_CASE("encode refuses NaN and Inf in the input") {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    auto values = test::gaussian(700, 7);
    values[513] = bad;
    for (Codec codec : kAllCodecs) {
      std::vector<uint8_t> bytes;
      Status status = encode_tensor(codec, values.data(), values.size(), bytes);
      REQUIRE_FALSE(status.ok());
      CHECK(status.error().code == ErrorCode::non_finite);
    }
  }
}

TEST_CASE("decode reports NaN/Inf hidden in values or scales as non_finite") {
  const auto values = test::gaussian(600, 8);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Codec codec : kAllCodecs) {
    const std::string name = codec_name(codec);
      CAPTURE(name);
    std::vector<uint8_t> bytes;
    REQUIRE(encode_tensor(codec, values.data(), values.size(), bytes).ok());
    if (codec == Codec::bf16) {
      const uint16_t inf_bf16 = 0x7f80;
      std::memcpy(bytes.data() + 2 * 5, &inf_bf16, 2);
    } else {
      std::memcpy(bytes.data() + 4, &nan, 4);  // fp32: element 1; others: scale of block 1
    }
    auto decoded = decode_tensor(codec, bytes.data(), bytes.size(), values.size());
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.error().code == ErrorCode::non_finite);
    CHECK(check_finite_range(codec, values.size(), 0, bytes.data(), bytes.size()).error().code ==
          ErrorCode::non_finite);
  }
}

constexpr Codec kScaledCodecs[] = {Codec::int8, Codec::int4_e2m1, Codec::int4_uniform};

TEST_CASE("a finite but huge scale is refused on decode, naming the codec, the chunk and the block") {
  const auto values = test::gaussian(600, 11);
  for (Codec codec : kScaledCodecs) {
    const std::string name = codec_name(codec);
    CAPTURE(name);
    std::vector<uint8_t> bytes;
    REQUIRE(encode_tensor(codec, values.data(), values.size(), bytes).ok());
    // Every code is 127 (int8) or nibble 7 (4-bit) and the scale of block 1 is 3e38: 7 · 3e38 = Inf.
    const size_t scales = 4 * (codec == Codec::int8 ? 3 : 10);
    std::memset(bytes.data() + scales, codec == Codec::int8 ? 0x7f : 0x77, bytes.size() - scales);
    const float huge = 3e38f;
    std::memcpy(bytes.data() + 4, &huge, 4);
    auto decoded = decode_tensor(codec, bytes.data(), bytes.size(), values.size());
    REQUIRE_FALSE(decoded.ok());
    CHECK(decoded.error().code == ErrorCode::non_finite);
    CHECK(decoded.error().reason.find(name) != std::string::npos);
    CHECK(decoded.error().reason.find("block 1") != std::string::npos);
    // The same rule on the chunk that carries the scales, before the tensor is reassembled.
    Status chunk = check_finite_range(codec, values.size(), 0, bytes.data(), 8);
    REQUIRE_FALSE(chunk.ok());
    CHECK(chunk.error().code == ErrorCode::non_finite);
    CHECK(chunk.error().reason.find("chunk at byte 0") != std::string::npos);
    CHECK(check_finite_range(codec, values.size(), 8, bytes.data() + 8, bytes.size() - 8).ok());
    // A negative scale decodes to finite values, but no encoder writes one.
    const float negative = -1.0f;
    std::memcpy(bytes.data() + 4, &negative, 4);
    auto flipped = decode_tensor(codec, bytes.data(), bytes.size(), values.size());
    REQUIRE_FALSE(flipped.ok());
    CHECK(flipped.error().code == ErrorCode::inconsistent);
  }
}

TEST_CASE("the bound on scales is exact: the largest code times the largest accepted scale is finite") {
  for (Codec codec : kScaledCodecs) {
    const std::string name = codec_name(codec);
    CAPTURE(name);
    const size_t n = 256;
    std::vector<uint8_t> bytes(*encoded_size(codec, n));
    const size_t scales = 4 * (codec == Codec::int8 ? 1 : 4);
    // int8 -128, E2M1 -6 (nibble 0xf), two's complement -8 (nibble 0x8): the largest magnitudes.
    const uint8_t code = codec == Codec::int8 ? 0x80 : codec == Codec::int4_e2m1 ? 0xff : 0x88;
    const float largest_code = codec == Codec::int8 ? 128.0f : codec == Codec::int4_e2m1 ? 6.0f : 8.0f;
    std::memset(bytes.data() + scales, code, bytes.size() - scales);
    auto accepts = [&](uint32_t bits) {
      for (size_t b = 0; b < scales; b += 4) std::memcpy(bytes.data() + b, &bits, 4);
      return decode_tensor(codec, bytes.data(), bytes.size(), n).ok();
    };
    // Positive floats order like their bits, so acceptance is a threshold: find it by bisection.
    uint32_t low = 0, high = 0x7f800000u;  // +0 is accepted, +Inf is not
    REQUIRE(accepts(low));
    REQUIRE_FALSE(accepts(high));
    while (high - low > 1) {
      const uint32_t mid = low + (high - low) / 2;
      (accepts(mid) ? low : high) = mid;
    }
    float bound, above;
    std::memcpy(&bound, &low, 4);
    std::memcpy(&above, &high, 4);
    CHECK(std::isfinite(largest_code * bound));
    CHECK_FALSE(std::isfinite(largest_code * above));
    REQUIRE(accepts(low));
    for (float x : *decode_tensor(codec, bytes.data(), bytes.size(), n)) CHECK(std::isfinite(x));
  }
}

TEST_CASE("encode never writes a scale decode refuses: blocks near FLT_MAX saturate") {
  const float big = std::numeric_limits<float>::max();
  for (Codec codec : kScaledCodecs) {
    const std::string name = codec_name(codec);
    CAPTURE(name);
    for (float top : {big, -big, 0.999f * big, 0.9f * big, 0.5f * big}) {
      CAPTURE(top);
      auto values = test::gaussian(300, 12);
      for (auto& v : values) v *= 1e37f;
      values[3] = top;
      values[290] = -top;  // the last, partial block too
      std::vector<uint8_t> bytes;
      REQUIRE(encode_tensor(codec, values.data(), values.size(), bytes).ok());
      CHECK(check_finite_range(codec, values.size(), 0, bytes.data(), bytes.size()).ok());
      auto decoded = decode_tensor(codec, bytes.data(), bytes.size(), values.size());
      REQUIRE_MESSAGE(decoded.ok(), (decoded.ok() ? "" : decoded.error().to_string()));
      for (float x : *decoded) REQUIRE(std::isfinite(x));
      // Saturating costs at most one level of the block's grid (int4_uniform: 1/8 of the top).
      CHECK(std::fabs((*decoded)[3] - top) <= std::fabs(top) / 7.0f);
      CHECK(((*decoded)[3] > 0) == (top > 0));
      CHECK(((*decoded)[290] > 0) == (top < 0));
    }
  }
}

TEST_CASE("decode rejects a byte count that does not match codec and element count") {
  const auto values = test::gaussian(100, 9);
  for (Codec codec : kAllCodecs) {
    std::vector<uint8_t> bytes;
    REQUIRE(encode_tensor(codec, values.data(), values.size(), bytes).ok());
    auto shorter = decode_tensor(codec, bytes.data(), bytes.size() - 1, values.size());
    REQUIRE_FALSE(shorter.ok());
    CHECK(shorter.error().code == ErrorCode::inconsistent);
    auto fewer = decode_tensor(codec, bytes.data(), bytes.size(), values.size() - 7);
    REQUIRE_FALSE(fewer.ok());
    CHECK(fewer.error().code == ErrorCode::inconsistent);
  }
}

TEST_CASE("codec names parse back, unknown names and absurd sizes are refused") {
  for (Codec codec : kAllCodecs) CHECK(*parse_codec(codec_name(codec)) == codec);
  CHECK(parse_codec("fp64").error().code == ErrorCode::invalid_argument);
  CHECK_FALSE(is_known_codec(5));
  CHECK(encoded_size(Codec::fp32, uint64_t{1} << 62).error().code == ErrorCode::oversized);
}

TEST_CASE("check_finite_range looks only at the scales of quantized codecs") {
  const auto values = test::gaussian(1000, 10);
  std::vector<uint8_t> bytes;
  REQUIRE(encode_tensor(Codec::int8, values.data(), values.size(), bytes).ok());
  // Codes past the 4 scales may hold any bit pattern; a range there is always fine.
  std::memset(bytes.data() + 16, 0xff, bytes.size() - 16);
  CHECK(check_finite_range(Codec::int8, values.size(), 16, bytes.data() + 16, bytes.size() - 16).ok());
  CHECK(check_finite_range(Codec::int8, values.size(), 3, bytes.data(), 8).error().code ==
        ErrorCode::invalid_argument);
}

TEST_CASE("quantized codecs: the norm from the codes and the fold while decoding equal the decoded tensor's") {
  for (Codec codec : {Codec::int8, Codec::int4_e2m1, Codec::int4_uniform}) {
    for (size_t n : {size_t{1}, size_t{63}, size_t{257}, size_t{300001}}) {  // odd tails, several threads
      CAPTURE(codec_name(codec));
      CAPTURE(n);
      const auto values = test::heavy_tailed(n, 5);
      std::vector<uint8_t> bytes;
      REQUIRE(encode_tensor(codec, values.data(), n, bytes).ok());
      auto decoded = decode_tensor(codec, bytes.data(), bytes.size(), n);
      REQUIRE(decoded.ok());
      double squared = 0;
      for (float v : *decoded) squared += double(v) * v;
      auto norm = quantized_norm(codec, bytes.data(), bytes.size(), n);
      REQUIRE(norm.ok());
      CHECK(*norm == doctest::Approx(std::sqrt(squared)).epsilon(1e-6));
      std::vector<float> sum(n, 0.25f), expected(n);
      for (size_t i = 0; i < n; ++i) expected[i] = 0.25f + 3.0f * (*decoded)[i];
      REQUIRE(accumulate_quantized(codec, bytes.data(), bytes.size(), n, 3.0f, sum.data(), 4).ok());
      double worst = 0;
      for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double(sum[i]) - expected[i]) / (1 + std::abs(expected[i])));
      CHECK(worst <= 1e-6);
    }
  }
  // An odd tail's padding nibble is not an element: decode ignores it, so do the norm and the fold.
  const std::vector<float> three{1.0f, -2.0f, 3.0f};
  std::vector<uint8_t> bytes;
  REQUIRE(encode_tensor(Codec::int4_uniform, three.data(), 3, bytes).ok());
  const double clean = *quantized_norm(Codec::int4_uniform, bytes.data(), bytes.size(), 3);
  bytes.back() |= 0x70;
  CHECK(*quantized_norm(Codec::int4_uniform, bytes.data(), bytes.size(), 3) == clean);
  std::vector<float> sum(3, 0.0f);
  REQUIRE(accumulate_quantized(Codec::int4_uniform, bytes.data(), bytes.size(), 3, 1.0f, sum.data()).ok());
  CHECK(sum == *decode_tensor(Codec::int4_uniform, bytes.data(), bytes.size(), 3));
  // Refused as decode_tensor refuses: a scale past the bound, a wrong size, a codec that is not quantized.
  std::vector<uint8_t> poisoned = bytes;
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(poisoned.data(), &inf, 4);
  CHECK(quantized_norm(Codec::int4_uniform, poisoned.data(), poisoned.size(), 3).error().code == ErrorCode::non_finite);
  CHECK(accumulate_quantized(Codec::int4_uniform, poisoned.data(), poisoned.size(), 3, 1.0f, sum.data()).error().code ==
        ErrorCode::non_finite);
  CHECK(sum == *decode_tensor(Codec::int4_uniform, bytes.data(), bytes.size(), 3));  // untouched
  CHECK(quantized_norm(Codec::int4_uniform, bytes.data(), bytes.size() - 1, 3).error().code == ErrorCode::inconsistent);
  CHECK_FALSE(quantized_norm(Codec::fp32, bytes.data(), bytes.size(), 3).ok());
}

}  // namespace
}  // namespace archipelago::messages

// Error feedback: with it, the running sum of what the receiver decoded tracks the running sum of
// what was sent (error bounded by one step); without it, the same rounding error adds up each send.
#include "messages/error_feedback.hpp"

#include <cmath>
#include <limits>

#include <string>

#include <doctest/doctest.h>

#include "tests/messages/test_data.hpp"

namespace archipelago::messages {
namespace {

// Sends a slowly varying vector `sends` times; returns ||sum(decoded) - sum(true)|| relative to
// the norm of one send (the last one), i.e. in units of "one tensor's worth" of error.
double cumulative_error(Codec codec, bool use_feedback, int sends) {
  const size_t n = 4096;
  const auto base = test::heavy_tailed(n, 21);
  const auto drift = test::gaussian(n, 22);
  std::vector<double> true_sum(n, 0.0), decoded_sum(n, 0.0);
  ErrorFeedback feedback;
  std::vector<uint8_t> bytes;
  std::vector<float> values(n), decoded(n);
  for (int s = 0; s < sends; ++s) {
    for (size_t i = 0; i < n; ++i) values[i] = base[i] * (1.0f + 0.002f * s * drift[i]);
    Status status = use_feedback ? encode_with_feedback(feedback, codec, values.data(), n, bytes)
                                 : encode_tensor(codec, values.data(), n, bytes);
    REQUIRE(status.ok());
    REQUIRE(decode_tensor(codec, bytes.data(), bytes.size(), decoded.data(), n).ok());
    for (size_t i = 0; i < n; ++i) {
      true_sum[i] += values[i];
      decoded_sum[i] += decoded[i];
    }
  }
  double err = 0.0, step = 0.0;
  for (size_t i = 0; i < n; ++i) {
    err += (true_sum[i] - decoded_sum[i]) * (true_sum[i] - decoded_sum[i]);
    step += double(values[i]) * values[i];
  }
  return std::sqrt(err / step);
}

TEST_CASE("error feedback keeps the cumulative error bounded, without it the error grows") {
  for (Codec codec : {Codec::int8, Codec::int4_e2m1, Codec::int4_uniform}) {
    const std::string name = codec_name(codec);
      CAPTURE(name);
    const double with_50 = cumulative_error(codec, true, 50);
    const double with_100 = cumulative_error(codec, true, 100);
    const double without_50 = cumulative_error(codec, false, 50);
    const double without_100 = cumulative_error(codec, false, 100);
    MESSAGE(name, " with feedback ", with_50, " -> ", with_100, ", without ", without_50, " -> ",
            without_100);
    // With feedback, what is still owed is the residual, at most half a quantization step per
    // element: it saturates within a few sends (small values wait until their residual crosses a
    // step) and then stops growing.
    CHECK(with_100 < 1.2 * with_50);
    CHECK(with_100 < 0.5);
    // Without, the same rounding repeats, so the error grows ~linearly with the number of sends.
    CHECK(without_100 > 1.5 * without_50);
    CHECK(without_100 > 10.0 * with_100);
  }
}

TEST_CASE("the residual is exactly what the receiver is still owed") {
  const auto values = test::gaussian(1000, 23);
  ErrorFeedback feedback;
  std::vector<uint8_t> bytes;
  REQUIRE(feedback.encode(Codec::int4_e2m1, values.data(), values.size(), bytes).ok());
  auto decoded = decode_tensor(Codec::int4_e2m1, bytes.data(), bytes.size(), values.size());
  REQUIRE(decoded.ok());
  for (size_t i = 0; i < values.size(); ++i) {
    CHECK(feedback.residual()[i] == doctest::Approx(values[i] - (*decoded)[i]).epsilon(1e-6));
  }
}

TEST_CASE("error feedback refuses NaN and size changes and keeps its residual") {
  auto values = test::gaussian(512, 24);
  ErrorFeedback feedback;
  std::vector<uint8_t> bytes;
  REQUIRE(feedback.encode(Codec::int8, values.data(), values.size(), bytes).ok());
  const auto residual = feedback.residual();

  values[3] = std::numeric_limits<float>::quiet_NaN();
  Status nan = feedback.encode(Codec::int8, values.data(), values.size(), bytes);
  REQUIRE_FALSE(nan.ok());
  CHECK(nan.error().code == ErrorCode::non_finite);
  CHECK(feedback.residual() == residual);

  Status resized = feedback.encode(Codec::int8, values.data(), 100, bytes);
  REQUIRE_FALSE(resized.ok());
  CHECK(resized.error().code == ErrorCode::invalid_argument);

  feedback.reset();
  CHECK(feedback.residual().empty());
}

}  // namespace
}  // namespace archipelago::messages

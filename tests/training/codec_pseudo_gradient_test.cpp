// The wire codecs on real pseudo-gradients: Δ = θ_start − θ_after_30_AdamW_steps of the tiny model.
#include <cmath>

#include <doctest/doctest.h>

#include "messages/error_feedback.hpp"
#include "messages/tensor_codec.hpp"
#include "test_corpus.hpp"
#include "training/outer.hpp"
#include "training/replica.hpp"

using namespace archipelago;
using namespace archipelago::training;

namespace {

std::vector<float> real_pseudo_gradient(int steps) {
  set_compute_threads(1);
  InnerOptions inner;
  inner.batch_size = 8;
  inner.warmup_steps = 5;
  auto replica = Replica::create(*model_preset("tiny"), inner, "cpu", 9);
  REQUIRE(replica.ok());
  auto corpus = testing::kjv();
  auto split = split_corpus(*corpus, "tail", 0.05);
  DataCursor cursor(std::shared_ptr<const std::vector<Token>>(corpus, &corpus->tokens), split->train, 8, 64, 9, 0);
  auto start = (*replica)->read_parameters();
  for (int i = 0; i < steps; ++i) (*replica)->step(cursor.next());
  auto local = (*replica)->read_parameters();
  std::vector<float> delta(start.size());
  pseudo_gradient(start.data(), local.data(), static_cast<int64_t>(start.size()), delta.data());
  return delta;
}

double relative_l2(const std::vector<float>& truth, const std::vector<float>& approx) {
  double error = 0, norm = 0;
  for (size_t i = 0; i < truth.size(); ++i) {
    error += (double(truth[i]) - approx[i]) * (double(truth[i]) - approx[i]);
    norm += double(truth[i]) * truth[i];
  }
  return std::sqrt(error / norm);
}

std::vector<float> round_trip(messages::Codec codec, const std::vector<float>& values) {
  std::vector<uint8_t> bytes;
  REQUIRE(messages::encode_tensor(codec, values.data(), values.size(), bytes).ok());
  auto decoded = messages::decode_tensor(codec, bytes.data(), bytes.size(), values.size());
  REQUIRE(decoded.ok());
  return *decoded;
}

}  // namespace

TEST_CASE("codec error on a real pseudo-gradient, and error feedback keeps repeated sends unbiased") {
  const auto delta = real_pseudo_gradient(30);
  struct Row { messages::Codec codec; double bound; };
  const Row rows[] = {{messages::Codec::fp32, 0.0},
                      {messages::Codec::bf16, 0.003},
                      {messages::Codec::int8, 0.02},
                      {messages::Codec::int4_e2m1, 0.15},
                      {messages::Codec::int4_uniform, 0.15}};
  for (const auto& row : rows) {
    const double error = relative_l2(delta, round_trip(row.codec, delta));
    MESSAGE(std::string(messages::codec_name(row.codec)) << ": relative L2 error " << error);
    CHECK(error <= row.bound);
  }

  // Send the same Δ 50 times with 4-bit: with error feedback the sum of what arrived tracks the sum
  // sent (relative error shrinks like 1/sends); without it the error stays at the one-shot level.
  const int sends = 50;
  messages::ErrorFeedback feedback;
  std::vector<float> sum_truth(delta.size(), 0.0f), sum_feedback(delta.size(), 0.0f), sum_plain(delta.size(), 0.0f);
  std::vector<uint8_t> bytes;
  for (int s = 0; s < sends; ++s) {
    REQUIRE(feedback.encode(messages::kInt4, delta.data(), delta.size(), bytes).ok());
    auto with = *messages::decode_tensor(messages::kInt4, bytes.data(), bytes.size(), delta.size());
    auto without = round_trip(messages::kInt4, delta);
    for (size_t i = 0; i < delta.size(); ++i) {
      sum_truth[i] += delta[i];
      sum_feedback[i] += with[i];
      sum_plain[i] += without[i];
    }
  }
  const double with_feedback = relative_l2(sum_truth, sum_feedback);
  const double without_feedback = relative_l2(sum_truth, sum_plain);
  MESSAGE("after " << sends << " sends: with feedback " << with_feedback << ", without " << without_feedback);
  CHECK(with_feedback < 0.01);
  CHECK(without_feedback > 5 * with_feedback);
}

TEST_CASE("the default 4-bit codec is the more accurate one on real pseudo-gradients") {
  for (int steps : {30, 150}) {
    const auto delta = real_pseudo_gradient(steps);
    const auto other = messages::kInt4 == messages::Codec::int4_e2m1 ? messages::Codec::int4_uniform
                                                                     : messages::Codec::int4_e2m1;
    CAPTURE(steps);
    CHECK(relative_l2(delta, round_trip(messages::kInt4, delta)) < relative_l2(delta, round_trip(other, delta)));
  }
}

// Drawing the next token from a language model's logits: temperature, top-k and top-p (nucleus)
// sampling, with a seeded generator of its own so that a seeded sample is the same text every time,
// on any device. Pure functions over floats: no torch here (training/replica.hpp runs the model).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/error.hpp"

namespace archipelago::training {

struct SamplingOptions {
  int64_t tokens = 256;      // how many tokens to generate after the prompt
  double temperature = 0.8;  // 0: always the most likely token (greedy)
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  double top_p = 1.0;        // keep the fewest most likely tokens whose probabilities reach p (1: all)
  uint64_t seed = 0;
  bool kv_cache = true;      // false: run the whole context for each token (the bench's baseline)
};

// invalid_argument naming the option when one is out of range (temperature < 0 or not finite,
// top_k < 0, top_p outside (0, 1], tokens < 0).
Status validate(const SamplingOptions& options);

// The next token: argmax at temperature 0; otherwise softmax(logits / temperature) restricted to the
// top-k, then to the top-p nucleus, renormalized, and drawn with `rng`. Ties keep the lower id.
int32_t draw_token(const std::vector<float>& logits, const SamplingOptions& options, std::mt19937_64& rng);

}  // namespace archipelago::training

// A model's loss on any text, and the figure that compares models with different tokenizers:
// bits per byte = Σ cross-entropy (nats) ÷ (ln 2 × the bytes of text those tokens cover).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "training/replica.hpp"

namespace archipelago::training {

struct TextScore {
  int64_t tokens = 0;         // tokens predicted (every token but the first)
  int64_t bytes = 0;          // bytes of text the predicted tokens cover
  double loss = 0;            // mean cross-entropy per predicted token (nats)
  double bits_per_byte = 0;
};

// Bits per byte of a mean loss (nats/token) over `tokens` tokens that cover `bytes` bytes.
double bits_per_byte(double loss, int64_t tokens, int64_t bytes);
// The same for text of `bytes_per_token` bytes a token (held-out sets: bytes_per_predicted_token).
double bits_per_byte(double loss, double bytes_per_token);

// Scores `text`, tokenized by `tokenizer`, in windows of the model's context (seq_len + 1 tokens, stride seq_len,
// so every token but the first is predicted once), `batch_size` windows a pass; a shorter last window
// is scored on its own. The mean is over tokens, not windows.
TextScore score_text(Replica& replica, const Tokenizer& tokenizer, std::string_view text, int batch_size);

}  // namespace archipelago::training

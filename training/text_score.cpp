#include "training/text_score.hpp"

#include <algorithm>
#include <cmath>

namespace archipelago::training {

double bits_per_byte(double loss, int64_t tokens, int64_t bytes) {
  return bytes > 0 ? loss * static_cast<double>(tokens) / (std::log(2.0) * static_cast<double>(bytes)) : 0.0;
}

double bits_per_byte(double loss, double bytes_per_token) {
  return bytes_per_token > 0 ? loss / (std::log(2.0) * bytes_per_token) : 0.0;
}

TextScore score_text(Replica& replica, const Tokenizer& tokenizer, std::string_view text, int batch_size) {
  const std::vector<Token> tokens = tokenizer.encode(text);
  TextScore score;
  const int64_t context = replica.model_config().seq_len;
  const int64_t n = static_cast<int64_t>(tokens.size());
  double nats = 0;
  auto score_batch = [&](int64_t first, int rows, int64_t length) {  // rows windows of `length` targets from `first`
    Batch batch;
    batch.batch_size = rows;
    batch.seq_len = static_cast<int>(length);
    for (int r = 0; r < rows; ++r) {
      const auto begin = tokens.begin() + first + r * length;
      batch.tokens.insert(batch.tokens.end(), begin, begin + length + 1);
    }
    const int64_t predicted = rows * length;
    nats += replica.evaluate({batch}) * static_cast<double>(predicted);
    score.tokens += predicted;
  };
  const int64_t windows = n > 1 ? (n - 1) / context : 0;
  for (int64_t w = 0; w < windows; w += batch_size) {
    const int rows = static_cast<int>(std::min<int64_t>(batch_size, windows - w));
    score_batch(w * context, rows, context);
  }
  const int64_t rest = n > 1 ? (n - 1) - windows * context : 0;
  if (rest > 0) score_batch(windows * context, 1, rest);
  if (n > 1) score.bytes = tokenizer.bytes_of(tokens.data() + 1, tokens.data() + n);
  score.loss = score.tokens > 0 ? nats / static_cast<double>(score.tokens) : 0.0;
  score.bits_per_byte = bits_per_byte(score.loss, score.tokens, score.bytes);
  return score;
}

}  // namespace archipelago::training

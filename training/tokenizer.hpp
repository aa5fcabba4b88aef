// Tokenizers: byte-level (every byte one token, vocabulary 256) and SentencePiece (a subword
// vocabulary trained on the corpus, `archipelago tokenizer train`). Both round-trip any input exactly:
// a SentencePiece model is trained without normalization, without a dummy prefix and with byte
// fallback, so every byte of the input is covered by exactly one token and `decode` restores it.
//
// `Tokenizer` is an immutable value, cheap to copy (it shares one loaded model) and safe from any
// thread. A run names it by `data.tokenizer`: "bytes", "spm:FILE", or "bpe:N" (a BPE model of N
// pieces trained on the run's own corpus, cached; training/corpus.hpp's load_corpus makes it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace archipelago::training {

using Token = int32_t;

constexpr int kByteVocabulary = 256;

class Tokenizer {
 public:
  Tokenizer();  // byte-level

  // "bytes" or "spm:FILE"; a file that is missing or does not parse is invalid_argument, named
  // ("bpe:N" needs the corpus: load_corpus).
  static Expected<Tokenizer> load(const std::string& spec);
  // A SentencePiece model from its serialized bytes (a .model file's contents).
  static Expected<Tokenizer> from_model(std::string model, const std::string& origin);

  bool byte_level() const;
  const std::string& kind() const;  // "bytes" | "spm"
  int vocab() const;
  std::vector<Token> encode(std::string_view text) const;
  std::string decode(const std::vector<Token>& tokens) const;
  // The bytes of text `token` stands for: decode is their concatenation, so a token can be printed
  // as soon as it is drawn. Out-of-vocabulary ids stand for nothing.
  const std::string& text_of(Token token) const;
  // Bytes of text the tokens [begin, end) stand for.
  int64_t bytes_of(const Token* begin, const Token* end) const;
  // The serialized SentencePiece model (empty for byte-level) and its content hash (xxh3-64, hex;
  // "bytes" for byte-level): what a run records and sends to its nodes.
  const std::string& model() const;
  const std::string& hash() const;

  struct Impl;  // defined in tokenizer.cpp only

 private:
  std::shared_ptr<const Impl> impl_;
};

// The vocabulary a data.tokenizer spec gives the model: 256, the file's pieces, or N of "bpe:N"
// (N in [264, 1000000]); invalid_argument naming the key otherwise.
Expected<int> tokenizer_vocabulary(const std::string& spec);
// N of "bpe:N", or 0 when the spec is not one.
int trained_vocabulary(const std::string& spec);

struct TokenizerTraining {
  int vocab = 8192;
  std::string type = "bpe";  // bpe | unigram
  int threads = 0;           // 0: the hardware's
};

// Trains a SentencePiece model on `text` (one sentence per line; lines over 16 KiB are skipped) and returns
// its serialized bytes. invalid_argument for a bad vocabulary size or type, or a text too small.
Expected<std::string> train_tokenizer(const std::string& text, const TokenizerTraining& options);

}  // namespace archipelago::training

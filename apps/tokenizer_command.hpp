// `archipelago tokenizer train`: a SentencePiece model trained on a corpus, for data.tokenizer.
//
//   archipelago tokenizer train --corpus PATH --vocab N --out FILE [--type bpe|unigram]
//                               [--cache-dir DIR] [--json]
//
// PATH is what data.corpus takes ("kjv", a file or a directory). The model is written atomically,
// then checked: every document of the corpus must decode back to its exact bytes.
#pragma once

#include <string>

namespace archipelago::apps {

struct TokenizerArguments {
  std::string corpus = "kjv";
  int vocab = 8192;
  std::string out;
  std::string type = "bpe";
  std::string cache_dir = "archipelago-runs/data";
  bool json = false;
};

// 0 on success; 2 for bad input (a corpus that does not load, a vocabulary or type out of range);
// 1 when the model cannot be written or does not round-trip the corpus.
int run_tokenizer_train(const TokenizerArguments& arguments);

}  // namespace archipelago::apps

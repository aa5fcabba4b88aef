#include "apps/tokenizer_command.hpp"

#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "training/corpus.hpp"
#include "training/tokenizer.hpp"

namespace archipelago::apps {

int run_tokenizer_train(const TokenizerArguments& arguments) {
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "archipelago tokenizer train: %s\n", message.c_str());
    return code;
  };
  if (arguments.out.empty()) return fail(2, "--out FILE is required");
  training::DataOptions data;
  data.corpus = arguments.corpus;
  data.cache_dir = arguments.cache_dir;
  auto corpus = training::load_text(data);
  if (!corpus) return fail(2, "--corpus: " + corpus.error().reason);

  const auto began = std::chrono::steady_clock::now();
  training::TokenizerTraining options;
  options.vocab = arguments.vocab;
  options.type = arguments.type;
  auto model = training::train_tokenizer(corpus->text, options);
  if (!model) return fail(2, model.error().reason);
  const double train_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  auto tokenizer = training::Tokenizer::from_model(*model, "the trained model");
  if (!tokenizer) return fail(1, tokenizer.error().reason);

  // The round trip, document by document, as a run tokenizes the corpus.
  training::tokenize_corpus(*corpus, *tokenizer);
  for (const auto& document : corpus->documents) {
    const std::vector<training::Token> tokens(corpus->tokens.begin() + document.tokens.begin,
                                              corpus->tokens.begin() + document.tokens.end);
    if (tokenizer->decode(tokens) != corpus->text.substr(document.bytes.begin, document.bytes.size())) {
      return fail(1, "the trained model does not restore document '" + document.name + "' exactly");
    }
  }
  if (auto written = write_file_atomically(arguments.out, *model); !written) return fail(1, written.error().reason);

  std::printf("tokenizer %s: %s, %d pieces, %zu bytes of text -> %zu tokens (%.3f bytes per token), round trip exact, "
              "trained in %.1f s\n",
              arguments.out.c_str(), arguments.type.c_str(), tokenizer->vocab(), corpus->text.size(),
              corpus->tokens.size(), corpus->bytes_per_token(), train_s);
  std::printf("use it with: --set data.tokenizer='\"spm:%s\"'\n", arguments.out.c_str());
  if (arguments.json) {
    nlohmann::json summary = {{"out", arguments.out},           {"type", arguments.type},
                              {"vocab", tokenizer->vocab()},    {"hash", tokenizer->hash()},
                              {"corpus", arguments.corpus},     {"bytes", corpus->text.size()},
                              {"tokens", corpus->tokens.size()}, {"bytes_per_token", corpus->bytes_per_token()},
                              {"round_trip", true},             {"train_s", train_s},
                              {"model_bytes", model->size()}};
    std::printf("%s\n", summary.dump().c_str());
  }
  return 0;
}

}  // namespace archipelago::apps

#include "training/tokenizer.hpp"

#include <dlfcn.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "common/files.hpp"

#ifndef ARCHIPELAGO_SPM_SHIM
#define ARCHIPELAGO_SPM_SHIM "libarchipelago_spm.so"
#endif

namespace archipelago::training {
namespace {

// SentencePiece, reached through training/spm_shim.cpp's C interface (see there for why it is a
// separately loaded object). Loaded once; its path is ARCHIPELAGO_SPM_SHIM unless the environment
// variable of that name says otherwise.
struct SentencePieceApi {
  void* (*load)(const char*, size_t, char*, size_t) = nullptr;
  void (*free_processor)(void*) = nullptr;
  void (*free_buffer)(void*) = nullptr;  // every buffer the shim hands over goes back through it
  int (*size)(const void*) = nullptr;
  void (*piece)(const void*, int, const char**, size_t*, int*) = nullptr;
  int (*encode)(const void*, const char*, size_t, int**, size_t*) = nullptr;
  int (*train)(const char*, const char*, size_t, char**, size_t*, char*, size_t) = nullptr;
  std::string error;  // why it could not be loaded ("" when it was)
};

const SentencePieceApi& sentencepiece_api() {
  static const SentencePieceApi api = [] {
    SentencePieceApi a;
    const char* path = std::getenv("ARCHIPELAGO_SPM_SHIM");
    if (!path || !*path) path = ARCHIPELAGO_SPM_SHIM;
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!handle) {
      const char* why = dlerror();
      a.error = std::string("cannot load SentencePiece (") + path + "): " + (why ? why : "unknown error");
      return a;
    }
    auto bind = [&](auto& function, const char* name) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
      if (!function && a.error.empty()) a.error = std::string("SentencePiece shim without ") + name;
    };
    bind(a.load, "archipelago_spm_load");
    bind(a.free_processor, "archipelago_spm_free");
    bind(a.free_buffer, "archipelago_spm_free_buffer");
    bind(a.size, "archipelago_spm_size");
    bind(a.piece, "archipelago_spm_piece");
    bind(a.encode, "archipelago_spm_encode");
    bind(a.train, "archipelago_spm_train");
    return a;
  }();
  return api;
}

}  // namespace

struct Tokenizer::Impl {
  std::string kind = "bytes";
  std::string model;
  std::string hash = "bytes";
  std::shared_ptr<void> processor;  // SentencePiece's, null for byte-level
  std::vector<std::string> texts;   // text_of, by id
};

namespace {

const std::string kNothing;

std::shared_ptr<const Tokenizer::Impl> byte_level_impl() {
  static const auto impl = [] {
    auto made = std::make_shared<Tokenizer::Impl>();
    for (int b = 0; b < kByteVocabulary; ++b) made->texts.emplace_back(1, static_cast<char>(b));
    return std::shared_ptr<const Tokenizer::Impl>(std::move(made));
  }();
  return impl;
}

std::string hex64(uint64_t value) {
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(value));
  return out;
}

// The text a SentencePiece piece stands for: U+2581 (SentencePiece's space) is a space, a byte piece
// "<0xAB>" is that byte, control and unknown pieces stand for nothing.
std::string piece_text(const std::string& piece, int kind) {
  if (kind == 2) return {};
  if (kind == 1) return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
  static const std::string space = "\xE2\x96\x81";
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.compare(i, space.size(), space) == 0) {
      out += ' ';
      i += space.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

}  // namespace

Tokenizer::Tokenizer() : impl_(byte_level_impl()) {}

Expected<Tokenizer> Tokenizer::from_model(std::string model, const std::string& origin) {
  const auto& api = sentencepiece_api();
  if (!api.error.empty()) return make_error(ErrorCode::unavailable, api.error);
  char error[512] = {0};
  void* processor = api.load(model.data(), model.size(), error, sizeof error);
  if (!processor) return make_error(ErrorCode::invalid_argument, origin + " is not a SentencePiece model: " + error);
  auto impl = std::make_shared<Impl>();
  impl->kind = "spm";
  impl->processor = std::shared_ptr<void>(processor, api.free_processor);
  const int vocab = api.size(processor);
  if (vocab < 2) return make_error(ErrorCode::invalid_argument, origin + ": a SentencePiece model of " + std::to_string(vocab) + " pieces");
  impl->texts.reserve(static_cast<size_t>(vocab));
  for (int id = 0; id < vocab; ++id) {
    const char* piece = nullptr;
    size_t length = 0;
    int kind = 0;
    api.piece(processor, id, &piece, &length, &kind);
    impl->texts.push_back(piece_text(std::string(piece, length), kind));
  }
  impl->hash = hex64(XXH3_64bits(model.data(), model.size()));
  impl->model = std::move(model);
  Tokenizer out;
  out.impl_ = std::move(impl);
  return out;
}

namespace {

constexpr int kMinTrainedVocabulary = kByteVocabulary + 8, kMaxTrainedVocabulary = 1'000'000;

Status check_trained_vocabulary(int vocab, const std::string& what) {
  if (vocab < kMinTrainedVocabulary || vocab > kMaxTrainedVocabulary) {
    return make_error(ErrorCode::invalid_argument, what + " must be in [" + std::to_string(kMinTrainedVocabulary) +
                                                       ", " + std::to_string(kMaxTrainedVocabulary) + "], got " +
                                                       std::to_string(vocab));
  }
  return {};
}

}  // namespace

int trained_vocabulary(const std::string& spec) {
  if (spec.rfind("bpe:", 0) != 0) return 0;
  try {
    size_t used = 0;
    const int vocab = std::stoi(spec.substr(4), &used);
    return used == spec.size() - 4 ? vocab : -1;
  } catch (const std::exception&) {
    return -1;
  }
}

Expected<int> tokenizer_vocabulary(const std::string& spec) {
  if (spec.rfind("bpe:", 0) == 0) {
    const int vocab = trained_vocabulary(spec);
    if (auto ok = check_trained_vocabulary(vocab, "data.tokenizer's N in \"bpe:N\""); !ok) return ok.error();
    return vocab;
  }
  auto tokenizer = Tokenizer::load(spec);
  if (!tokenizer) return tokenizer.error();
  return tokenizer->vocab();
}

Expected<Tokenizer> Tokenizer::load(const std::string& spec) {
  if (spec == "bytes") return Tokenizer();
  if (spec.rfind("spm:", 0) != 0 || spec.size() == 4) {
    return make_error(ErrorCode::invalid_argument,
                      "data.tokenizer: '" + spec + "' is neither \"bytes\", \"bpe:N\" nor \"spm:FILE\"");
  }
  const std::string path = spec.substr(4);
  auto bytes = read_whole_file(path);
  if (!bytes) return make_error(ErrorCode::invalid_argument, "data.tokenizer: " + bytes.error().reason);
  return from_model(std::move(*bytes), "data.tokenizer: " + path);
}

bool Tokenizer::byte_level() const { return impl_->processor == nullptr; }
const std::string& Tokenizer::kind() const { return impl_->kind; }
int Tokenizer::vocab() const { return static_cast<int>(impl_->texts.size()); }
const std::string& Tokenizer::model() const { return impl_->model; }
const std::string& Tokenizer::hash() const { return impl_->hash; }

std::vector<Token> Tokenizer::encode(std::string_view text) const {
  if (byte_level()) {
    std::vector<Token> out(text.size());
    std::transform(text.begin(), text.end(), out.begin(), [](char c) { return static_cast<Token>(static_cast<unsigned char>(c)); });
    return out;
  }
  int* ids = nullptr;
  size_t count = 0;
  if (sentencepiece_api().encode(impl_->processor.get(), text.data(), text.size(), &ids, &count) != 0) {
    // Encoding with byte fallback covers every input; a failure here is a broken model.
    throw std::runtime_error("SentencePiece could not encode a text");
  }
  std::vector<Token> out(ids, ids + count);
  sentencepiece_api().free_buffer(ids);
  return out;
}

const std::string& Tokenizer::text_of(Token token) const {
  return token >= 0 && token < vocab() ? impl_->texts[static_cast<size_t>(token)] : kNothing;
}

std::string Tokenizer::decode(const std::vector<Token>& tokens) const {
  std::string out;
  for (Token t : tokens) out += text_of(t);
  return out;
}

int64_t Tokenizer::bytes_of(const Token* begin, const Token* end) const {
  int64_t bytes = 0;
  for (const Token* t = begin; t != end; ++t) bytes += static_cast<int64_t>(text_of(*t).size());
  return bytes;
}

Expected<std::string> train_tokenizer(const std::string& text, const TokenizerTraining& options) {
  if (options.type != "bpe" && options.type != "unigram") {
    return make_error(ErrorCode::invalid_argument, "--type: '" + options.type + "' (expected bpe or unigram)");
  }
  // Byte fallback needs the 256 byte pieces and one unknown piece below the learned ones.
  if (auto ok = check_trained_vocabulary(options.vocab, "--vocab"); !ok) return ok.error();
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  const int threads = options.threads > 0 ? options.threads : static_cast<int>(hardware);
  std::ostringstream args;
  args << "--model_type=" << options.type << " --vocab_size=" << options.vocab
       << " --normalization_rule_name=identity --add_dummy_prefix=false --remove_extra_whitespaces=false"
       << " --byte_fallback=true --character_coverage=1.0 --split_digits=true"
       << " --unk_id=0 --bos_id=-1 --eos_id=-1 --pad_id=-1 --max_sentence_length=16384"
       << " --hard_vocab_limit=true --minloglevel=2 --num_threads=" << threads;
  const auto& api = sentencepiece_api();
  if (!api.error.empty()) return make_error(ErrorCode::unavailable, api.error);
  char* model = nullptr;
  size_t size = 0;
  char error[512] = {0};
  if (api.train(args.str().c_str(), text.data(), text.size(), &model, &size, error, sizeof error) != 0) {
    return make_error(ErrorCode::invalid_argument, std::string("SentencePiece training failed: ") + error);
  }
  std::string out(model, size);
  api.free_buffer(model);
  return out;
}

}  // namespace archipelago::training

#include "training/corpus.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include <xxhash.h>

#include "common/files.hpp"
#include "common/log.hpp"

namespace archipelago::training {
namespace fs = std::filesystem;

namespace {

Expected<std::string> run_bible() {
  // Debian's bible-kjv prints every verse as "Ge1:1 text"; ~4.4 MB.
  FILE* pipe = popen("bible -f Gen1:1-Rev22:21 2>/dev/null", "r");
  if (!pipe) return make_error(ErrorCode::unavailable, "cannot run `bible` (install bible-kjv)");
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) text.append(buffer, n);
  int status = pclose(pipe);
  if (status != 0 || text.size() < 1000000) {
    return make_error(ErrorCode::unavailable,
                      "`bible -f Gen1:1-Rev22:21` failed or printed too little (install bible-kjv)");
  }
  return text;
}

Expected<Corpus> load_kjv(const std::string& cache_dir) {
  fs::path cache = fs::path(cache_dir) / "kjv.txt";
  if (fs::exists(cache)) {
    auto text = read_whole_file(cache.string());
    if (!text) return text.error();
    return parse_kjv(std::move(*text));
  }
  auto text = run_bible();
  if (!text) return text.error();
  std::error_code ec;
  fs::create_directories(cache.parent_path(), ec);
  // Atomic: a reader never sees half a cache file.
  if (!write_file_atomically(cache.string(), *text)) component_logger("corpus")->warn("cannot cache the corpus at {}", cache.string());
  return parse_kjv(std::move(*text));
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Corpus parse_kjv(std::string text) {
  Corpus corpus;
  std::string current;
  int64_t begin = 0;
  int64_t pos = 0;
  const int64_t size = static_cast<int64_t>(text.size());
  while (pos < size) {
    int64_t line_end = static_cast<int64_t>(text.find('\n', pos));
    if (line_end < 0) line_end = size;
    // The book is the reference up to its chapter number: "1Sa3:4" -> "1Sa".
    int64_t i = pos;
    if (i < line_end && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    while (i < line_end && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string book = text.substr(pos, i - pos);
    if (!book.empty() && book != current) {
      if (!current.empty()) corpus.documents.push_back({current, {begin, pos}, {}});
      current = book;
      begin = pos;
    }
    pos = line_end + 1;
  }
  if (!current.empty()) corpus.documents.push_back({current, {begin, size}, {}});
  if (corpus.documents.empty()) corpus.documents.push_back({"text", {0, size}, {}});
  corpus.text = std::move(text);
  tokenize_corpus(corpus, Tokenizer());
  return corpus;
}

void tokenize_corpus(Corpus& corpus, const Tokenizer& tokenizer) {
  // Documents are independent: tokenized in parallel, then laid end to end in document order.
  std::vector<std::vector<Token>> parts(corpus.documents.size());
  const int threads = std::max(1, std::min<int>(static_cast<int>(parts.size()),
                                                static_cast<int>(std::thread::hardware_concurrency())));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t d; (d = next++) < parts.size();) {
      const Span& b = corpus.documents[d].bytes;
      parts[d] = tokenizer.encode(std::string_view(corpus.text).substr(static_cast<size_t>(b.begin), static_cast<size_t>(b.size())));
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(work);
  work();
  for (auto& w : workers) w.join();
  corpus.tokens.clear();
  for (size_t d = 0; d < parts.size(); ++d) {
    const int64_t begin = static_cast<int64_t>(corpus.tokens.size());
    corpus.tokens.insert(corpus.tokens.end(), parts[d].begin(), parts[d].end());
    corpus.documents[d].tokens = {begin, static_cast<int64_t>(corpus.tokens.size())};
  }
  corpus.tokenizer = tokenizer;
}

Expected<Tokenizer> corpus_tokenizer(const Corpus& corpus, int vocab, const std::string& cache_dir) {
  // Named by the corpus's content and the vocabulary: another corpus never reuses it.
  char name[96];
  std::snprintf(name, sizeof name, "tokenizer-%016llx-bpe%d.model",
                static_cast<unsigned long long>(XXH3_64bits(corpus.text.data(), corpus.text.size())), vocab);
  const fs::path path = fs::path(cache_dir) / name;
  std::error_code ec;
  if (fs::exists(path, ec)) return Tokenizer::load("spm:" + path.string());
  TokenizerTraining training;
  training.vocab = vocab;
  auto model = train_tokenizer(corpus.text, training);
  if (!model) return model.error();
  auto tokenizer = Tokenizer::from_model(*model, "the tokenizer trained on the corpus");
  if (!tokenizer) return tokenizer.error();
  fs::create_directories(cache_dir, ec);
  if (!write_file_atomically(path.string(), *model)) {
    component_logger("corpus")->warn("cannot cache the trained tokenizer at {}", path.string());
  }
  return tokenizer;
}

Expected<Corpus> load_corpus(const DataOptions& options) {
  const int trained = trained_vocabulary(options.tokenizer);
  Expected<Tokenizer> tokenizer = Tokenizer();
  if (trained == 0) {
    tokenizer = Tokenizer::load(options.tokenizer);
    if (!tokenizer) return tokenizer.error();
  }
  auto corpus = load_text(options);
  if (!corpus) return corpus.error();
  if (trained != 0) {
    if (auto vocab = tokenizer_vocabulary(options.tokenizer); !vocab) return vocab.error();
    tokenizer = corpus_tokenizer(*corpus, trained, options.cache_dir);
    if (!tokenizer) return tokenizer.error();
  }
  if (!tokenizer->byte_level()) tokenize_corpus(*corpus, *tokenizer);
  return corpus;
}

Expected<Corpus> load_text(const DataOptions& options) {
  if (options.corpus == "kjv") return load_kjv(options.cache_dir);
  fs::path path(options.corpus);
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    auto text = read_whole_file(path.string());
    if (!text) return text.error();
    Corpus corpus;
    corpus.documents.push_back({path.filename().string(), {0, static_cast<int64_t>(text->size())}, {}});
    corpus.text = std::move(*text);
    tokenize_corpus(corpus, Tokenizer());
    return corpus;
  }
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (auto& entry : fs::recursive_directory_iterator(path, ec)) {
      if (entry.is_regular_file()) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    Corpus corpus;
    for (auto& file : files) {
      auto text = read_whole_file(file.string());
      if (!text) return text.error();
      int64_t begin = static_cast<int64_t>(corpus.text.size());
      corpus.text += *text;
      corpus.documents.push_back({fs::relative(file, path).string(),
                                  {begin, static_cast<int64_t>(corpus.text.size())}, {}});
    }
    if (corpus.text.empty()) {
      return make_error(ErrorCode::invalid_argument, "data.corpus: directory " + path.string() + " has no text");
    }
    tokenize_corpus(corpus, Tokenizer());
    return corpus;
  }
  return make_error(ErrorCode::not_found,
                    "data.corpus: '" + options.corpus + "' is neither \"kjv\" nor an existing file or directory");
}

Expected<Split> split_corpus(const Corpus& corpus, const std::string& kind, double fraction) {
  if (!(fraction > 0 && fraction < 1)) {
    return make_error(ErrorCode::invalid_argument, "data.heldout_fraction must be in (0, 1)");
  }
  Split split;
  if (kind == "tail") {
    for (const auto& doc : corpus.documents) {
      int64_t held = static_cast<int64_t>(doc.tokens.size() * fraction);
      int64_t cut = doc.tokens.end - held;
      if (cut > doc.tokens.begin) split.train.push_back({doc.tokens.begin, cut});
      if (held > 0) split.heldout.push_back({cut, doc.tokens.end});
    }
  } else if (kind == "documents") {
    int64_t total = static_cast<int64_t>(corpus.tokens.size());
    int64_t target = static_cast<int64_t>(total * fraction);
    int64_t held = 0;
    size_t first_held = corpus.documents.size();
    while (first_held > 1 && held < target) held += corpus.documents[--first_held].tokens.size();
    for (size_t i = 0; i < corpus.documents.size(); ++i) {
      (i < first_held ? split.train : split.heldout).push_back(corpus.documents[i].tokens);
    }
    if (split.heldout.empty()) {
      return make_error(ErrorCode::invalid_argument,
                        "data.split = \"documents\" needs a corpus of at least two documents");
    }
  } else {
    return make_error(ErrorCode::invalid_argument,
                      "data.split: unknown split '" + kind + "' (expected tail or documents)");
  }
  return split;
}

Expected<std::vector<std::vector<Span>>> make_shards(const Corpus& corpus, const Split& split,
                                                     const std::string& kind, int learners,
                                                     int64_t chunk_bytes, uint64_t seed) {
  if (learners < 1) return make_error(ErrorCode::invalid_argument, "train.learners must be >= 1");
  std::vector<std::vector<Span>> shards(learners);
  if (kind == "iid") {
    if (chunk_bytes < 1) return make_error(ErrorCode::invalid_argument, "data.chunk_bytes must be >= 1");
    const int64_t chunk = std::max<int64_t>(1, std::llround(static_cast<double>(chunk_bytes) / corpus.bytes_per_token()));
    std::vector<Span> chunks;
    for (const auto& span : split.train) {
      for (int64_t b = span.begin; b < span.end; b += chunk) {
        chunks.push_back({b, std::min(span.end, b + chunk)});
      }
    }
    std::mt19937_64 rng(seed);
    std::shuffle(chunks.begin(), chunks.end(), rng);
    for (size_t i = 0; i < chunks.size(); ++i) shards[i % learners].push_back(chunks[i]);
  } else if (kind == "noniid") {
    int64_t total = 0;
    for (const auto& span : split.train) total += span.size();
    if (static_cast<int>(split.train.size()) >= learners) {
      // Contiguous runs of whole (training parts of) documents, about total/M bytes each.
      int64_t seen = 0;
      int learner = 0;
      for (size_t i = 0; i < split.train.size(); ++i) {
        const int remaining_spans = static_cast<int>(split.train.size() - i);
        const int learners_after = learners - learner - 1;
        const bool full = seen >= total * (learner + 1) / learners;
        if (!shards[learner].empty() && learners_after > 0 && (full || remaining_spans == learners_after)) {
          ++learner;
        }
        shards[learner].push_back(split.train[i]);
        seen += split.train[i].size();
      }
    } else {
      // Too few documents: cut the training bytes into M contiguous parts instead.
      int64_t per = total / learners + 1;
      int learner = 0;
      int64_t filled = 0;
      for (const auto& span : split.train) {
        int64_t b = span.begin;
        while (b < span.end) {
          int64_t take = std::min(span.end - b, per - filled);
          shards[learner].push_back({b, b + take});
          b += take;
          filled += take;
          if (filled >= per && learner + 1 < learners) { ++learner; filled = 0; }
        }
      }
    }
  } else {
    return make_error(ErrorCode::invalid_argument,
                      "data.sharding: unknown sharding '" + kind + "' (expected iid or noniid)");
  }
  for (auto& shard : shards) {
    std::sort(shard.begin(), shard.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  }
  return shards;
}

DataCursor::DataCursor(std::shared_ptr<const std::vector<Token>> tokens, std::vector<Span> shard, int batch_size,
                       int seq_len, uint64_t seed, int learner, uint64_t position)
    : tokens_(std::move(tokens)), batch_size_(batch_size), seq_len_(seq_len), seed_(seed),
      learner_(learner), position_(position) {
  for (const auto& span : shard) {
    int64_t starts = span.size() - seq_len_;  // window [s, s + T + 1) must fit
    if (starts <= 0) continue;
    spans_.push_back(span);
    total_weight_ += starts;
    cumulative_.push_back(total_weight_);
  }
}

Batch DataCursor::next() { return at(position_++); }

Batch DataCursor::at(uint64_t position) const {
  Batch batch;
  batch.batch_size = batch_size_;
  batch.seq_len = seq_len_;
  if (total_weight_ == 0) return batch;
  batch.tokens.resize(static_cast<size_t>(batch_size_) * (seq_len_ + 1));
  for (int row = 0; row < batch_size_; ++row) {
    uint64_t h = splitmix64(seed_ ^ splitmix64(static_cast<uint64_t>(learner_) * 0x100000001b3ULL ^
                                               splitmix64(position * 1315423911ULL + row)));
    int64_t pick = static_cast<int64_t>(h % static_cast<uint64_t>(total_weight_));
    size_t index = std::upper_bound(cumulative_.begin(), cumulative_.end(), pick) - cumulative_.begin();
    int64_t before = index == 0 ? 0 : cumulative_[index - 1];
    int64_t start = spans_[index].begin + (pick - before);
    std::copy_n(tokens_->data() + start, seq_len_ + 1, batch.tokens.data() + static_cast<size_t>(row) * (seq_len_ + 1));
    batch.windows.push_back({start, start + seq_len_ + 1});
  }
  return batch;
}

double bytes_per_predicted_token(const std::vector<Batch>& heldout) {
  int64_t bytes = 0, predicted = 0;
  for (const auto& batch : heldout) {
    bytes += batch.target_bytes;
    predicted += static_cast<int64_t>(batch.batch_size) * batch.seq_len;
  }
  return predicted > 0 ? static_cast<double>(bytes) / static_cast<double>(predicted) : 1.0;
}

std::vector<Batch> heldout_batches(const Corpus& corpus, const std::vector<Span>& heldout,
                                   int batches, int batch_size, int seq_len) {
  const auto& tokens = corpus.tokens;
  std::vector<Span> usable;
  int64_t total = 0;
  for (const auto& span : heldout) {
    if (span.size() > seq_len) {
      usable.push_back(span);
      total += span.size() - seq_len;
    }
  }
  std::vector<Batch> out;
  if (total == 0) return out;
  const int64_t windows = static_cast<int64_t>(batches) * batch_size;
  int64_t index = 0;
  for (int b = 0; b < batches; ++b) {
    Batch batch;
    batch.batch_size = batch_size;
    batch.seq_len = seq_len;
    for (int row = 0; row < batch_size; ++row, ++index) {
      int64_t pick = total * index / windows;  // evenly spaced over all held-out window starts
      size_t s = 0;
      while (pick >= usable[s].size() - seq_len) pick -= usable[s++].size() - seq_len;
      int64_t start = usable[s].begin + pick;
      batch.tokens.insert(batch.tokens.end(), tokens.begin() + start, tokens.begin() + start + seq_len + 1);
      batch.windows.push_back({start, start + seq_len + 1});
      batch.target_bytes += corpus.tokenizer.bytes_of(tokens.data() + start + 1, tokens.data() + start + seq_len + 1);
    }
    out.push_back(std::move(batch));
  }
  return out;
}

}  // namespace archipelago::training

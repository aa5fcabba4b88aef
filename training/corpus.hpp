// Corpus, held-out split, per-learner shards and resumable data cursors.
//
// The corpus is one byte string cut into documents (a book of the Bible, a file), each tokenized on
// its own by the run's tokenizer (data.tokenizer), so a document's tokens never straddle another's.
// Splits, shards and windows are spans of tokens. A `Split` assigns every token to training or
// held-out, never both; shards give each learner a disjoint part of the training tokens. A `DataCursor` samples batches as a pure function of
// (seed, learner, position), so a restarted learner resumes exactly where its cursor says.
// Loading touches the filesystem (and may run `bible`); everything else is pure and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "training/options.hpp"
#include "training/tokenizer.hpp"

namespace archipelago::training {

struct Span {
  int64_t begin = 0;  // offset, inclusive (into Corpus::tokens, or for Document::bytes into Corpus::text)
  int64_t end = 0;    // exclusive
  int64_t size() const { return end - begin; }
};

struct Document {
  std::string name;
  Span bytes;   // in Corpus::text
  Span tokens;  // in Corpus::tokens
};

struct Corpus {
  std::string text;
  std::vector<Document> documents;
  std::vector<Token> tokens;
  Tokenizer tokenizer;
  // Bytes of text per token over the whole corpus (1 at byte level).
  double bytes_per_token() const {
    return tokens.empty() ? 1.0 : static_cast<double>(text.size()) / static_cast<double>(tokens.size());
  }
};

// "kjv": the King James Bible from Debian's bible-kjv, cached as <cache_dir>/kjv.txt.
// Otherwise a UTF-8 text file (one document) or a directory (each regular file, recursively, in
// sorted order, is one document). Tokenized with options.tokenizer.
Expected<Corpus> load_corpus(const DataOptions& options);
// The same corpus tokenized byte by byte, whatever options.tokenizer says (to train a tokenizer on).
Expected<Corpus> load_text(const DataOptions& options);

// data.tokenizer = "bpe:N": a BPE SentencePiece model of `vocab` pieces trained on corpus.text, or
// the one trained before, cached in `cache_dir` under the corpus's content hash and N.
Expected<Tokenizer> corpus_tokenizer(const Corpus& corpus, int vocab, const std::string& cache_dir);

// Cuts the output of `bible -f` ("Ge1:1 In the beginning...") into one document per book, tokenized
// byte by byte.
Corpus parse_kjv(std::string text);

// Tokenizes every document of `corpus` on its own with `tokenizer` (replacing its tokens).
void tokenize_corpus(Corpus& corpus, const Tokenizer& tokenizer);

struct Split {
  std::vector<Span> train;    // sorted, disjoint
  std::vector<Span> heldout;  // sorted, disjoint, never overlapping `train`
};

// "tail": the last `fraction` of every document is held out. "documents": the last documents
// (about `fraction` of all bytes) are held out whole.
Expected<Split> split_corpus(const Corpus& corpus, const std::string& kind, double fraction);

// One shard of training spans per learner. "iid": training tokens are cut into chunks of about
// `chunk_bytes` bytes of text (chunk_bytes ÷ the corpus's bytes per token, in tokens), shuffled with
// `seed` and dealt round-robin. "noniid": each learner receives a contiguous run of whole documents
// (about equal tokens), so learners see different distributions.
Expected<std::vector<std::vector<Span>>> make_shards(const Corpus& corpus, const Split& split,
                                                     const std::string& kind, int learners,
                                                     int64_t chunk_bytes, uint64_t seed);

// B sequences of T+1 tokens, row-major; inputs are [:, :T], targets [:, 1:].
struct Batch {
  int batch_size = 0;
  int seq_len = 0;
  std::vector<Token> tokens;
  std::vector<Span> windows;  // where each row came from, in Corpus::tokens (tests and provenance)
  int64_t target_bytes = 0;   // held-out batches: the bytes of text their predicted tokens stand for
};

// Bytes of text per predicted token over held-out batches: loss ÷ (ln 2 × this) is bits per byte.
double bytes_per_predicted_token(const std::vector<Batch>& heldout);

class DataCursor {
 public:
  // Spans (into `tokens`) shorter than seq_len + 1 are never sampled.
  DataCursor(std::shared_ptr<const std::vector<Token>> tokens, std::vector<Span> shard, int batch_size,
             int seq_len, uint64_t seed, int learner, uint64_t position = 0);

  Batch next();
  Batch at(uint64_t position) const;  // the batch `next()` returns at that position
  uint64_t position() const { return position_; }
  bool empty() const { return total_weight_ == 0; }

 private:
  std::shared_ptr<const std::vector<Token>> tokens_;
  std::vector<Span> spans_;           // usable spans only
  std::vector<int64_t> cumulative_;   // cumulative count of window starts per span
  int64_t total_weight_ = 0;
  int batch_size_;
  int seq_len_;
  uint64_t seed_;
  int learner_;
  uint64_t position_;
};

// Deterministic held-out batches: evenly spaced windows over the held-out spans of corpus.tokens,
// each with the bytes its targets stand for.
std::vector<Batch> heldout_batches(const Corpus& corpus, const std::vector<Span>& heldout,
                                   int batches, int batch_size, int seq_len);

}  // namespace archipelago::training

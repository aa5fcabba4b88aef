// Corpus, held-out split, per-learner shards and resumable data cursors.
//
// The corpus is one byte string (tokens = bytes) cut into documents (a book of the Bible, a file).
// A `Split` assigns every byte to training or held-out, never both; shards give each learner a
// disjoint part of the training bytes. A `DataCursor` samples batches as a pure function of
// (seed, learner, position), so a restarted learner resumes exactly where its cursor says.
// Loading touches the filesystem (and may run `bible`); everything else is pure and thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "training/options.hpp"

namespace archipelago::training {

struct Span {
  int64_t begin = 0;  // byte offset into Corpus::text, inclusive
  int64_t end = 0;    // exclusive
  int64_t size() const { return end - begin; }
};

struct Document {
  std::string name;
  Span span;
};

struct Corpus {
  std::string text;
  std::vector<Document> documents;
};

// "kjv": the King James Bible from Debian's bible-kjv, cached as <cache_dir>/kjv.txt.
// Otherwise a UTF-8 text file (one document) or a directory (each regular file, recursively, in
// sorted order, is one document).
Expected<Corpus> load_corpus(const DataOptions& options);

// Cuts the output of `bible -f` ("Ge1:1 In the beginning...") into one document per book.
Corpus parse_kjv(std::string text);

struct Split {
  std::vector<Span> train;    // sorted, disjoint
  std::vector<Span> heldout;  // sorted, disjoint, never overlapping `train`
};

// "tail": the last `fraction` of every document is held out. "documents": the last documents
// (about `fraction` of all bytes) are held out whole.
Expected<Split> split_corpus(const Corpus& corpus, const std::string& kind, double fraction);

// One shard of training spans per learner. "iid": training bytes are cut into chunks of
// `chunk_bytes`, shuffled with `seed` and dealt round-robin. "noniid": each learner receives a
// contiguous run of whole documents (about equal bytes), so learners see different distributions.
Expected<std::vector<std::vector<Span>>> make_shards(const Corpus& corpus, const Split& split,
                                                     const std::string& kind, int learners,
                                                     int64_t chunk_bytes, uint64_t seed);

// B sequences of T+1 tokens, row-major; inputs are [:, :T], targets [:, 1:].
struct Batch {
  int batch_size = 0;
  int seq_len = 0;
  std::vector<uint8_t> tokens;
  std::vector<Span> windows;  // where each row came from (for tests and provenance)
};

class DataCursor {
 public:
  // `text` must outlive the cursor. Spans shorter than seq_len + 1 are never sampled.
  DataCursor(std::shared_ptr<const std::string> text, std::vector<Span> shard, int batch_size,
             int seq_len, uint64_t seed, int learner, uint64_t position = 0);

  Batch next();
  Batch at(uint64_t position) const;  // the batch `next()` returns at that position
  uint64_t position() const { return position_; }
  bool empty() const { return total_weight_ == 0; }

 private:
  std::shared_ptr<const std::string> text_;
  std::vector<Span> spans_;           // usable spans only
  std::vector<int64_t> cumulative_;   // cumulative count of window starts per span
  int64_t total_weight_ = 0;
  int batch_size_;
  int seq_len_;
  uint64_t seed_;
  int learner_;
  uint64_t position_;
};

// Deterministic held-out batches: evenly spaced windows over the held-out spans.
std::vector<Batch> heldout_batches(const std::string& text, const std::vector<Span>& heldout,
                                   int batches, int batch_size, int seq_len);

}  // namespace archipelago::training

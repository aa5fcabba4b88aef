// Tokenizer, corpus, held-out split, shards and data cursors.
#include <algorithm>
#include <fstream>
#include <random>

#include <doctest/doctest.h>

#include "test_corpus.hpp"
#include "training/tokenizer.hpp"

using namespace archipelago::training;

namespace {

// Total bytes covered by a set of spans, and whether any two overlap.
struct Coverage {
  int64_t bytes = 0;
  bool overlapping = false;
};

Coverage coverage(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.begin < b.begin; });
  Coverage c;
  for (size_t i = 0; i < spans.size(); ++i) {
    c.bytes += spans[i].size();
    if (i > 0 && spans[i].begin < spans[i - 1].end) c.overlapping = true;
  }
  return c;
}

bool inside(const Span& window, const std::vector<Span>& spans) {
  return std::any_of(spans.begin(), spans.end(),
                     [&](const Span& s) { return window.begin >= s.begin && window.end <= s.end; });
}

bool intersects(const Span& a, const std::vector<Span>& spans) {
  return std::any_of(spans.begin(), spans.end(), [&](const Span& s) { return a.begin < s.end && s.begin < a.end; });
}

}  // namespace

TEST_CASE("byte tokenizer round-trips arbitrary bytes") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::string bytes(rng() % 4096, '\0');
    for (auto& b : bytes) b = static_cast<char>(rng() & 0xff);  // includes NUL and invalid UTF-8
    const Tokenizer bytes_tokenizer;
    auto tokens = bytes_tokenizer.encode(bytes);
    CHECK(tokens.size() == bytes.size());
    CHECK(std::all_of(tokens.begin(), tokens.end(), [](Token t) { return t >= 0 && t < kByteVocabulary; }));
    CHECK(bytes_tokenizer.decode(tokens) == bytes);
    CHECK(bytes_tokenizer.bytes_of(tokens.data(), tokens.data() + tokens.size()) == static_cast<int64_t>(bytes.size()));
  }
}

TEST_CASE("the KJV corpus is cut into its 66 books") {
  auto corpus = testing::kjv();
  CHECK(corpus->text.size() > 4000000);
  REQUIRE(corpus->documents.size() == 66);
  CHECK(corpus->documents.front().name == "Ge");
  CHECK(corpus->documents.back().name == "Rev");
  CHECK(corpus->text.compare(corpus->documents[8].bytes.begin, 3, "1Sm") == 0);
}

TEST_CASE("held-out split and shards are disjoint, cover the training bytes, and never touch held-out") {
  auto corpus = testing::kjv();
  for (std::string split_kind : {"tail", "documents"}) {
    auto split = split_corpus(*corpus, split_kind, 0.05);
    REQUIRE(split.ok());
    auto train = coverage(split->train);
    auto held = coverage(split->heldout);
    CHECK(train.bytes + held.bytes == static_cast<int64_t>(corpus->text.size()));
    CHECK(held.bytes == doctest::Approx(0.05 * corpus->text.size()).epsilon(0.05));
    for (const auto& h : split->heldout) CHECK_FALSE(intersects(h, split->train));

    for (std::string sharding : {"iid", "noniid"}) {
      CAPTURE(split_kind);
      CAPTURE(sharding);
      auto shards = make_shards(*corpus, *split, sharding, 4, 4096, 3);
      REQUIRE(shards.ok());
      std::vector<Span> all;
      for (const auto& shard : *shards) {
        CHECK_FALSE(shard.empty());
        all.insert(all.end(), shard.begin(), shard.end());
        for (const auto& s : shard) CHECK_FALSE(intersects(s, split->heldout));
      }
      auto shard_coverage = coverage(all);
      CHECK_FALSE(shard_coverage.overlapping);
      CHECK(shard_coverage.bytes == train.bytes);
    }
  }
}

TEST_CASE("noniid shards give each learner different books") {
  auto corpus = testing::kjv();
  auto split = split_corpus(*corpus, "tail", 0.05);
  auto shards = make_shards(*corpus, *split, "noniid", 4, 4096, 3);
  REQUIRE(shards.ok());
  // Contiguous runs of books: learner 0 starts with Genesis, learner 3 ends with Revelation.
  CHECK((*shards)[0].front().begin == corpus->documents.front().tokens.begin);
  CHECK((*shards)[3].back().end > corpus->documents.back().tokens.begin);
  for (int m = 1; m < 4; ++m) CHECK((*shards)[m].front().begin > (*shards)[m - 1].back().begin);
}

TEST_CASE("data cursors sample only their own shard, deterministically and resumably") {
  auto corpus = testing::kjv();
  auto split = split_corpus(*corpus, "tail", 0.05);
  auto shards = make_shards(*corpus, *split, "iid", 3, 4096, 11);
  REQUIRE(shards.ok());
  auto text = std::shared_ptr<const std::vector<Token>>(corpus, &corpus->tokens);
  for (int m = 0; m < 3; ++m) {
    DataCursor cursor(text, (*shards)[m], 8, 64, 5, m);
    for (int i = 0; i < 50; ++i) {
      auto batch = cursor.next();
      REQUIRE(batch.tokens.size() == 8u * 65);
      for (int row = 0; row < 8; ++row) {
        const Span& w = batch.windows[row];
        CHECK(inside(w, (*shards)[m]));
        CHECK_FALSE(intersects(w, split->heldout));
        CHECK(std::equal(batch.tokens.begin() + row * 65, batch.tokens.begin() + (row + 1) * 65,
                         corpus->tokens.begin() + w.begin));
      }
    }
    DataCursor resumed(text, (*shards)[m], 8, 64, 5, m, 37);
    CHECK(resumed.next().tokens == cursor.at(37).tokens);
    DataCursor other_learner(text, (*shards)[m], 8, 64, 5, m + 1, 37);
    CHECK(other_learner.next().tokens != cursor.at(37).tokens);
  }
}

TEST_CASE("a file or directory corpus loads, bad paths and options are rejected with the key named") {
  auto dir = std::filesystem::temp_directory_path() / "archipelago-corpus-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "sub");
  { std::ofstream(dir / "a.txt") << std::string(3000, 'a'); }
  { std::ofstream(dir / "sub" / "b.txt") << std::string(2000, 'b'); }
  DataOptions options;
  options.corpus = dir.string();
  auto corpus = load_corpus(options);
  REQUIRE(corpus.ok());
  CHECK(corpus->documents.size() == 2);
  CHECK(corpus->text.size() == 5000);
  auto split = split_corpus(*corpus, "tail", 0.1);
  REQUIRE(split.ok());
  auto shards = make_shards(*corpus, *split, "noniid", 4, 512, 1);  // fewer documents than learners
  REQUIRE(shards.ok());
  for (const auto& shard : *shards) CHECK_FALSE(shard.empty());

  options.corpus = (dir / "missing").string();
  auto missing = load_corpus(options);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().reason.find("data.corpus") != std::string::npos);
  CHECK_FALSE(split_corpus(*corpus, "sideways", 0.1).ok());
  CHECK_FALSE(split_corpus(*corpus, "tail", 1.5).ok());
  CHECK(make_shards(*corpus, *split, "random", 2, 512, 1).error().reason.find("data.sharding") != std::string::npos);
  std::filesystem::remove_all(dir);
}

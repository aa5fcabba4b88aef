// The default corpus for tests, cached in a per-user temporary directory.
#pragma once

#include <filesystem>
#include <memory>

#include <doctest/doctest.h>

#include "training/corpus.hpp"

namespace archipelago::training::testing {

inline std::shared_ptr<const Corpus> kjv() {
  static std::shared_ptr<const Corpus> corpus = [] {
    DataOptions options;
    options.cache_dir = (std::filesystem::temp_directory_path() / "archipelago-test-data").string();
    auto loaded = load_corpus(options);
    REQUIRE_MESSAGE(loaded.ok(), (loaded.ok() ? "" : loaded.error().to_string()));
    return std::make_shared<const Corpus>(std::move(*loaded));
  }();
  return corpus;
}

}  // namespace archipelago::training::testing

// `archipelago sample`: text from a committed version of a run.
//
//   archipelago sample --run-dir R [--version V] [--prompt TEXT] [--tokens N] [--temperature T]
//                      [--top-k K] [--top-p P] [--seed S] [--no-cache] [--json]
//
// It loads the version with every blob's checksum verified (apps/committed_model.hpp) and prints
// the prompt, then each token as it is drawn (training::Replica::generate: a KV cache, seeded
// draws, so one seed prints the same text every time). `train` prints a short sample of its final
// version the same way (sample_final_version).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "training/sampling.hpp"

namespace archipelago::apps {

struct SampleArguments {
  std::string run_dir;
  std::optional<uint64_t> version;    // none: the latest committed version
  std::string prompt;                 // empty: one newline
  training::SamplingOptions sampling;
  bool json = false;                  // a one-line JSON summary as the last line of stdout
};

// 0 on success; 2 for bad input (no run directory, no such version, an option out of range); 1 when
// the store cannot be read or the version does not verify.
int run_sample(const SampleArguments& arguments);

// What `train` prints under its summary: `tokens` tokens of `version` after `prompt` (seed 0,
// temperature 0.8), as JSON {version, prompt, text, seed, temperature, tokens, seconds}; an error
// when the version cannot be loaded. `text` is valid UTF-8 (a byte that is not becomes U+FFFD).
Expected<nlohmann::json> sample_final_version(const std::string& run_dir, uint64_t version, const std::string& prompt,
                                              int64_t tokens);

}  // namespace archipelago::apps

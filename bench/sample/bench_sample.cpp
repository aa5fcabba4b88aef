// Text generation's speed: `Replica::generate` with the KV cache against the same draws without it
// (each token runs the newest seq_len tokens whole), in the same run, on one model.
//
//   bench_sample [--preset small] [--tokens 256] [--repeats 3] [--threads 1] [--out FILE.jsonl]
//
// The weights are the preset's initialization (seed 1): the time of a forward pass does not depend
// on what the weights are. Each repeat runs both ways with the same seed; the figures are the
// medians. One JSON line per run goes to --out (and stdout).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "training/replica.hpp"

using namespace archipelago::training;

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "small", out;
  int64_t tokens = 256;
  int repeats = 3, threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--preset") preset = value;
    else if (flag == "--tokens") tokens = std::stoll(value);
    else if (flag == "--repeats") repeats = std::stoi(value);
    else if (flag == "--threads") threads = std::stoi(value);
    else if (flag == "--out") out = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  set_compute_threads(threads);
  auto model = model_preset(preset);
  if (!model) {
    std::fprintf(stderr, "%s\n", model.error().reason.c_str());
    return 2;
  }
  auto replica = Replica::create(*model, InnerOptions{}, "cpu", 1);
  if (!replica) {
    std::fprintf(stderr, "%s\n", replica.error().reason.c_str());
    return 1;
  }
  const std::vector<int32_t> prompt = {84, 104, 101, 32};  // "The "
  std::vector<double> cached_s, full_s;
  bool same_text = true;
  for (int r = 0; r < repeats; ++r) {
    SamplingOptions options;
    options.tokens = tokens;
    options.seed = static_cast<uint64_t>(r);
    auto time = [&](bool kv_cache, std::vector<int32_t>& text) {
      options.kv_cache = kv_cache;
      const auto start = std::chrono::steady_clock::now();
      text = (*replica)->generate(prompt, options);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    std::vector<int32_t> with, without;
    cached_s.push_back(time(true, with));
    full_s.push_back(time(false, without));
    // Within the context the two draw the same tokens (same logits up to float rounding, same seed).
    const size_t window = std::min<size_t>(with.size(), static_cast<size_t>(model->seq_len) - prompt.size());
    same_text = same_text && std::equal(with.begin(), with.begin() + window, without.begin());
  }
  const double cached = median(cached_s), full = median(full_s);
  nlohmann::json row = {{"preset", preset},
                        {"parameters", (*replica)->parameter_count()},
                        {"seq_len", model->seq_len},
                        {"tokens", tokens},
                        {"threads", threads},
                        {"repeats", repeats},
                        {"kv_cache_s", cached},
                        {"full_context_s", full},
                        {"speedup", full / cached},
                        {"kv_cache_tokens_per_s", tokens / cached},
                        {"same_tokens_within_context", same_text},
                        {"kv_cache_runs_s", cached_s},
                        {"full_context_runs_s", full_s}};
  std::printf("%s\n", row.dump().c_str());
  if (!out.empty()) std::ofstream(out, std::ios::app) << row.dump() << "\n";
  return 0;
}

// `archipelago eval`: the loss and bits per byte of a committed version or an export on any text
// file (a corpus nobody trained on, or checkpoints compared on the same text).
//
//   archipelago eval (--run-dir R [--version V] | --export DIR) --text FILE [--max-bytes N]
//   (a sharded run: --run-dir and --version once per shard)
//                    [--batch-size B] [--json]
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace archipelago::apps {

struct EvalArguments {
  std::vector<std::string> run_dirs;  // a run's committed version (a sharded run: every shard's directory) ...
  std::vector<uint64_t> versions;     // (one per run directory; none: the latest of each)
  std::string export_dir;             // ... or an export directory
  std::string text;                   // the text file to score
  int64_t max_bytes = 0;              // score only its first N bytes (0: all)
  int batch_size = 16;
  bool json = false;
};

// 0 on success; 2 for bad input (no or both sources, no text file, an empty one, not a run or not an
// export, no such version); 1 when a version does not verify.
int run_eval(const EvalArguments& arguments);

}  // namespace archipelago::apps

// `archipelago eval`: the loss and bits per byte of a committed version or an export on any text
// file (a corpus nobody trained on, or checkpoints compared on the same text).
//
//   archipelago eval (--run-dir R [--version V] | --export DIR) --text FILE [--max-bytes N]
//   (a sharded run: --run-dir and --version once per shard)
//                    [--batch-size B] [--json]
//   archipelago eval --run-dir R... --follow [--every S] [--for S] --text FILE ...
//   (a live run, sharded or not: its stores are followed read-only while it trains, and the model
//   assembled from every shard's latest committed version is scored each time one changes)
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
  bool follow = false;                // follow a live run (--run-dir only)
  double every_s = 10;                // ... checking its stores this often
  double for_s = 0;                   // ... for this long (0: until SIGINT or SIGTERM)
};

// 0 on success; 2 for bad input (no or both sources, no text file, an empty one, not a run or not an
// export, no such version, --follow with --export or --version); 1 when a version does not verify,
// or when --follow scored no version before it stopped.
int run_eval(const EvalArguments& arguments);

}  // namespace archipelago::apps

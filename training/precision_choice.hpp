// inner.precision = "auto" chosen by measurement: a few steps of the run's model in fp32 and in
// bf16, on the threads a learner will have, and the faster wins. CPU flags alone do not say it:
// an emulated bf16 step is ~35x slower than fp32 on a CPU without bf16 matmuls, and the split of
// threads and the allocator move both (bench/training/README.md). The result is kept per CPU model,
// model shape, batch and thread count in a small JSON file, so a machine measures a shape once.
// Any thread; it sets the process's compute threads while it measures.
#pragma once

#include <string>

#include "training/options.hpp"

namespace archipelago::training {

// <$XDG_CACHE_HOME or $HOME/.cache>/archipelago/precision.json; empty when neither is set.
std::string default_precision_cache();

struct PrecisionProbe {
  ModelConfig model;
  InnerOptions inner;           // inner.precision: "auto" is measured, anything else is taken as set
  std::string device = "cpu";
  int threads = 1;              // one learner's compute threads (set_compute_threads)
  int probe_sequences = 2;      // sequences per timed step (at most inner.batch_size)
  std::string cache_file = default_precision_cache();  // where results are kept; empty: nowhere
};

struct PrecisionChoice {
  std::string precision = "fp32";  // "fp32" or "bf16"
  std::string setting = "auto";    // inner.precision as configured
  std::string how;                 // "set", "cuda", "measured" or "cached"
  double fp32_step_s = 0;          // the timed step of each precision (0: not timed)
  double bf16_step_s = 0;
  bool bf16_cut_short = false;     // bf16's warm-up step was already far slower than fp32's step: not timed further
  std::string message;             // one line for the log
};

// The precision to train in. A configured "fp32" or "bf16" is returned as set; "auto" on CUDA is fp32
// (set bf16 explicitly on Ampere or newer); "auto" on a CPU is the faster of the two over a warm-up
// and a timed step each of `probe_sequences` sequences, or the cached result of the same key. A
// cache that cannot be read or written is ignored (said in the message), never fatal.
PrecisionChoice choose_precision(const PrecisionProbe& probe);

}  // namespace archipelago::training

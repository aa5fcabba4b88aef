// Plain option structs for the training core: model shape, inner and outer optimizers, data, run.
//
// These are the in-memory form of config/default.toml (apps/ maps TOML keys onto them and validates
// ranges). They carry no torch types so that actors, storage and tests can include them cheaply.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "diloco/mode.hpp"

namespace archipelago::training {

struct ModelConfig {
  std::string preset = "small";
  int vocab = 256;          // the tokenizer's vocabulary (256: byte-level); set from data.tokenizer
  int d_model = 256;
  int layers = 4;
  int heads = 4;
  int seq_len = 128;        // context length in tokens
  std::string mlp = "swiglu";  // swiglu | gelu
  double z_loss = 1e-4;     // weight of the log(Z)^2 term that keeps logits from drifting
  // An export directory (archipelago export) whose weights replace the random initialization:
  // version 1 of an actors run, every replica of the reference engine. Empty: random (train.seed).
  std::string init_from;
};

// Presets: `tiny` (tests, trains in seconds), `small` (~3.3 M params at 256 tokens, ~5.3 M at 8192;
// default), `base` (~25 M params at 256 tokens). The embedding grows with data.tokenizer's vocabulary.
Expected<ModelConfig> model_preset(const std::string& name);

struct InnerOptions {
  double lr = 3e-3;             // peak AdamW learning rate
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.1;
  double eps = 1e-8;
  int warmup_steps = 100;
  int64_t total_steps = 0;      // length of the cosine schedule; 0 = derive from train.max_tokens
  // With total_steps 0 and no token budget: true, the cosine runs over train.max_seconds of wall
  // time (scheduled_learning_rate's budget_spent); false, the rate stays at the peak after warm-up.
  bool decay_over_time = false;
  double min_lr_fraction = 0.05;  // cosine decays to this fraction of the peak
  double clip_norm = 1.0;       // global gradient norm clipping
  int batch_size = 16;          // sequences per inner step and learner
  std::string precision = "fp32";  // fp32 | bf16 (autocast)
};

struct OuterOptions {
  std::string optimizer = "auto";      // auto (async: delayed_nesterov, else nesterov) | nesterov | delayed_nesterov
  double lr = 0.7;
  double momentum = 0.9;
  int momentum_warmup = 0;               // outer steps per fragment over which momentum ramps up to `momentum`
  std::string merge = "token_weighted";  // mean | token_weighted | rda
  int fragments = 1;                     // P
  std::string fragment_layout = "balanced";  // balanced | strided
  int quorum = 1;                        // K (used by the actor runtime)
  std::string codec = "fp32";            // uplink: fp32 | bf16 | int8 | int4 (used by the actor runtime)
  std::string downlink_codec = "fp32";   // downlink (broadcast deltas): fp32 | bf16 | int8 | int4 (actor runtime)
  int delayed_every = 4;                 // N of Delayed Nesterov
  int merge_threads = 0;                 // threads of the syncer's passes over a fragment (0: the hardware's, at most 8)
  // Screening (actor runtime): an update's ‖Δ‖ against the median of the learners' latest honest ‖Δ‖ of its fragment.
  std::string screen = "refuse";         // none | clip | refuse
  double screen_clip = 16.0;             // past this many medians an update is scaled down to it
  double screen_refuse = 64.0;          // refuse: past this many medians it is refused as `outlier`
  // Bounds that hold whatever the medians say (before any is known, and for a run of 1 or 2 learners):
  double screen_probation = 1.0;        // a learner's first update of a fragment: clipped past this many medians
  double screen_max_ratio = 8.0;        // every update's ‖Δ_p‖ at most this × ‖θ_p‖ (clipped down to it)
  double max_norm_growth = 8.0;         // a merge that makes ‖θ_p‖ grow by more than this factor is dropped
};

struct DataOptions {
  std::string corpus = "kjv";          // "kjv" (Debian bible-kjv) or a path to a file or directory
  std::string tokenizer = "bytes";     // "bytes" | "spm:FILE" (a SentencePiece model, archipelago tokenizer train)
  std::string split = "tail";          // tail: last fraction of every document | documents: last documents
  double heldout_fraction = 0.05;
  std::string sharding = "iid";        // iid | noniid
  int64_t chunk_bytes = 4096;          // iid shards deal out chunks of this many bytes
  std::string cache_dir = "archipelago-runs/data";
  int eval_batches = 8;                // held-out batches per evaluation
};

struct RunOptions {
  diloco::Mode mode = diloco::Mode::sync;  // sync | decoupled | async | ddp (diloco/mode.hpp)
  int learners = 4;              // M
  int inner_steps = 50;          // H
  int64_t max_tokens = 0;        // stop after this many training tokens (all learners), 0 = unbounded
  double max_seconds = 0;        // stop after this wall time, 0 = unbounded
  uint64_t seed = 1;
  std::string device = "cpu";    // cpu | cuda | cuda:N
  int threads = 0;               // LibTorch intra-op threads, 0 = all cores
  int eval_every = 1;            // evaluate the global model every N outer rounds (ddp: N*H steps)
};

// The learning rate's cosine runs over the wall-time budget (scheduled_learning_rate's budget_spent):
// inner.decay_over_time in a run bounded by time only, with no cosine length in steps.
inline bool decays_over_time(const InnerOptions& inner, const RunOptions& run) {
  return inner.decay_over_time && inner.total_steps <= 0 && run.max_tokens <= 0 && run.max_seconds > 0;
}

}  // namespace archipelago::training

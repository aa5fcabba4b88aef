// A learner's own checkpoint: the work it has not yet sent, and its AdamW state, in one local file.
//
// A killed learner loses every inner step not yet merged into a committed global version; with H
// steps per fragment period that is H/2 steps per fragment on average. The learner therefore saves,
// every `runtime.learner_checkpoint_every` steps, what a restarted incarnation needs to continue:
//   - per fragment: the unsent work u_p = θ_local,p − θ_ref,p (θ_ref: the global it last installed, or
//     its own θ_p when it last sent an update) with the step it began at and the step, token, loss
//     and compute-time counters of that work. An update sent after the checkpoint already carried
//     u_p: the syncer's Welcome says how far it has each fragment's work (`receivedUntil`), and u_p is dropped then;
//   - AdamW's moments and step counters (flat, parameter order), so no warmup is redone.
// It never saves θ itself: a restarted learner fetches the latest committed global θ_G and continues
// from θ_G,p + u_p, so a checkpoint older than the newest version loses nothing committed since.
//
// File: "<dir>/<learner-id>.ckpt", little-endian, an XXH3-64 checksum over everything before it. It is
// written by write_file_atomically (common/files.hpp): aside and renamed, so the visible name never
// holds a partial file; `sync` adds an fdatasync (without it the file survives a process kill, not a
// power loss). Loading checks the
// checksum, the layout (parameter count, fragment sizes) and that every value is finite; a bad file is
// refused with the reason and the learner starts from the global model alone. Pure; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "training/replica.hpp"

namespace archipelago::actors {

struct LearnerCheckpoint {
  struct Fragment {
    uint64_t version = 0;       // the global version the work is based on (informational)
    int64_t since_step = 0;     // the learner's step when this work began (its last update or install)
    int64_t steps = 0;          // inner steps in `unsent`
    int64_t tokens = 0;
    double loss_sum = 0;        // sum of the training losses of those steps
    double compute_s = 0;       // their compute time × the fragment's share (the goodput ledger)
    std::vector<float> unsent;  // θ_local,p − θ_ref,p, in the fragment's gather order
  };
  int64_t step = 0;             // the learner's inner step (data position) when saved
  int incarnation = 0;
  training::OptimizerState optimizer;
  std::vector<Fragment> fragments;
};

std::string learner_checkpoint_path(const std::string& directory, const std::string& learner_id);

Status save_learner_checkpoint(const std::string& path, const LearnerCheckpoint& checkpoint, bool sync);

// `fragment_sizes`: numel of each fragment of this run's layout; `parameter_count`: their sum.
Expected<LearnerCheckpoint> load_learner_checkpoint(const std::string& path, int64_t parameter_count,
                                                    const std::vector<int64_t>& fragment_sizes);

}  // namespace archipelago::actors

// A model replica with its own AdamW state: what one learner trains, without torch in the header.
//
// Parameters live in one contiguous fp32 buffer on the replica's device (flat view), so fragments
// and whole models move in and out as float ranges. Inner steps follow InnerOptions: AdamW
// β=(0.9, 0.99), decoupled weight decay on matrices only, linear warmup then cosine decay to
// `min_lr_fraction` of the peak, global-norm clipping, optional bf16 autocast.
// A Replica is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "training/corpus.hpp"
#include "training/fragments.hpp"
#include "training/options.hpp"
#include "training/sampling.hpp"

namespace archipelago::training {

struct StepStats {
  double loss = 0;           // cross-entropy + z-loss (what was minimized)
  double cross_entropy = 0;  // reported training loss
  double grad_norm = 0;      // before clipping
  double lr = 0;
  int64_t tokens = 0;
};

// Learning rate at inner step `step` (0-based): warmup, then cosine to min_lr_fraction · lr over
// total_steps. With total_steps == 0 the cosine runs over `budget_spent` instead, the fraction of
// the run's wall-time budget spent (0..1; a run bounded by time only, inner.decay_over_time), and
// the rate stays at its peak after warmup when that is negative (no budget to decay over).
double scheduled_learning_rate(const InnerOptions& options, int64_t step, double budget_spent = -1);

// AdamW's state, flat in the replica's parameter order (what a learner checkpoint saves).
struct OptimizerState {
  int64_t schedule_steps = 0;     // inner steps taken: position in the learning-rate schedule
  int64_t adam_steps = 0;         // AdamW's bias-correction step count (0: no moments yet)
  std::vector<float> exp_avg;     // first moments (empty when adam_steps == 0)
  std::vector<float> exp_avg_sq;  // second moments
};

// A state dict (parameter name -> tensor, in `parameters`' order) of the flat parameters as the bytes
// of a file `torch.load` opens (LibTorch's torch::pickle_save), fp32 or rounded to bf16.
std::vector<char> torch_saved_state_dict(const std::vector<ParameterInfo>& parameters, const std::vector<float>& flat,
                                         bool bf16);

class Replica {
 public:
  // Builds the model with weights drawn from `seed` (same seed → same weights) on `device`.
  static Expected<std::unique_ptr<Replica>> create(const ModelConfig& model, const InnerOptions& inner,
                                                   const std::string& device, uint64_t seed);
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // One AdamW step on one batch.
  StepStats step(const Batch& batch);
  // Data-parallel step: gradients averaged over `batches` (one per learner), then one AdamW step.
  StepStats step_averaged(const std::vector<Batch>& batches);
  // Data-parallel step of one worker of a process group: the gradient of `batch`, flat in
  // parameter order with the step's loss and cross-entropy appended (count = parameters + 2), goes
  // to `all_reduce`, which must leave there the mean over every worker's (every worker then holds
  // the same gradient); then clipping and one AdamW step. The stats report the means.
  StepStats step_reduced(const Batch& batch, const std::function<void(float* values, int64_t count)>& all_reduce);
  // Mean cross-entropy over the batches, without gradients.
  double evaluate(const std::vector<Batch>& batches);
  // Logits (T × V, row-major) for one sequence, for inspection and tests.
  std::vector<float> logits(const std::vector<Token>& tokens);
  // The logits of the same sequence fed through a KV cache: the first `prefill` tokens at once, then
  // one at a time (tests: equal to `logits`).
  std::vector<float> logits_incremental(const std::vector<Token>& tokens, int64_t prefill);
  // Continues `prompt` (at least one token) by options.tokens tokens drawn with draw_token, calling
  // `emit` with each as it is drawn. With the KV cache each token costs one position's pass; when
  // the context reaches seq_len the cache restarts from the newest seq_len / 2 tokens (the learned
  // positions end there). Without it, each token runs the newest seq_len tokens whole.
  std::vector<int32_t> generate(const std::vector<int32_t>& prompt, const SamplingOptions& options,
                                const std::function<void(int32_t)>& emit = {});

  const ModelConfig& model_config() const;
  const std::vector<ParameterInfo>& parameters() const;
  int64_t parameter_count() const;
  int64_t steps_taken() const;
  // Moves the learning-rate schedule to `steps` (a restarted learner continues its schedule).
  void set_steps_taken(int64_t steps);
  // The fraction of the run's wall-time budget spent, for the next steps' learning rate
  // (scheduled_learning_rate's budget_spent; negative: none, the default).
  void set_budget_spent(double fraction);

  // AdamW moments and step counters, host side; import refuses a state of another size.
  OptimizerState export_optimizer_state() const;
  Status import_optimizer_state(const OptimizerState& state);

  // Whole flat parameter vector, host side.
  std::vector<float> read_parameters() const;
  void write_parameters(const std::vector<float>& values);
  void read_range(int64_t offset, int64_t count, float* out) const;
  void write_range(int64_t offset, int64_t count, const float* in);

 private:
  struct Impl;
  explicit Replica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The precision a replica on `device` trains in, "fp32" or "bf16", for inner.precision `precision`,
// without measuring: "auto" is bf16 on a CPU with AVX512-BF16 or AMX-BF16 and fp32 elsewhere, CUDA
// included. A run resolves "auto" by measurement first (training/precision_choice.hpp) and hands
// replicas the result; this rule serves what did not (benchmarks, tests). Held-out loss is always
// evaluated in fp32, whatever the training precision.
std::string resolve_precision(const std::string& precision, const std::string& device);

// Gives one replica's compute `threads` (0 = all cores) for training in `precision` ("fp32" or
// "bf16", resolved) and returns that number. With OpenBLAS (Debian's LibTorch), fp32 matrix products
// run in OpenBLAS's own pool and LibTorch's intra-op pool is another: on the same cores the two spin
// against each other (bench/training/README.md, "Threads": LibTorch 2 + OpenBLAS 2 ran the small
// model's step at 0.6x LibTorch 1 + OpenBLAS 2). So fp32 gets OpenBLAS `threads` and LibTorch 1;
// bf16, whose products LibTorch runs itself (oneDNN), gets LibTorch `threads` and OpenBLAS 1.
// Without OpenBLAS (MKL, a CUDA LibTorch) LibTorch gets them all.
int set_compute_threads(int threads, const std::string& precision = "fp32");

}  // namespace archipelago::training

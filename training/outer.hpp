// Outer optimizers and merge rules on pseudo-gradients (DiLoCo family, see ALGORITHMS.md).
//
// A pseudo-gradient is Δ = θ_global − θ_local for one fragment. Merge rules combine the Δ of
// several learners into one; an outer optimizer applies the merged Δ to the global fragment.
// Everything works on plain float arrays (no torch), one instance per fragment, so that the syncer
// can be sharded by fragment. Instances are not thread-safe; the merge functions are pure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace archipelago::training {

// out[i] = global[i] - local[i]
void pseudo_gradient(const float* global, const float* local, int64_t n, float* out);

struct Contribution {
  const float* delta = nullptr;  // n values
  int64_t tokens = 0;            // tokens the learner trained on for this Δ
  int64_t steps = 0;             // inner steps behind this Δ
};

enum class MergeRule { mean, token_weighted, rda };
Expected<MergeRule> parse_merge_rule(const std::string& name);

// Per-contribution weights: mean → 1; token_weighted and rda → tokens · (tokens / steps)
// ("quantity × quality"). Weights are not normalized.
double merge_weight(int64_t tokens, int64_t steps, MergeRule rule);
std::vector<double> merge_weights(const std::vector<Contribution>& contributions, MergeRule rule);

// ‖x‖₂ over n values, accumulated in fp64, over `threads` threads (common/parallel.hpp).
double l2_norm(const float* x, int64_t n, int threads = 1);

// mean / token_weighted: Σ w_m Δ_m / Σ w_m.
// rda (radial-directional averaging): (Σ w‖Δ_m‖ / Σ w) · normalize(Σ w Δ_m/‖Δ_m‖): the merged
// norm is the weighted mean of the norms, so nearly orthogonal Δ do not shrink like 1/√M.
// Fails on an empty list or weights that sum to zero.
Expected<std::vector<float>> merge(const std::vector<Contribution>& contributions, int64_t n, MergeRule rule);

// The same merge, folded one contribution at a time as updates arrive (the syncer's streaming
// merge): it holds one fp32 running sum of n values and three scalars, never the contributions, so
// a round costs O(n) memory whatever the number of learners, and closing it costs one pass.
//   mean / token_weighted: S = Σ w_m Δ_m,          result S / Σ w
//   rda:                   S = Σ (w_m/‖Δ_m‖) Δ_m,  result (Σ w‖Δ‖ / Σ w) · S/‖S‖
// add() is a multi-threaded pass over the fragment. fp32
// sums: a fold adds one rounding of ~6e-8 relative per contribution (the batch merge sums in fp64);
// tests/training/outer_test.cpp holds the two to 1e-6 in every arrival order.
class MergeAccumulator {
 public:
  MergeAccumulator() = default;
  MergeAccumulator(int64_t n, MergeRule rule, int threads = 1) : n_(n), rule_(rule), threads_(threads) {}

  // Folds Δ (n values) with weight `weight` (merge_weight) and its norm ‖Δ‖ (l2_norm; rda only).
  void add(const float* delta, double weight, double norm);
  // The same for a caller that adds factor · Δ into `sum` itself (a decode fused with the fold):
  // counts the contribution and returns the factor (0: nothing to add, a zero rda Δ).
  float add_external(double weight, double norm, float** sum);
  // Σ w Δ / Σ w (or rda's); fails on no contributions or weights that sum to zero, as merge().
  Expected<std::vector<float>> result() const;

  // An empty accumulator of the same size, rule and threads.
  MergeAccumulator fresh() const { return MergeAccumulator(n_, rule_, threads_); }
  int64_t count() const { return count_; }
  bool empty() const { return count_ == 0; }
  // Bytes held: the running sum (allocated at the first add).
  int64_t bytes() const { return static_cast<int64_t>(sum_.size() * sizeof(float)); }

 private:
  int64_t n_ = 0;
  MergeRule rule_ = MergeRule::mean;
  int threads_ = 1;
  std::vector<float> sum_;
  double weight_sum_ = 0;
  double norm_sum_ = 0;  // rda: Σ w‖Δ‖
  int64_t count_ = 0;
};

// The whole state of one fragment's outer optimizer, as a value: copying it is a snapshot, and a
// syncer stages a new one per commit (actors/fragment_state.hpp). Plain Nesterov uses `momentum`
// only; Delayed Nesterov also keeps the arrivals since its last momentum update and their sum.
struct OuterState {
  std::vector<float> momentum;     // m (n values)
  std::vector<float> accumulated;  // Delayed Nesterov: Σ Δ since the last momentum update (n values)
  int64_t arrivals = 0;            // Delayed Nesterov: arrivals since the last momentum update
  int64_t steps = 0;               // momentum updates so far (Nesterov: outer steps; Delayed: every N-th arrival;
                                   // work clock: every round of work)
  int64_t work_steps = 0;          // work clock: inner steps merged since the last momentum update
};
// A zero state for `n` parameters; `delayed` also sizes the accumulator.
OuterState zero_outer_state(int64_t n, bool delayed);

// Outer-momentum warm-up: the momentum of the (steps_taken + 1)-th momentum update when it ramps
// linearly over the first `warmup` updates, μ · min(1, (steps_taken + 1) / warmup); `warmup` 0 is μ.
// Early pseudo-gradients point far from where later ones will, and full momentum amplifies them
// up to 1 / (1 − μ) times (10× at 0.9) before the learners have settled.
double warmed_momentum(double momentum, int64_t warmup, int64_t steps_taken);

// Nesterov SGD, the same update as torch::optim::SGD(nesterov=true, dampening=0):
//   m ← μ m + Δ;  θ ← θ − lr (Δ + μ m)
// Counts the update in state.steps.
void nesterov_step(OuterState& state, float* params, const float* delta, double lr, double momentum);

// Delayed Nesterov (Liu et al., arXiv 2401.09135) for per-arrival asynchronous updates: each
// arrival takes a plain step θ ← θ − lr·Δ/N; every N-th arrival also folds the mean of the last N
// arrivals into the momentum and applies the look-ahead θ ← θ − lr·μ·m. Over N arrivals this is one
// Nesterov step on their mean, and momentum is not amplified by consecutive stale updates.
// `state.accumulated` must hold n values. A momentum update counts in state.steps.
void delayed_nesterov_arrival(OuterState& state, float* params, const float* delta, double lr, double momentum,
                              int every);

// Outer steps on a clock of work (ALGORITHMS.md §5b: Delayed Nesterov, Liu et al. Alg. 3 with c = 0,
// N counted in rounds of work). A commit brings `g`, its share of a round's pseudo-gradient (Σ Δ over
// the contributions it merged ÷ the learners a round expects), and the inner `steps` it merged; a
// round of work is `round_steps` (those learners × H):
//   θ ← θ − lr·g;  acc ← acc + g;  A ← A + steps
//   while A ≥ round_steps:  f = round_steps / A;  m ← μ·m + f·acc;  θ ← θ − lr·μ·m;
//                           acc ← (1 − f)·acc;  A ← A − round_steps
// (the work beyond a round and its share of the accumulator wait for the next round: every round of
// merged work moves the momentum once, however commits straddle the rounds' ends)
// So momentum moves once per round of merged work, however the round was split into commits, and
// work short of a round (a drain) gets plain steps only. A whole round in one commit from A = 0 is
// nesterov_step, bit for bit. `state.accumulated` must hold n values; a momentum update counts in
// state.steps (so outer.momentum_warmup counts rounds of work).
void work_clock_step(OuterState& state, float* params, const float* g, int64_t steps, int64_t round_steps, double lr,
                     double momentum);

// The same two rules as objects owning their state (the reference engine and the oracle tests).
class NesterovOuter {
 public:
  // `warmup`: momentum ramps over the first `warmup` steps (warmed_momentum); 0 = none.
  NesterovOuter(int64_t n, double lr, double momentum, int64_t warmup = 0);
  void step(float* params, const float* delta) {
    nesterov_step(state_, params, delta, lr_, warmed_momentum(momentum_, warmup_, state_.steps));
  }

  const std::vector<float>& momentum_buffer() const { return state_.momentum; }
  void set_momentum_buffer(std::vector<float> buffer) { state_.momentum = std::move(buffer); }

 private:
  OuterState state_;
  double lr_;
  double momentum_;
  int64_t warmup_;
};

class DelayedNesterovOuter {
 public:
  DelayedNesterovOuter(int64_t n, double lr, double momentum, int every);
  void step(float* params, const float* delta) {
    delayed_nesterov_arrival(state_, params, delta, lr_, momentum_, every_);
  }

  int64_t pending() const { return state_.arrivals; }
  const std::vector<float>& momentum_buffer() const { return state_.momentum; }
  const OuterState& state() const { return state_; }

 private:
  OuterState state_;
  double lr_;
  double momentum_;
  int every_;
};

}  // namespace archipelago::training

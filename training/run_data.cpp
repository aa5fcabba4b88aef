#include "training/run_data.hpp"

#include "diloco/mode.hpp"

namespace archipelago::training {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Expected<std::vector<Batch>> heldout_of(const Corpus& corpus, const ReferenceSetup& setup) {
  auto split = split_corpus(corpus, setup.data.split, setup.data.heldout_fraction);
  if (!split) return split.error();
  return heldout_batches(corpus, split->heldout, setup.data.eval_batches, setup.inner.batch_size, setup.model.seq_len);
}

Expected<RunData> prepare_run_data(const Corpus& corpus, const ReferenceSetup& setup) {
  auto split = split_corpus(corpus, setup.data.split, setup.data.heldout_fraction);
  if (!split) return split.error();
  auto shards = make_shards(corpus, *split, setup.data.sharding, setup.run.learners, setup.data.chunk_bytes,
                            setup.run.seed);
  if (!shards) return shards.error();
  RunData data;
  data.shards = std::move(*shards);
  data.heldout = heldout_batches(corpus, split->heldout, setup.data.eval_batches, setup.inner.batch_size,
                                 setup.model.seq_len);
  if (data.heldout.empty()) return make_error(ErrorCode::invalid_argument, "the held-out split is too small to evaluate");
  return data;
}

int64_t tokens_per_learner_step(const ReferenceSetup& setup) {
  return static_cast<int64_t>(setup.inner.batch_size) * setup.model.seq_len;
}

int64_t plan_step_budget(ReferenceSetup& setup) {
  const auto& run = setup.run;
  if (run.max_tokens <= 0) return 0;
  const int64_t tokens_per_step = tokens_per_learner_step(setup) * run.learners;  // all learners, one step each
  if (setup.inner.total_steps == 0) setup.inner.total_steps = run.max_tokens / tokens_per_step;
  int64_t limit = ceil_div(run.max_tokens, tokens_per_step);
  if (diloco::whole_rounds(run.mode)) limit = ceil_div(limit, run.inner_steps) * run.inner_steps;
  return limit;
}

}  // namespace archipelago::training

#include "training/reference_engine.hpp"
#include "training/exported_model.hpp"
#include "training/data_parallel.hpp"

#include <chrono>
#include <cmath>
#include <random>

#include "common/log.hpp"
#include "training/fragments.hpp"
#include "training/outer.hpp"
#include "training/replica.hpp"
#include "training/run_data.hpp"

namespace archipelago::training {
namespace {

using Clock = std::chrono::steady_clock;

struct Data {
  std::vector<DataCursor> cursors;  // one per learner
  std::vector<Batch> heldout;
};

Expected<Data> prepare_data(const ReferenceSetup& setup, const std::shared_ptr<const Corpus>& corpus) {
  auto prepared = prepare_run_data(*corpus, setup);
  if (!prepared) return prepared.error();
  auto text = std::shared_ptr<const std::vector<training::Token>>(corpus, &corpus->tokens);
  Data data;
  for (int m = 0; m < setup.run.learners; ++m) {
    data.cursors.emplace_back(text, prepared->shards[m], setup.inner.batch_size, setup.model.seq_len, setup.run.seed, m);
    if (data.cursors.back().empty()) {
      return make_error(ErrorCode::invalid_argument,
                        "learner " + std::to_string(m) + "'s shard has no window of model.seq_len + 1 bytes");
    }
  }
  data.heldout = std::move(prepared->heldout);
  return data;
}

class Budget {
 public:
  explicit Budget(const RunOptions& run) : run_(run), start_(Clock::now()) {}
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  bool spent(int64_t tokens) const {
    return (run_.max_tokens > 0 && tokens >= run_.max_tokens) || (run_.max_seconds > 0 && elapsed() >= run_.max_seconds);
  }
  // A round is all-or-nothing: do not start one that the time budget cannot finish.
  bool room_for(double round_seconds) const {
    return run_.max_seconds <= 0 || elapsed() + round_seconds <= run_.max_seconds;
  }

 private:
  const RunOptions& run_;
  Clock::time_point start_;
};

}  // namespace

Expected<ReferenceResult> run_reference(const ReferenceSetup& setup, std::shared_ptr<const Corpus> corpus,
                                        const std::function<void(const ProgressPoint&)>& progress,
                                        const ReferenceObserver& observer) {
  const auto& run = setup.run;
  if (run.max_tokens <= 0 && run.max_seconds <= 0) {
    return make_error(ErrorCode::invalid_argument, "set train.max_tokens or train.max_seconds: the run must be bounded");
  }
  if (Status runs = diloco::check_engine_mode(diloco::Engine::reference, run.mode); !runs) {
    return make_error(ErrorCode::invalid_argument, "train.mode: " + runs.error().reason + " (the actor runtime runs every mode)");
  }
  auto merge_rule = parse_merge_rule(setup.outer.merge);
  if (!merge_rule) return merge_rule.error();
  auto data = prepare_data(setup, corpus);
  if (!data) return data.error();

  ReferenceSetup planned = setup;
  plan_step_budget(planned);  // inner.total_steps from train.max_tokens; the budget itself is counted in tokens
  InnerOptions inner = planned.inner;

  auto log = component_logger("reference");
  const bool ddp = diloco::data_parallel(run.mode);
  const int learner_count = ddp ? 1 : run.learners;  // ddp trains one model on M batches per step
  std::vector<std::unique_ptr<Replica>> replicas;
  for (int m = 0; m < learner_count; ++m) {
    auto replica = Replica::create(setup.model, inner, run.device, run.seed);  // same seed: same θ0
    if (!replica) return replica.error();
    replicas.push_back(std::move(*replica));
  }
  if (!setup.model.init_from.empty()) {  // every replica starts from the export's weights
    auto flat = init_from_weights(setup.model.init_from, replicas[0]->parameters());
    if (!flat) return flat.error();
    for (auto& replica : replicas) replica->write_parameters(*flat);
  }
  Replica& global_view = *replicas[0];
  const auto& parameters = global_view.parameters();
  auto plan = plan_fragments(parameters, setup.outer.fragments, setup.outer.fragment_layout);
  if (!plan) return plan.error();

  ReferenceResult result;
  result.mode = run.mode;
  result.learners = run.learners;
  result.inner_steps = run.inner_steps;
  result.parameters = global_view.parameter_count();
  const int64_t model_bytes = result.parameters * static_cast<int64_t>(sizeof(float));
  const int64_t bytes_per_sync = model_bytes * run.learners * 2;  // DiLoCo: up and down, every learner
  const int64_t bytes_per_ring_step = ring_allreduce_bytes(1, run.learners, result.parameters);  // data-parallel

  std::vector<float> global = global_view.read_parameters();
  std::vector<NesterovOuter> outer;
  for (const auto& fragment : plan->fragments) outer.emplace_back(fragment.numel, setup.outer.lr, setup.outer.momentum, setup.outer.momentum_warmup);

  std::mt19937_64 drop_rng(setup.drop_seed);
  std::uniform_real_distribution<double> drop(0.0, 1.0);
  Budget budget(run);
  const bool over_time = decays_over_time(inner, run);  // a run bounded by time only: the cosine runs over it
  result.initial_heldout_loss = global_view.evaluate(data->heldout);
  result.heldout_loss = result.initial_heldout_loss;
  log->info("{} | M={} H={} | {} parameters | held-out loss at start {:.4f}", diloco::mode_name(run.mode), run.learners,
            run.inner_steps, result.parameters, result.initial_heldout_loss);

  double train_loss_sum = 0;
  int64_t train_loss_count = 0;
  auto report = [&](bool evaluate) {
    ProgressPoint point;
    point.round = result.rounds;
    point.steps = result.steps;
    point.tokens = result.tokens;
    point.train_loss = train_loss_count ? train_loss_sum / train_loss_count : std::nan("");
    point.elapsed_s = budget.elapsed();
    point.bytes_sent = result.bytes_sent;
    point.heldout_loss = std::nan("");
    if (evaluate) {
      if (!ddp) global_view.write_parameters(global);
      point.heldout_loss = global_view.evaluate(data->heldout);
      result.heldout_loss = point.heldout_loss;
    }
    result.train_loss = point.train_loss;
    result.curve.push_back(point);
    if (progress) progress(point);
    train_loss_sum = 0;
    train_loss_count = 0;
  };

  if (observer.round) observer.round(0, global);
  double last_round_s = 0;
  while (!budget.spent(result.tokens) && (result.rounds == 0 || budget.room_for(last_round_s))) {
    const double round_start = budget.elapsed();
    if (ddp) {
      for (int h = 0; h < run.inner_steps && !budget.spent(result.tokens); ++h) {
        std::vector<Batch> batches;
        for (auto& cursor : data->cursors) batches.push_back(cursor.next());
        if (over_time) global_view.set_budget_spent(budget.elapsed() / run.max_seconds);
        auto stats = global_view.step_averaged(batches);
        if (observer.step) observer.step(0, batches, stats);
        train_loss_sum += stats.cross_entropy;
        ++train_loss_count;
        result.tokens += stats.tokens;
        result.steps += 1;
        result.bytes_sent += bytes_per_ring_step;
      }
    } else {
      // One synchronous DiLoCo round.
      std::vector<std::vector<float>> deltas(run.learners);
      std::vector<int64_t> learner_tokens(run.learners, 0);
      for (int m = 0; m < run.learners; ++m) {
        Replica& replica = *replicas[m];
        replica.write_parameters(global);
        for (int h = 0; h < run.inner_steps; ++h) {
          Batch batch = data->cursors[m].next();
          if (over_time) replica.set_budget_spent(budget.elapsed() / run.max_seconds);
          auto stats = replica.step(batch);
          if (observer.step) observer.step(m, {batch}, stats);
          train_loss_sum += stats.cross_entropy;
          ++train_loss_count;
          learner_tokens[m] += stats.tokens;
        }
        auto local = replica.read_parameters();
        deltas[m].resize(global.size());
        pseudo_gradient(global.data(), local.data(), static_cast<int64_t>(global.size()), deltas[m].data());
      }
      // The pseudo-gradients that reach the outer step: all of them, unless the drop fault loses some.
      std::vector<int> arrived;
      for (int m = 0; m < run.learners; ++m) {
        if (setup.drop_outer_gradient > 0 && drop(drop_rng) < setup.drop_outer_gradient) {
          result.dropped_outer_gradients += 1;
        } else {
          arrived.push_back(m);
        }
      }
      if (arrived.empty()) result.rounds_without_outer_step += 1;
      for (const auto& fragment : plan->fragments) {
        if (arrived.empty()) break;
        std::vector<std::vector<float>> fragment_deltas;
        std::vector<Contribution> contributions;
        for (int m : arrived) {
          fragment_deltas.push_back(gather_fragment(*plan, parameters, fragment.id, deltas[m].data()));
        }
        for (size_t k = 0; k < arrived.size(); ++k) {
          contributions.push_back({fragment_deltas[k].data(), learner_tokens[arrived[k]], run.inner_steps});
        }
        auto merged = merge(contributions, fragment.numel, *merge_rule);
        if (!merged) return merged.error();
        auto values = gather_fragment(*plan, parameters, fragment.id, global.data());
        outer[fragment.id].step(values.data(), merged->data());
        scatter_fragment(*plan, parameters, fragment.id, values.data(), global.data());
      }
      for (auto t : learner_tokens) result.tokens += t;
      result.steps += run.inner_steps;
      result.bytes_sent += bytes_per_sync;
    }
    result.rounds += 1;
    if (observer.round) observer.round(result.rounds, ddp ? global_view.read_parameters() : global);
    last_round_s = budget.elapsed() - round_start;
    report(result.rounds % std::max(1, run.eval_every) == 0);
  }
  if (result.curve.empty() || std::isnan(result.curve.back().heldout_loss)) report(true);

  result.wall_s = budget.elapsed();
  result.bytes_ddp_equivalent = result.steps * bytes_per_ring_step;
  result.final_parameters = ddp ? global_view.read_parameters() : global;
  return result;
}

}  // namespace archipelago::training

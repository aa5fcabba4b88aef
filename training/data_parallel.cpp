#include "training/data_parallel.hpp"

#include <xxhash.h>

#include <chrono>
#include <cmath>

#include "common/log.hpp"
#include "common/socket_bytes.hpp"
#include "training/exported_model.hpp"
#include "training/replica.hpp"
#include "training/run_data.hpp"

namespace archipelago::training {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int64_t ring_allreduce_bytes(int64_t steps, int workers, int64_t parameters) {
  if (workers <= 1) return 0;
  return steps * 2 * (workers - 1) * parameters * static_cast<int64_t>(sizeof(float));
}

Expected<WorkerBytes> measure_worker_bytes(int store_port) {
  auto sockets = tcp_sockets_of_this_process();
  if (!sockets) return sockets.error();
  WorkerBytes bytes;
  for (const auto& s : *sockets) {
    if (s.peer_port == 0) continue;  // listening
    if (s.peer_port == store_port || s.local_port == store_port) {
      bytes.store_sent += s.sent;
      bytes.store_received += s.received;
    } else {
      bytes.sent += s.sent;
      bytes.received += s.received;
      bytes.sockets += 1;
    }
  }
  return bytes;
}

Expected<DataParallelResult> run_data_parallel_worker(const ReferenceSetup& setup,
                                                      const std::shared_ptr<const Corpus>& corpus,
                                                      GlooGroup& group, const DataParallelProgress& progress) {
  const auto& run = setup.run;
  if (run.max_tokens <= 0 && run.max_seconds <= 0) {
    return make_error(ErrorCode::invalid_argument, "set train.max_tokens or train.max_seconds: the run must be bounded");
  }
  if (group.world() != run.learners) {
    return make_error(ErrorCode::invalid_argument, "the process group has " + std::to_string(group.world()) +
                                                       " workers but train.learners is " + std::to_string(run.learners));
  }
  const int rank = group.rank();
  auto log = component_logger("ddp");
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };

  ReferenceSetup planned = setup;
  const int64_t step_limit = plan_step_budget(planned);  // 0: time budget only
  auto prepared = prepare_run_data(*corpus, setup);
  if (!prepared) return prepared.error();
  auto text = std::shared_ptr<const std::vector<Token>>(corpus, &corpus->tokens);
  DataCursor cursor(text, prepared->shards[rank], setup.inner.batch_size, setup.model.seq_len, run.seed, rank);
  if (cursor.empty()) {
    return make_error(ErrorCode::invalid_argument,
                      "worker " + std::to_string(rank) + "'s shard has no window of model.seq_len + 1 tokens");
  }

  auto replica = Replica::create(setup.model, planned.inner, run.device, run.seed);
  if (!replica) return replica.error();
  auto& model = **replica;
  std::vector<float> parameters = model.read_parameters();
  if (!setup.model.init_from.empty()) {
    auto flat = init_from_weights(setup.model.init_from, model.parameters());
    if (!flat) return flat.error();
    parameters = std::move(*flat);
  }
  // Every worker starts from rank 0's parameters, sent over the group as a data-parallel wrapper does.
  auto before = measure_worker_bytes(group.store_port());
  if (!before) return before.error();
  if (Status sent = group.broadcast(parameters.data(), static_cast<int64_t>(parameters.size()), 0); !sent) return sent.error();
  auto after = measure_worker_bytes(group.store_port());
  if (!after) return after.error();
  model.write_parameters(parameters);

  DataParallelResult result;
  result.rank = rank;
  result.mode = run.mode;
  result.learners = run.learners;
  result.inner_steps = run.inner_steps;
  result.parameters = model.parameter_count();
  result.bytes_measured = true;
  result.broadcast_bytes = after->sent - before->sent;
  result.initial_heldout_loss = rank == 0 ? model.evaluate(prepared->heldout) : std::nan("");
  result.heldout_loss = result.initial_heldout_loss;
  if (rank == 0) {
    log->info("ddp on gloo | {} workers | {} parameters | held-out loss at start {:.4f}", group.world(),
              result.parameters, result.initial_heldout_loss);
  }

  const int64_t steps_per_report = std::max<int64_t>(1, static_cast<int64_t>(run.inner_steps) * std::max(1, run.eval_every));
  const int64_t tokens_per_step = tokens_per_learner_step(setup) * group.world();
  double train_loss_sum = 0;
  int64_t train_loss_count = 0;
  Status failed;
  auto reduce = [&](float* values, int64_t count) {
    if (Status reduced = group.all_reduce_mean(values, count); !reduced && failed) failed = reduced;
  };
  // A report is a collective (the job's bytes are summed over the workers): every rank takes part.
  auto report = [&](bool evaluate) -> Status {
    auto bytes = measure_worker_bytes(group.store_port());
    if (!bytes) return bytes.error();
    int64_t totals[2] = {bytes->sent, bytes->received};
    if (Status summed = group.all_reduce_sum(totals, 2); !summed) return summed;
    if (rank != 0) return {};
    ProgressPoint point;
    point.round = result.steps / std::max(1, run.inner_steps);
    point.steps = result.steps;
    point.tokens = result.tokens;
    point.train_loss = train_loss_count ? train_loss_sum / train_loss_count : std::nan("");
    point.heldout_loss = evaluate ? model.evaluate(prepared->heldout) : std::nan("");
    point.elapsed_s = elapsed();
    point.bytes_sent = totals[0];
    if (evaluate) result.heldout_loss = point.heldout_loss;
    result.train_loss = point.train_loss;
    train_loss_sum = 0;
    train_loss_count = 0;
    if (progress) progress(point);
    return {};
  };

  for (;;) {
    bool stop = step_limit > 0 && result.steps >= step_limit;
    if (!stop && run.max_seconds > 0) {  // the workers' clocks differ: stop when any one's budget is spent
      int64_t spent = elapsed() >= run.max_seconds ? 1 : 0;
      if (Status voted = group.all_reduce_sum(&spent, 1); !voted) return voted.error();
      stop = spent > 0;
    }
    if (stop) break;
    auto stats = model.step_reduced(cursor.next(), reduce);
    if (!failed) return failed.error();
    train_loss_sum += stats.cross_entropy;
    ++train_loss_count;
    result.steps += 1;
    result.tokens += tokens_per_step;
    if (result.steps % steps_per_report == 0) {
      if (Status reported = report(true); !reported) return reported.error();
    }
  }
  if (result.steps % steps_per_report != 0 || result.steps == 0) {
    if (Status reported = report(true); !reported) return reported.error();
  }
  result.rounds = result.steps / std::max(1, run.inner_steps);
  result.wall_s = elapsed();
  auto bytes = measure_worker_bytes(group.store_port());
  if (!bytes) return bytes.error();
  result.bytes = *bytes;
  result.bytes_sent = bytes->sent;
  const auto final_parameters = model.read_parameters();
  result.parameter_digest = XXH3_64bits(final_parameters.data(), final_parameters.size() * sizeof(float));
  if (Status done = group.barrier(); !done) return done.error();  // no worker closes its sockets under another's last read
  return result;
}

}  // namespace archipelago::training

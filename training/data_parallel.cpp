#include "training/data_parallel.hpp"

#include <xxhash.h>

#include <chrono>
#include <cmath>
#include <cstring>

#include "common/files.hpp"
#include "common/log.hpp"
#include "common/socket_bytes.hpp"
#include "training/exported_model.hpp"
#include "training/replica.hpp"
#include "training/run_data.hpp"

namespace archipelago::training {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kCheckpointMagic[8] = {'A', 'R', 'C', 'H', 'D', 'D', 'P', '1'};

// The values as they are in memory (IEEE-754, little-endian hosts).
template <typename T>
void put(std::string& out, const T* values, size_t count) {
  out.append(reinterpret_cast<const char*>(values), count * sizeof(T));
}

}  // namespace

std::string encode_checkpoint(const DataParallelCheckpoint& c) {
  std::string out(kCheckpointMagic, sizeof kCheckpointMagic);
  const int64_t header[5] = {c.steps, static_cast<int64_t>(c.parameters.size()), c.optimizer.adam_steps,
                             c.optimizer.schedule_steps, static_cast<int64_t>(c.optimizer.exp_avg.size())};
  put(out, header, 5);
  put(out, &c.initial_heldout_loss, 1);
  put(out, &c.kept_step_s, 1);
  put(out, &c.first_step_at_ms, 1);
  put(out, c.parameters.data(), c.parameters.size());
  put(out, c.optimizer.exp_avg.data(), c.optimizer.exp_avg.size());
  put(out, c.optimizer.exp_avg_sq.data(), c.optimizer.exp_avg_sq.size());
  const uint64_t digest = XXH3_64bits(out.data(), out.size());
  put(out, &digest, 1);
  return out;
}

Expected<DataParallelCheckpoint> decode_checkpoint(const std::string& bytes) {
  const size_t header_size = sizeof kCheckpointMagic + 5 * sizeof(int64_t) + 2 * sizeof(double) + sizeof(int64_t);
  if (bytes.size() < header_size + sizeof(uint64_t) ||
      std::memcmp(bytes.data(), kCheckpointMagic, sizeof kCheckpointMagic) != 0) {
    return make_error(ErrorCode::corrupt, "not a data-parallel checkpoint (no ARCHDDP1 header)");
  }
  int64_t header[5];
  std::memcpy(header, bytes.data() + sizeof kCheckpointMagic, sizeof header);
  const int64_t parameters = header[1], moments = header[4];
  if (header[0] < 0 || parameters <= 0 || moments < 0 || (moments != 0 && moments != parameters) ||
      bytes.size() != header_size + static_cast<size_t>(parameters + 2 * moments) * sizeof(float) + sizeof(uint64_t)) {
    return make_error(ErrorCode::corrupt, "checkpoint of " + std::to_string(bytes.size()) +
                                              " bytes does not hold the sizes its header gives");
  }
  uint64_t digest = 0;
  std::memcpy(&digest, bytes.data() + bytes.size() - sizeof digest, sizeof digest);
  if (digest != XXH3_64bits(bytes.data(), bytes.size() - sizeof digest)) {
    return make_error(ErrorCode::corrupt, "checkpoint checksum does not match its bytes");
  }
  DataParallelCheckpoint c;
  c.steps = header[0];
  const char* timing = bytes.data() + sizeof kCheckpointMagic + sizeof header;
  std::memcpy(&c.initial_heldout_loss, timing, sizeof(double));
  std::memcpy(&c.kept_step_s, timing + sizeof(double), sizeof(double));
  std::memcpy(&c.first_step_at_ms, timing + 2 * sizeof(double), sizeof(int64_t));
  c.optimizer.adam_steps = header[2];
  c.optimizer.schedule_steps = header[3];
  const float* floats = reinterpret_cast<const float*>(bytes.data() + header_size);
  c.parameters.assign(floats, floats + parameters);
  c.optimizer.exp_avg.assign(floats + parameters, floats + parameters + moments);
  c.optimizer.exp_avg_sq.assign(floats + parameters + moments, floats + parameters + 2 * moments);
  return c;
}

Expected<std::optional<DataParallelCheckpoint>> read_checkpoint(const std::string& path) {
  auto bytes = read_whole_file(path);
  if (!bytes) {
    if (bytes.error().code == ErrorCode::not_found) return std::optional<DataParallelCheckpoint>();
    return bytes.error();
  }
  auto decoded = decode_checkpoint(*bytes);
  if (!decoded) {
    return make_error(ErrorCode::corrupt,
                      "checkpoint " + path + ": " + decoded.error().reason + " (move it away to start the job over)");
  }
  return std::optional<DataParallelCheckpoint>(std::move(*decoded));
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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
                                                      GlooGroup& group, const std::string& checkpoint_path,
                                                      int64_t deadline_ms, const DataParallelProgress& progress) {
  const auto& run = setup.run;
  if (run.max_tokens <= 0 && run.max_seconds <= 0 && deadline_ms <= 0) {
    return make_error(ErrorCode::invalid_argument, "set train.max_tokens or train.max_seconds: the run must be bounded");
  }
  if (group.world() != run.learners) {
    return make_error(ErrorCode::invalid_argument, "the process group has " + std::to_string(group.world()) +
                                                       " workers but train.learners is " + std::to_string(run.learners));
  }
  const int rank = group.rank();
  auto log = component_logger("ddp");
  const auto started_at = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - started_at).count(); };

  ReferenceSetup planned = setup;
  const int64_t step_limit = plan_step_budget(planned);  // 0: time budget only
  auto prepared = prepare_run_data(*corpus, setup);
  if (!prepared) return prepared.error();
  auto text = std::shared_ptr<const std::vector<Token>>(corpus, &corpus->tokens);
  if (DataCursor(text, prepared->shards[rank], setup.inner.batch_size, setup.model.seq_len, run.seed, rank).empty()) {
    return make_error(ErrorCode::invalid_argument,
                      "worker " + std::to_string(rank) + "'s shard has no window of model.seq_len + 1 tokens");
  }

  auto replica = Replica::create(setup.model, planned.inner, run.device, run.seed);
  if (!replica) return replica.error();
  auto& model = **replica;
  const int64_t parameter_count = model.parameter_count();

  // Where the job starts: rank 0's checkpoint if it has one, else θ0 (or model.init_from).
  DataParallelCheckpoint start;
  start.parameters = model.read_parameters();
  bool resumed = false;
  if (rank == 0 && !checkpoint_path.empty()) {
    auto read = read_checkpoint(checkpoint_path);
    if (!read) return read.error();
    if (auto& decoded = *read) {
      if (static_cast<int64_t>(decoded->parameters.size()) != parameter_count) {
        return make_error(ErrorCode::inconsistent, "checkpoint " + checkpoint_path + " holds " +
                                                       std::to_string(decoded->parameters.size()) +
                                                       " parameters, the model has " + std::to_string(parameter_count));
      }
      start = std::move(*decoded);
      resumed = true;
    }
  }
  if (!resumed && !setup.model.init_from.empty()) {
    auto flat = init_from_weights(setup.model.init_from, model.parameters());
    if (!flat) return flat.error();
    start.parameters = std::move(*flat);
  }
  // Every worker starts from rank 0's state, sent over the group as a data-parallel wrapper does.
  auto before = measure_worker_bytes(group.store_port());
  if (!before) return before.error();
  int64_t header[6] = {resumed ? 1 : 0, start.steps, start.optimizer.adam_steps, start.optimizer.schedule_steps,
                       static_cast<int64_t>(std::llround(start.kept_step_s * 1e6)), start.first_step_at_ms};
  if (rank != 0) std::fill(header, header + 6, 0);
  if (Status sent = group.all_reduce_sum(header, 6); !sent) return sent.error();
  resumed = header[0] != 0;
  start.steps = header[1];
  start.optimizer.adam_steps = header[2];
  start.optimizer.schedule_steps = header[3];
  start.kept_step_s = static_cast<double>(header[4]) / 1e6;
  start.first_step_at_ms = header[5];
  start.parameters.resize(static_cast<size_t>(parameter_count));
  std::vector<float*> sent_vectors = {start.parameters.data()};
  if (resumed && start.optimizer.adam_steps > 0) {
    start.optimizer.exp_avg.resize(static_cast<size_t>(parameter_count));
    start.optimizer.exp_avg_sq.resize(static_cast<size_t>(parameter_count));
    sent_vectors.push_back(start.optimizer.exp_avg.data());
    sent_vectors.push_back(start.optimizer.exp_avg_sq.data());
  }
  for (float* values : sent_vectors) {
    if (Status sent = group.broadcast(values, parameter_count, 0); !sent) return sent.error();
  }
  auto after = measure_worker_bytes(group.store_port());
  if (!after) return after.error();
  model.write_parameters(start.parameters);
  if (resumed) {
    if (Status imported = model.import_optimizer_state(start.optimizer); !imported) return imported.error();
  }
  DataCursor cursor(text, prepared->shards[rank], setup.inner.batch_size, setup.model.seq_len, run.seed, rank,
                    static_cast<uint64_t>(start.steps));

  DataParallelResult result;
  result.rank = rank;
  result.mode = run.mode;
  result.learners = run.learners;
  result.inner_steps = run.inner_steps;
  result.parameters = model.parameter_count();
  result.bytes_measured = true;
  result.broadcast_bytes = after->sent - before->sent;
  result.resumed_from_step = start.steps;
  result.kept_step_s = start.kept_step_s;
  result.first_step_at_ms = start.first_step_at_ms;
  result.steps = start.steps;
  result.tokens = start.steps * tokens_per_learner_step(setup) * group.world();
  result.initial_heldout_loss =
      rank != 0 ? std::nan("") : resumed ? start.initial_heldout_loss : model.evaluate(prepared->heldout);
  result.heldout_loss = result.initial_heldout_loss;
  if (rank == 0) {
    log->info("ddp on gloo | {} workers | {} parameters | held-out loss at start {:.4f}{}", group.world(),
              result.parameters, result.initial_heldout_loss,
              resumed ? " | resumed from the checkpoint of step " + std::to_string(start.steps) : std::string());
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
    if (!checkpoint_path.empty()) {
      DataParallelCheckpoint c{result.steps, result.initial_heldout_loss, result.kept_step_s, result.first_step_at_ms,
                               model.read_parameters(), model.export_optimizer_state()};
      if (Status written = write_file_atomically(checkpoint_path, encode_checkpoint(c), true); !written) {
        return written;
      }
    }
    train_loss_sum = 0;
    train_loss_count = 0;
    if (progress) progress(point);
    return {};
  };

  for (;;) {
    bool stop = step_limit > 0 && result.steps >= step_limit;
    if (!stop && (deadline_ms > 0 || run.max_seconds > 0)) {  // the workers' clocks differ: stop when any one's is out
      int64_t spent = (deadline_ms > 0 ? unix_ms() >= deadline_ms : elapsed() >= run.max_seconds) ? 1 : 0;
      if (Status voted = group.all_reduce_sum(&spent, 1); !voted) return voted.error();
      stop = spent > 0;
    }
    if (stop) break;
    const auto step_start = Clock::now();
    if (result.first_step_at_ms == 0) result.first_step_at_ms = unix_ms();
    auto stats = model.step_reduced(cursor.next(), reduce);
    if (!failed) return failed.error();
    result.kept_step_s += std::chrono::duration<double>(Clock::now() - step_start).count();
    train_loss_sum += stats.cross_entropy;
    ++train_loss_count;
    result.steps += 1;
    result.tokens += tokens_per_step;
    if (result.steps % steps_per_report == 0) {
      if (Status reported = report(true); !reported) return reported.error();
    }
  }
  // The final parameters are always scored: a last partial round, or an incarnation that resumed and
  // took no step before the end.
  if (result.steps % steps_per_report != 0 || result.steps == start.steps) {
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

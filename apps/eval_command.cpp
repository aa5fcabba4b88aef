#include "apps/eval_command.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "apps/committed_model.hpp"
#include "training/exported_model.hpp"
#include "training/text_score.hpp"
#include "training/tokenizer.hpp"

namespace archipelago::apps {

namespace {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "archipelago eval: %s\n", message.c_str());
  return code;
}

volatile std::sig_atomic_t stop_signal = 0;
void on_stop_signal(int signal) { stop_signal = signal; }

// --follow: scores each new assembled version until --for runs out or a signal arrives. A store
// that cannot be read is reported and read again at the next check; the run goes on regardless.
int follow(const EvalArguments& arguments, const std::string& text) {
  if (arguments.run_dirs.empty() || !arguments.export_dir.empty()) return fail(2, "--follow needs --run-dir (a live run)");
  if (!arguments.versions.empty()) return fail(2, "--follow scores the latest versions: give no --version");
  if (!(arguments.every_s > 0) || !(arguments.for_s >= 0)) return fail(2, "--every must be > 0 and --for >= 0");
  auto opened = ModelFollower::open(arguments.run_dirs);
  if (auto* failure = std::get_if<LoadFailure>(&opened)) return fail(failure->exit_code, failure->message);
  auto& follower = *std::get<std::unique_ptr<ModelFollower>>(opened);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  const auto deadline = arguments.for_s > 0 ? started + std::chrono::duration_cast<Clock::duration>(
                                                            std::chrono::duration<double>(arguments.for_s))
                                            : Clock::time_point::max();
  int64_t scored = 0, failed_reads = 0;
  while (!stop_signal && Clock::now() < deadline) {
    auto next = follower.next();
    if (!next) {
      ++failed_reads;
      std::fprintf(stderr, "archipelago eval: %s (read again in %.0f s)\n", next.error().to_string().c_str(),
                   arguments.every_s);
    } else if (*next) {
      follower.replica().write_parameters((*next)->flat);
      const auto score = training::score_text(follower.replica(), follower.tokenizer(), text, arguments.batch_size);
      ++scored;
      const double at_s = std::chrono::duration<double>(Clock::now() - started).count();
      std::printf("%.1f s: versions %s: loss %.4f nats/token, %.4f bits per byte over %lld bytes\n", at_s,
                  nlohmann::json((*next)->versions).dump().c_str(), score.loss, score.bits_per_byte,
                  static_cast<long long>(score.bytes));
      if (arguments.json) {
        nlohmann::json line = {{"run_dirs", follower.run_dirs()}, {"shard_versions", (*next)->versions},
                               {"seconds", at_s}, {"text", arguments.text}, {"tokenizer", follower.tokenizer().hash()},
                               {"tokens", score.tokens}, {"bytes", score.bytes}, {"loss", score.loss},
                               {"bits_per_byte", score.bits_per_byte}};
        std::printf("%s\n", line.dump().c_str());
      }
      std::fflush(stdout);
    }
    const auto wake = std::min(deadline, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                            std::chrono::duration<double>(arguments.every_s)));
    while (!stop_signal && Clock::now() < wake) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::fprintf(stderr, "archipelago eval: followed for %.0f s: %lld version(s) scored, %lld failed read(s)\n",
               std::chrono::duration<double>(Clock::now() - started).count(), static_cast<long long>(scored),
               static_cast<long long>(failed_reads));
  return scored > 0 ? 0 : fail(1, "no committed version was scored");
}

}  // namespace

int run_eval(const EvalArguments& arguments) {
  if (arguments.run_dirs.empty() == arguments.export_dir.empty()) {
    return fail(2, "give one model: --run-dir R (a committed version) or --export DIR");
  }
  if (arguments.batch_size < 1) return fail(2, "--batch-size must be >= 1");
  std::ifstream file(arguments.text, std::ios::binary);
  if (!std::filesystem::is_regular_file(arguments.text) || !file) return fail(2, "no text file " + arguments.text);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (arguments.max_bytes > 0 && static_cast<int64_t>(text.size()) > arguments.max_bytes) text.resize(arguments.max_bytes);
  if (text.size() < 2) return fail(2, arguments.text + " has fewer than 2 bytes: nothing to predict");
  if (arguments.follow) return follow(arguments, text);

  std::unique_ptr<training::Replica> replica;
  training::Tokenizer tokenizer;
  nlohmann::json source;
  std::string described;
  if (!arguments.run_dirs.empty()) {
    auto loaded = load_committed_model(arguments.run_dirs, arguments.versions);
    if (auto* failure = std::get_if<LoadFailure>(&loaded)) return fail(failure->exit_code, failure->message);
    auto& model = std::get<CommittedModel>(loaded);
    replica = std::move(model.start.replica);
    replica->write_parameters(model.flat);
    tokenizer = model.tokenizer;
    if (model.shard_versions.empty()) {
      source = {{"run_dir", arguments.run_dirs.front()}, {"version", model.version}};
      described = "version " + std::to_string(model.version) + " of " + arguments.run_dirs.front();
    } else {
      source = {{"run_dirs", model.shard_run_dirs}, {"shard_versions", model.shard_versions}};
      described = "versions " + nlohmann::json(model.shard_versions).dump() + " of the shards " +
                  nlohmann::json(model.shard_run_dirs).dump();
    }
  } else {
    auto exported = training::read_export(arguments.export_dir);
    if (!exported) return fail(2, exported.error().reason);
    auto created = training::Replica::create(exported->model, training::InnerOptions{}, "cpu", 0);
    if (!created) return fail(2, "the export's model: " + created.error().reason);
    replica = std::move(*created);
    auto flat = training::exported_parameters(*exported, replica->parameters());
    if (!flat) return fail(2, flat.error().reason);
    replica->write_parameters(*flat);
    tokenizer = exported->tokenizer;
    source = {{"export", arguments.export_dir}, {"version", exported->version}};
    described = "export " + arguments.export_dir;
  }
  const auto score = training::score_text(*replica, tokenizer, text, arguments.batch_size);
  std::printf("%s: loss %.4f nats/token, %.4f bits per byte over %lld bytes of %s\n",
              described.c_str(), score.loss, score.bits_per_byte, static_cast<long long>(score.bytes), arguments.text.c_str());
  if (arguments.json) {
    source["text"] = arguments.text;
    source["tokenizer"] = tokenizer.hash();
    source["tokens"] = score.tokens;
    source["bytes"] = score.bytes;
    source["loss"] = score.loss;
    source["bits_per_byte"] = score.bits_per_byte;
    std::printf("%s\n", source.dump().c_str());
  }
  return 0;
}

}  // namespace archipelago::apps

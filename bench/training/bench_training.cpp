// Training-core benchmarks, each reported against a baseline measured in the same run:
//   1. inner-step throughput, bf16 autocast vs fp32, on one preset;
//   2. synchronous DiLoCo (M learners, H inner steps) vs data-parallel at equal tokens:
//      held-out loss and bytes that would cross the network.
// Usage: bench_training [--preset small] [--vocab 256] [--steps 20] [--compare-preset tiny] [--learners 4]
//                       [--inner-steps 50] [--steps-per-learner 1000] [--skip-compare]
#include <chrono>
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/allocator.hpp"
#include "common/log.hpp"
#include "training/blas_check.hpp"
#include "training/reference_engine.hpp"
#include "training/replica.hpp"

using namespace archipelago::training;

namespace {

double seconds_per_step(const ModelConfig& model, const std::string& precision, const std::vector<Batch>& batches,
                        int threads) {
  set_compute_threads(threads, precision);  // its split between LibTorch and OpenBLAS depends on the precision
  InnerOptions inner;
  inner.precision = precision;
  auto replica = Replica::create(model, inner, "cpu", 1);
  if (!replica) throw std::runtime_error(replica.error().reason);
  (*replica)->step(batches[0]);  // warm-up: allocations, autocast caches
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 1; i < batches.size(); ++i) (*replica)->step(batches[i]);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / (batches.size() - 1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Archipelago training-core benchmarks"};
  std::string preset = "small", compare_preset = "tiny", cache_dir = "archipelago-runs/data";
  int steps = 20, learners = 4, inner_steps = 50, threads = 0, vocab = 256;
  int64_t steps_per_learner = 1000;
  bool skip_compare = false;
  std::string precisions = "both";
  app.add_option("--preset", preset, "model preset for the step-time benchmark");
  app.add_option("--vocab", vocab, "its vocabulary (8192: the default SentencePiece tokenizer's; 256: bytes)");
  app.add_option("--steps", steps, "timed inner steps per precision");
  app.add_option("--compare-preset", compare_preset, "model preset for DiLoCo vs data-parallel");
  app.add_option("--learners", learners, "M");
  app.add_option("--inner-steps", inner_steps, "H");
  app.add_option("--steps-per-learner", steps_per_learner, "inner steps per learner (equal tokens for both)");
  app.add_option("--threads", threads, "LibTorch intra-op threads (0 = all cores)");
  app.add_option("--cache-dir", cache_dir, "corpus cache directory");
  app.add_flag("--skip-compare", skip_compare, "only the step-time benchmark");
  app.add_option("--precision", precisions, "the step precisions timed: fp32, bf16 or both (bf16 is emulated, and slow, without bf16 hardware)")
      ->check(CLI::IsMember({"fp32", "bf16", "both"}));
  CLI11_PARSE(app, argc, argv);
  archipelago::init_logging({"bench", "warn", ""});

  nlohmann::json report;
  const int used_threads = set_compute_threads(threads);
  auto blas = check_blas();
  std::printf("%s\n%d compute threads\n\n", blas.message.c_str(), used_threads);
  report["blas_gflops"] = blas.gflops;
  report["allocator"] = archipelago::allocator_in_use().name;

  DataOptions data;
  data.cache_dir = cache_dir;
  auto corpus = load_corpus(data);
  if (!corpus) {
    std::fprintf(stderr, "%s\n", corpus.error().reason.c_str());
    return 1;
  }
  auto shared = std::make_shared<const Corpus>(std::move(*corpus));

  // 1. bf16 vs fp32 inner steps.
  auto model = *model_preset(preset);
  model.vocab = vocab;
  auto split = *split_corpus(*shared, "tail", 0.05);
  DataCursor cursor(std::shared_ptr<const std::vector<Token>>(shared, &shared->tokens), split.train, 16, model.seq_len, 1, 0);
  std::vector<Batch> batches;
  for (int i = 0; i <= steps; ++i) batches.push_back(cursor.next());
  const double tokens_per_step = 16.0 * model.seq_len;
  std::printf("inner step, %s preset, vocabulary %d, batch 16 x %d tokens\n", preset.c_str(), vocab, model.seq_len);
  report["step"] = {{"preset", preset}, {"vocab", vocab}, {"threads", used_threads}};
  double fp32 = 0;
  for (const std::string precision : {"fp32", "bf16"}) {
    if (precisions != "both" && precisions != precision) continue;
    const double s = seconds_per_step(model, precision, batches, used_threads);
    std::printf("  %s  %7.3f s/step  %8.0f tokens/s\n", precision.c_str(), s, tokens_per_step / s);
    report["step"][precision + "_s"] = s;
    report["step"][precision + "_tokens_per_s"] = tokens_per_step / s;
    if (precision == "fp32") fp32 = s;
    if (precision == "bf16" && fp32 > 0) report["step"]["bf16_speedup"] = fp32 / s;
  }
  std::printf("\n");

  if (!skip_compare) {
    // 2. DiLoCo vs data-parallel at equal tokens.
    ReferenceSetup setup;
    setup.model = *model_preset(compare_preset);
    setup.inner.batch_size = 16;
    setup.run.learners = learners;
    setup.run.inner_steps = inner_steps;
    setup.run.max_tokens = steps_per_learner * learners * setup.inner.batch_size * setup.model.seq_len;
    setup.run.threads = threads;
    setup.run.eval_every = 1000000;  // evaluate at the end only
    setup.data = data;
    setup.data.eval_batches = 16;
    std::printf("DiLoCo vs data-parallel, %s preset, M=%d, H=%d, %lld tokens each\n", compare_preset.c_str(), learners,
                inner_steps, static_cast<long long>(setup.run.max_tokens));
    nlohmann::json rows;
    double ddp_loss = 0;
    int64_t ddp_bytes = 0;
    for (archipelago::diloco::Mode mode : {archipelago::diloco::Mode::ddp, archipelago::diloco::Mode::sync}) {
      const std::string name = archipelago::diloco::mode_name(mode);
      setup.run.mode = mode;
      auto result = run_reference(setup, shared);
      if (!result) {
        std::fprintf(stderr, "%s\n", result.error().reason.c_str());
        return 1;
      }
      if (archipelago::diloco::data_parallel(mode)) {
        ddp_loss = result->heldout_loss;
        ddp_bytes = result->bytes_sent;
      }
      std::printf("  %-5s held-out loss %.4f (vs ddp %+.2f%%)  bytes %12lld (ddp / this: %.0fx)  wall %.0f s\n",
                  name.c_str(), result->heldout_loss, 100.0 * (result->heldout_loss / ddp_loss - 1.0),
                  static_cast<long long>(result->bytes_sent), double(ddp_bytes) / result->bytes_sent, result->wall_s);
      rows[name] = {{"heldout_loss", result->heldout_loss}, {"bytes_sent", result->bytes_sent}, {"wall_s", result->wall_s},
                    {"initial_heldout_loss", result->initial_heldout_loss}};
    }
    report["compare"] = rows;
  }
  std::printf("\n%s\n", report.dump().c_str());
  return 0;
}

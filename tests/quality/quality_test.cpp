// Learning-quality guard: `archipelago train --json` as a user runs it, on the `tiny` preset (0.13 M
// parameters, King James Bible, byte tokens, fp32), M = 2 learners, 200 inner steps per learner. Both
// cases compare runs at equal tokens and fail when the DiLoCo run ends more than a fixed margin above
// its baselines (sync DiLoCo against data-parallel; decoupled against sync and data-parallel), or when a
// run does not learn at all; the deterministic reference engine's losses are also pinned to golden
// values within 2 %.
//
// Equal tokens: train.max_tokens = 2 learners x 200 steps x 16 sequences x 64 tokens = 409 600, a
// multiple of M x H x tokens per step for H = 25 and 50, so no mode rounds its budget up: the reference
// engine's ddp counts M batches per step and stops at the budget, its sync mode finishes whole rounds
// (4 x H = 50 per learner); on the actor runtime each learner's step limit is max_tokens / (M x 1024) =
// 200 (sync rounds it up to a multiple of H: still 200), and tokens = steps computed x 1024. The test
// asserts that every run reports exactly 409 600 tokens.
//
// Margins, from runs of this exact configuration on the shared 2-core VM (values in the comments of
// each case). A learning defect moves the loss far more than the margins: with outer.lr = 0 (what a
// dropped merge also does: the global model never moves) the decoupled run's final held-out loss was
// its initial 5.568, +93 % above sync; the reference engine's Nesterov step with lr 0 leaves θ0 as it is.
//
// Time: ~10 CPU seconds per training; on the 2-core VM at load average 18 the reference engine's
// single-threaded runs took up to 213 s of wall time, the actor runtime's 40 s.
#include <unistd.h>

#include <filesystem>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/support/run_cli.hpp"

namespace fs = std::filesystem;
using archipelago::testing::last_line_json;
using archipelago::testing::run_cli;

namespace {

constexpr int64_t kTokens = 2 * 200 * 16 * 64;
constexpr int kRunTimeoutS = 420;  // one training

struct ScratchDir {
  fs::path dir = fs::temp_directory_path() / ("archipelago-quality-test-" + std::to_string(getpid()));
  ScratchDir() { fs::remove_all(dir); }
  ~ScratchDir() { fs::remove_all(dir); }
};

nlohmann::json train(const ScratchDir& scratch, const std::string& name, const std::string& engine,
                     const std::string& mode, int inner_steps) {
  const std::string data = (fs::temp_directory_path() / "archipelago-test-data").string();
  const std::string arguments =
      "train --json --engine " + engine + " --run-dir " + (scratch.dir / name).string() +
      " --set model.preset=tiny --set data.tokenizer=bytes --set train.learners=2 --set inner.batch_size=16 --set train.mode=" + mode +
      " --set train.inner_steps=" + std::to_string(inner_steps) + " --set train.max_tokens=" + std::to_string(kTokens) +
      " --set train.max_seconds=0 --set train.seed=1 --set train.threads=1 --set runtime.store_sync=false"
      // fp32 inner steps: `auto` takes bf16 on a CPU with bf16 matmuls, which moves the losses by
      // 0.5–1 % (measured here: reference ddp 2.3187 in bf16, 2.3299 in fp32), so the golden values
      // below would depend on the CPU the tests run on.
      " --set inner.precision=fp32 --set data.cache_dir=" + data +
      // The configuration the golden values and margins were measured in, pinned where the embedded
      // default has moved since (its warm-up and held-out batches fit the default run's budget).
      " --set inner.warmup_steps=50 --set data.eval_batches=8";
  nlohmann::json summary;
  {
    auto outcome = run_cli(arguments, kRunTimeoutS);
    INFO("archipelago " << arguments);
    CAPTURE(outcome.out);
    REQUIRE(outcome.exit_code == 0);
    summary = last_line_json(outcome.out);
    REQUIRE(summary["mode"] == mode);
    REQUIRE(summary["engine"] == engine);
    REQUIRE(summary["heldout_loss"].is_number());
    REQUIRE(summary["initial_heldout_loss"].is_number());
    REQUIRE(summary["tokens"].is_number_integer());
  }
  MESSAGE(engine << " " << mode << " H=" << inner_steps << ": tokens " << summary["tokens"].get<int64_t>()
                 << ", held-out loss " << summary["initial_heldout_loss"].get<double>() << " -> "
                 << summary["heldout_loss"].get<double>());
  return summary;
}

double loss(const nlohmann::json& summary) { return summary["heldout_loss"].get<double>(); }

}  // namespace

TEST_CASE("quality: sync DiLoCo M = 2 ends within a fixed margin of data-parallel at equal tokens (reference, tiny)") {
  // Measured (seeds 1 / 2 / 3; the reference engine is deterministic for a seed, so in CI only a
  // change of the numerics moves these; the seeds show how far a legitimate change may move them):
  //   data-parallel  2.330 / 2.385 / 2.386      sync H = 50  2.512 / 2.992 / 2.776
  //   sync ÷ data-parallel − 1: +7.8 % / +25.4 % / +16.3 %.  Initial held-out loss 5.568 / 5.553 / 5.551.
  // Margin: sync ≤ data-parallel × (1 + 0.35), 10 points above the worst seed. A loss that does not
  // move (outer lr 0, merge dropped) ends at the initial loss, +139 %.
  constexpr double kSyncMargin = 0.35;
  // Both runs must learn: measured at 0.42–0.43 of the initial loss (data-parallel), 0.45–0.54 (sync).
  constexpr double kLearnedFraction = 0.65;
  // Golden values: the reference engine is deterministic for a seed, so seed 1's losses are pinned
  // within 2 %, far tighter than the margin above (measured at 1f58f73, fp32, on the 2-core AMD EPYC;
  // the same values as seed 1's above, measured earlier). A change of the numerics of either loop
  // that moves them more fails here; a deliberate one re-measures them.
  constexpr double kGoldenDdp = 2.3299, kGoldenSync = 2.5123, kGoldenTolerance = 0.02;
  ScratchDir scratch;
  const auto ddp = train(scratch, "ddp", "reference", "ddp", 50);
  const auto sync = train(scratch, "sync", "reference", "sync", 50);
  CHECK(loss(ddp) == doctest::Approx(kGoldenDdp).epsilon(kGoldenTolerance));
  CHECK(loss(sync) == doctest::Approx(kGoldenSync).epsilon(kGoldenTolerance));
  CHECK(ddp["tokens"].get<int64_t>() == kTokens);
  CHECK(sync["tokens"].get<int64_t>() == kTokens);
  REQUIRE(ddp["tokens"] == sync["tokens"]);
  CHECK(sync["rounds"].get<int64_t>() == 4);
  CHECK(ddp["initial_heldout_loss"].get<double>() == doctest::Approx(sync["initial_heldout_loss"].get<double>()));
  CHECK(loss(ddp) < kLearnedFraction * ddp["initial_heldout_loss"].get<double>());
  CHECK(loss(sync) < kLearnedFraction * sync["initial_heldout_loss"].get<double>());
  CHECK(loss(sync) <= loss(ddp) * (1 + kSyncMargin));
}

TEST_CASE("quality: decoupled ends within a fixed margin of sync and of data-parallel at equal tokens (actor runtime, tiny, M = 2)") {
  // Measured, H = 25, P = 4 fragments, K = 1, the default int4 codecs both ways and α = 0.5 mix:
  //   sync        seed 1 2.878 / 2.882 (two runs), seed 2 3.018, seed 3 3.048; at 1f58f73 seed 1 2.994
  //   decoupled   seed 1 2.400 / 2.388 / 2.323 (three runs: it varies with thread timing), seed 2 2.514,
  //               seed 3 2.467; at 1f58f73 seed 1 2.388 / 2.391
  //   data-parallel (the runtime's ddp mode: gradients averaged every step)  seed 1 2.330 at 1f58f73
  //   decoupled ÷ sync − 1: −16.6 % to −20.2 % (on `tiny` the mix keeps local progress that sync's
  //   replace throws away; bench/actors/README.md, section 2).  decoupled ÷ data-parallel − 1: −0.3 %
  //   to +3.0 % for seed 1's runs.  Initial held-out loss 5.568.
  // Margin: decoupled ≤ sync × (1 + 0.05), 21 points above the worst run; the spread of three runs
  // of one seed was 2.7 points. A learner install as bad as carry on `tiny` (+13.9 % vs sync,
  // bench/actors/README.md) fails it, and so does a global model that never moves (measured with outer.lr = 0: 5.568, +93 %).
  constexpr double kDecoupledMargin = 0.05;
  // Against data-parallel at equal tokens: decoupled ≤ data-parallel × (1 + 0.10), 7 points above the
  // worst run of seed 1 (+3.0 %); the global model that never moves is +139 %.
  constexpr double kDecoupledVsDdpMargin = 0.10;
  // Both runs must learn: measured at 0.52–0.55 of the initial loss (sync), 0.42–0.45 (decoupled).
  constexpr double kLearnedFraction = 0.65;
  ScratchDir scratch;
  const auto sync = train(scratch, "sync", "actors", "sync", 25);
  const auto decoupled = train(scratch, "decoupled", "actors", "decoupled", 25);
  const auto ddp = train(scratch, "ddp", "actors", "ddp", 25);
  CHECK(ddp["tokens"].get<int64_t>() == kTokens);
  CHECK(loss(ddp) < kLearnedFraction * ddp["initial_heldout_loss"].get<double>());
  CHECK(loss(decoupled) <= loss(ddp) * (1 + kDecoupledVsDdpMargin));
  CHECK(sync["tokens"].get<int64_t>() == kTokens);
  CHECK(decoupled["tokens"].get<int64_t>() == kTokens);
  REQUIRE(sync["tokens"] == decoupled["tokens"]);
  CHECK(loss(sync) < kLearnedFraction * sync["initial_heldout_loss"].get<double>());
  CHECK(loss(decoupled) < kLearnedFraction * decoupled["initial_heldout_loss"].get<double>());
  CHECK(loss(decoupled) <= loss(sync) * (1 + kDecoupledMargin));
}

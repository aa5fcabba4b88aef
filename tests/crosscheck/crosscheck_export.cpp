// Runs the reference engine on a short `tiny` schedule and writes what an independent
// implementation needs to replay it: the configuration, θ0, every batch consumed, every step's
// losses and the global parameters after every round. mirror.py reads this export.
//
// Usage: crosscheck_export --mode sync|ddp --out DIR
//
// DIR/export.json   format version, the setup (model, inner, outer, run), the parameter layout
//                   (name, shape, offset, numel in the flat vector), the steps in the order they
//                   were taken (learner, round, loss, cross_entropy, grad_norm, lr, tokens and
//                   which batch records they consumed) and the number of rounds
// DIR/theta0.f32    the global parameters before the first round: N little-endian float32
// DIR/rounds.f32    the global parameters after rounds 1..R: R × N float32
// DIR/batches.u8    every batch record in consumption order: batch_size × (seq_len + 1) token
//                   bytes each, row-major (inputs are [:, :T], targets [:, 1:])
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "training/reference_engine.hpp"
#include "training/replica.hpp"

using namespace archipelago::training;
using nlohmann::json;

namespace {

// The schedule under test: 3 rounds of H = 4 inner steps, M = 2; warmup over the first 3 steps,
// then cosine to 5% of the peak at step 12, so every round sees a different learning rate. The
// clipping threshold sits inside the range of this run's gradient norms (about 1.1 to 2.2), so
// both clipped and unclipped steps are checked.
constexpr int kLearners = 2;
constexpr int kInnerSteps = 4;
constexpr int kRounds = 3;

ReferenceSetup crosscheck_setup(const std::string& mode) {
  ReferenceSetup setup;
  setup.model = *model_preset("tiny");
  setup.inner.batch_size = 8;
  setup.inner.warmup_steps = 3;
  setup.inner.total_steps = kRounds * kInnerSteps;
  setup.inner.clip_norm = 1.5;
  setup.outer.merge = "token_weighted";
  setup.outer.fragments = 2;  // the outer step per fragment: gather/scatter are part of what is checked
  setup.outer.momentum_warmup = 2;  // momentum 0.45 in round 1, 0.9 from round 2: the warm-up is checked too
  setup.run.mode = *archipelago::diloco::parse_mode(mode);
  setup.run.learners = kLearners;
  setup.run.inner_steps = kInnerSteps;
  setup.run.max_tokens = static_cast<int64_t>(kRounds) * kInnerSteps * kLearners * setup.inner.batch_size *
                         setup.model.seq_len;
  setup.run.threads = 1;
  setup.data.cache_dir = (std::filesystem::temp_directory_path() / "archipelago-test-data").string();
  setup.data.eval_batches = 1;
  return setup;
}

json setup_json(const ReferenceSetup& s) {
  return {
      {"model", {{"preset", s.model.preset}, {"vocab", s.model.vocab}, {"d_model", s.model.d_model},
                 {"layers", s.model.layers}, {"heads", s.model.heads}, {"seq_len", s.model.seq_len},
                 {"mlp", s.model.mlp}, {"z_loss", s.model.z_loss}}},
      {"inner", {{"lr", s.inner.lr}, {"beta1", s.inner.beta1}, {"beta2", s.inner.beta2},
                 {"weight_decay", s.inner.weight_decay}, {"eps", s.inner.eps},
                 {"warmup_steps", s.inner.warmup_steps}, {"total_steps", s.inner.total_steps},
                 {"min_lr_fraction", s.inner.min_lr_fraction}, {"clip_norm", s.inner.clip_norm},
                 {"batch_size", s.inner.batch_size}, {"precision", s.inner.precision}}},
      {"outer", {{"optimizer", "nesterov"}, {"lr", s.outer.lr}, {"momentum", s.outer.momentum},
                 {"momentum_warmup", s.outer.momentum_warmup}, {"merge", s.outer.merge}, {"fragments", s.outer.fragments}}},
      {"run", {{"mode", archipelago::diloco::mode_name(s.run.mode)}, {"learners", s.run.learners}, {"inner_steps", s.run.inner_steps},
               {"max_tokens", s.run.max_tokens}, {"seed", s.run.seed}}},
  };
}

bool write_floats(std::ofstream& out, const std::vector<float>& values) {
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  return static_cast<bool>(out);
}

int fail(const std::string& message) {
  std::cerr << "crosscheck_export: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode, out_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--mode") == 0) mode = argv[i + 1];
    else if (std::strcmp(argv[i], "--out") == 0) out_dir = argv[i + 1];
    else return fail(std::string("unknown option ") + argv[i]);
  }
  if ((mode != "sync" && mode != "ddp") || out_dir.empty() || argc != 5) {
    return fail("usage: crosscheck_export --mode sync|ddp --out DIR");
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return fail("cannot create " + out_dir + ": " + ec.message());
  const std::filesystem::path dir(out_dir);

  set_compute_threads(1);
  const ReferenceSetup setup = crosscheck_setup(mode);
  auto corpus = load_corpus(setup.data);
  if (!corpus) return fail(corpus.error().to_string());
  auto layout_replica = Replica::create(setup.model, setup.inner, setup.run.device, setup.run.seed);
  if (!layout_replica) return fail(layout_replica.error().to_string());

  std::ofstream theta0(dir / "theta0.f32", std::ios::binary), rounds(dir / "rounds.f32", std::ios::binary),
      batches(dir / "batches.u8", std::ios::binary);
  if (!theta0 || !rounds || !batches) return fail("cannot open the output files in " + out_dir);

  json steps = json::array();
  int64_t batch_records = 0, rounds_written = 0;
  bool io_ok = true;
  ReferenceObserver observer;
  observer.step = [&](int learner, const std::vector<Batch>& consumed, const StepStats& stats) {
    json records = json::array();
    for (const auto& batch : consumed) {
      // One byte a token: the run is byte-level (data.tokenizer's default in the option struct).
      const std::vector<uint8_t> bytes(batch.tokens.begin(), batch.tokens.end());
      batches.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      records.push_back(batch_records++);
    }
    steps.push_back({{"learner", learner}, {"round", rounds_written + 1}, {"loss", stats.loss},
                     {"cross_entropy", stats.cross_entropy}, {"grad_norm", stats.grad_norm}, {"lr", stats.lr},
                     {"tokens", stats.tokens}, {"batches", records}});
  };
  observer.round = [&](int64_t round, const std::vector<float>& parameters) {
    io_ok = io_ok && write_floats(round == 0 ? theta0 : rounds, parameters);
    if (round > 0) rounds_written = round;
  };

  auto result = run_reference(setup, std::make_shared<const Corpus>(std::move(*corpus)), {}, observer);
  if (!result) return fail(result.error().to_string());
  batches.flush();
  if (!io_ok || !batches) return fail("writing the export to " + out_dir + " failed");
  if (rounds_written != kRounds) {
    return fail("the engine ran " + std::to_string(rounds_written) + " rounds, expected " + std::to_string(kRounds));
  }

  json parameters = json::array();
  for (const auto& p : (*layout_replica)->parameters()) {
    parameters.push_back({{"name", p.name}, {"shape", p.shape}, {"offset", p.offset}, {"numel", p.numel}});
  }
  json manifest = {{"format", 1},
                   {"setup", setup_json(setup)},
                   {"parameter_count", (*layout_replica)->parameter_count()},
                   {"parameters", parameters},
                   {"steps", steps},
                   {"rounds", rounds_written},
                   {"batch_records", batch_records}};
  std::ofstream manifest_file(dir / "export.json");
  manifest_file << manifest.dump(1) << "\n";
  if (!manifest_file) return fail("writing " + (dir / "export.json").string() + " failed");
  std::cout << "crosscheck_export: " << mode << ", " << steps.size() << " steps, " << rounds_written << " rounds, "
            << (*layout_replica)->parameter_count() << " parameters -> " << out_dir << "\n";
  return 0;
}

// The displacement audit of a decoupled or async run: how far its outer steps moved each fragment,
// replayed from its committed versions' manifests, against the same work merged in whole rounds.
//
// Per fragment, the commits that changed it are read from the run's RocksDB store (every version:
// run it with runtime.keep_versions = 0) in version order, with the contributions each merged and
// their credited inner steps. They are replayed in one dimension through the syncer's own pure step
// (actors/fragment_state.hpp, stage_fragment and commit_fragment) under the run's rule, with every
// contribution's Δ = its steps ÷ H (a learner's full period is 1: the signal is proportional to the
// work) and the mean merge, so that a commit's pseudo-gradient is its work share. The yardstick is the
// same total work W (in rounds of M × H steps) merged whole: ⌊W⌋ Nesterov steps of Δ = 1, then the
// rest as one plain step. The ratio run ÷ whole is 1 for a rule that does not amplify momentum by
// splitting rounds into commits; the issue that introduced the work clock measured 1.02–1.71 (2.40–4.04
// against 2.36) for the former per-commit rule.
//
//   displacement_audit --store RUN_DIR/store --learners 4 --inner-steps 50 --optimizer work_clock
//                      [--lr 0.7] [--momentum 0.9] [--mode decoupled]
// prints one JSON object: per fragment the commits, W, the run's and the whole rounds' displacement
// and their ratio.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "actors/fragment_state.hpp"
#include "diloco/mode.hpp"
#include "diloco/version_manifest.hpp"
#include "storage/checkpoint_store.hpp"
#include "training/outer.hpp"

using namespace archipelago;
using nlohmann::json;

namespace {

struct Commit {
  uint64_t version = 0;
  std::vector<int64_t> steps;  // per contribution merged
};

// The run's rule over `commits`, through the syncer's own stage and commit: θ's total movement.
Expected<double> replay(const std::vector<Commit>& commits, const actors::FragmentRules& rules) {
  auto state = actors::initial_fragment({0.0f}, rules);
  for (const auto& commit : commits) {
    for (size_t i = 0; i < commit.steps.size(); ++i) {
      actors::PendingContribution c;
      c.learner = static_cast<int>(i);
      c.steps = commit.steps[i];
      c.tokens = commit.steps[i];
      c.arrived_s = static_cast<double>(i);
      c.delta = {static_cast<float>(static_cast<double>(commit.steps[i]) / rules.inner_steps)};
      state.sum.add(c.delta.data(), training::merge_weight(c.tokens, c.steps, rules.merge), 1.0);
      state.pending.push_back(std::move(c));
    }
    auto staged = actors::stage_fragment(0, state, rules);
    if (!staged) return staged.error();
    auto rest = actors::without_pending(state);
    state = actors::commit_fragment(std::move(*staged), std::move(rest), commit.version, 64);
  }
  return -static_cast<double>(state.parameters[0]);
}

// W rounds of work merged whole: ⌊W⌋ Nesterov steps of Δ = 1, the rest as a plain step.
double whole_rounds(double work_rounds, const actors::FragmentRules& rules) {
  training::OuterState outer = training::zero_outer_state(1, false);
  float theta = 0;
  const float one = 1.0f;
  const auto whole = static_cast<int64_t>(std::floor(work_rounds + 1e-9));
  for (int64_t r = 0; r < whole; ++r) {
    training::nesterov_step(outer, &theta, &one, rules.lr,
                            training::warmed_momentum(rules.momentum, rules.momentum_warmup, outer.steps));
  }
  const double rest = work_rounds - static_cast<double>(whole);
  return -static_cast<double>(theta) + (rest > 1e-9 ? rules.lr * rest : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the displacement audit of a run's committed versions (bench/quality/README.md)"};
  std::string store_path, optimizer = "auto", mode_name = "decoupled";
  int learners = 4;
  int64_t inner_steps = 50, warmup = 0;
  double lr = 0.7, momentum = 0.9;
  app.add_option("--store", store_path, "the run's store directory (RUN_DIR/store)")->required();
  app.add_option("--learners", learners, "train.learners (M)");
  app.add_option("--inner-steps", inner_steps, "train.inner_steps (H)");
  app.add_option("--optimizer", optimizer, "outer.optimizer as configured");
  app.add_option("--mode", mode_name, "train.mode");
  app.add_option("--lr", lr, "outer.lr");
  app.add_option("--momentum", momentum, "outer.momentum");
  app.add_option("--momentum-warmup", warmup, "outer.momentum_warmup");
  CLI11_PARSE(app, argc, argv);

  auto mode = diloco::parse_mode(mode_name);
  if (!mode) return std::fprintf(stderr, "%s\n", mode.error().to_string().c_str()), 2;
  auto rule = diloco::outer_rule(*mode, optimizer);
  if (!rule) return std::fprintf(stderr, "%s\n", rule.error().to_string().c_str()), 2;
  actors::FragmentRules rules;
  rules.mode = *mode;
  rules.merge = training::MergeRule::mean;
  rules.outer = *rule;
  rules.lr = lr;
  rules.momentum = momentum;
  rules.momentum_warmup = warmup;
  rules.expected_learners = learners;
  rules.inner_steps = inner_steps;

  storage::StoreOptions options;
  options.sync = false;
  auto store = storage::CheckpointStore::open(store_path, options);
  if (!store) return std::fprintf(stderr, "%s\n", store.error().to_string().c_str()), 1;
  auto versions = (*store)->list();
  if (!versions) return std::fprintf(stderr, "%s\n", versions.error().to_string().c_str()), 1;

  std::map<int, std::vector<Commit>> commits;
  uint64_t expected = 0;
  int64_t gaps = 0;
  for (const auto& info : *versions) {
    if (expected && info.version != expected) gaps += 1;  // a version retention dropped
    expected = info.version + 1;
    auto manifest = diloco::VersionManifest::decode(info.manifest_json);
    if (!manifest) return std::fprintf(stderr, "version %llu: %s\n", static_cast<unsigned long long>(info.version),
                                       manifest.error().to_string().c_str()), 1;
    std::map<int, Commit> of_version;
    for (const auto& c : manifest->contributors) {
      auto& commit = of_version[c.fragment];
      commit.version = info.version;
      commit.steps.push_back(c.steps);
    }
    for (auto& [p, commit] : of_version) commits[p].push_back(std::move(commit));
  }
  if (gaps) {
    std::fprintf(stderr, "the store lacks %lld stretch(es) of versions: run with runtime.keep_versions = 0\n",
                 static_cast<long long>(gaps));
    return 1;
  }

  json out = {{"rule", diloco::outer_rule_name(*rule)}, {"learners", learners}, {"inner_steps", inner_steps},
              {"lr", lr}, {"momentum", momentum}, {"fragments", json::array()}};
  for (const auto& [p, list] : commits) {
    double work = 0;
    int64_t contributions = 0;
    for (const auto& c : list) {
      for (auto s : c.steps) work += static_cast<double>(s) / (static_cast<double>(learners) * inner_steps);
      contributions += static_cast<int64_t>(c.steps.size());
    }
    auto run = replay(list, rules);
    if (!run) return std::fprintf(stderr, "fragment %d: %s\n", p, run.error().to_string().c_str()), 1;
    const double whole = whole_rounds(work, rules);
    out["fragments"].push_back({{"fragment", p}, {"commits", list.size()}, {"contributions", contributions},
                                {"work_rounds", work}, {"displacement_run", *run}, {"displacement_whole", whole},
                                {"ratio", whole > 0 ? *run / whole : std::nan("")}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

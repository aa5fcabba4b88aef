// The transformer, its inner loop and the reference engine, through torch-free headers.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

#include "test_corpus.hpp"
#include "training/reference_engine.hpp"
#include "training/precision_choice.hpp"
#include "training/replica.hpp"

using namespace archipelago::training;

namespace {

ModelConfig tiny() { return *model_preset("tiny"); }

ReferenceSetup tiny_setup(const std::string& mode, int learners, int inner_steps, int64_t steps_per_learner) {
  ReferenceSetup setup;
  setup.model = tiny();
  setup.inner.batch_size = 8;
  setup.inner.warmup_steps = 5;
  setup.run.mode = *archipelago::diloco::parse_mode(mode);
  setup.run.learners = learners;
  setup.run.inner_steps = inner_steps;
  setup.run.max_tokens = steps_per_learner * learners * setup.inner.batch_size * setup.model.seq_len;
  setup.run.threads = 1;
  setup.data.eval_batches = 2;
  return setup;
}

}  // namespace

TEST_CASE("causal mask: changing token t+1 never changes logits at positions <= t") {
  set_compute_threads(1);
  auto replica = Replica::create(tiny(), InnerOptions{}, "cpu", 3);
  REQUIRE(replica.ok());
  const int T = 32, V = 256;
  std::mt19937 rng(1);
  std::vector<Token> tokens(T);
  for (auto& t : tokens) t = static_cast<Token>(rng() % 256);
  auto before = (*replica)->logits(tokens);
  REQUIRE(before.size() == static_cast<size_t>(T * V));
  for (int t : {0, 7, 30}) {
    auto changed = tokens;
    changed[t + 1] = (changed[t + 1] + 1) % 256;
    auto after = (*replica)->logits(changed);
    double max_past = 0, max_changed = 0;
    for (int pos = 0; pos <= t; ++pos) {
      for (int v = 0; v < V; ++v) max_past = std::max(max_past, std::fabs(double(after[pos * V + v]) - before[pos * V + v]));
    }
    for (int v = 0; v < V; ++v) {
      max_changed = std::max(max_changed, std::fabs(double(after[(t + 1) * V + v]) - before[(t + 1) * V + v]));
    }
    CAPTURE(t);
    CHECK(max_past < 1e-6);
    CHECK(max_changed > 1e-4);  // the position that sees the changed token does change
  }
}

TEST_CASE("KV cache: logits fed one token at a time equal the whole sequence's, to 1e-5") {
  set_compute_threads(1);
  auto replica = Replica::create(tiny(), InnerOptions{}, "cpu", 5);
  REQUIRE(replica.ok());
  const int T = tiny().seq_len, V = 256;
  std::mt19937 rng(2);
  std::vector<Token> tokens(T);
  for (auto& t : tokens) t = static_cast<Token>(rng() % 256);
  const auto whole = (*replica)->logits(tokens);
  for (int64_t prefill : {1, 9, T}) {
    CAPTURE(prefill);
    const auto stepped = (*replica)->logits_incremental(tokens, prefill);
    REQUIRE(stepped.size() == static_cast<size_t>(T * V));
    double worst = 0;
    for (size_t i = 0; i < whole.size(); ++i) worst = std::max(worst, std::fabs(double(whole[i]) - stepped[i]));
    CHECK(worst < 1e-5);
  }
}

TEST_CASE("generate: seeded draws repeat, the cache and the full context agree within the context, and past it") {
  set_compute_threads(1);
  auto replica = Replica::create(tiny(), InnerOptions{}, "cpu", 6);
  REQUIRE(replica.ok());
  const std::vector<int32_t> prompt = {84, 104, 101, 32};  // "The "
  SamplingOptions options;
  options.tokens = 40;
  options.seed = 11;
  std::vector<int32_t> emitted;
  const auto first = (*replica)->generate(prompt, options, [&](int32_t t) { emitted.push_back(t); });
  CHECK(first.size() == 40);
  CHECK(emitted == first);  // each token was handed out as it was drawn
  CHECK((*replica)->generate(prompt, options) == first);
  options.seed = 12;
  CHECK((*replica)->generate(prompt, options) != first);
  // Greedy within the context (4 + 40 < 64 positions): the cached pass picks what the full one does.
  options.temperature = 0;
  const auto cached = (*replica)->generate(prompt, options);
  options.kv_cache = false;
  CHECK((*replica)->generate(prompt, options) == cached);
  // Past the context the cache restarts from the newest half; generation goes on.
  options.kv_cache = true;
  options.tokens = 3 * tiny().seq_len;
  CHECK((*replica)->generate(prompt, options).size() == static_cast<size_t>(3 * tiny().seq_len));
}

TEST_CASE("draw_token: greedy, top-k and top-p keep to their sets, options out of range are refused") {
  const std::vector<float> logits = {0.0f, 3.0f, 2.9f, -1.0f, 3.0f};
  std::mt19937_64 rng(1);
  SamplingOptions greedy;
  greedy.temperature = 0;
  CHECK(draw_token(logits, greedy, rng) == 1);  // a tie keeps the lower id
  SamplingOptions top2;
  top2.temperature = 1;
  top2.top_k = 2;
  SamplingOptions nucleus;
  nucleus.temperature = 1;
  nucleus.top_p = 0.5;  // {1, 4}: each ~0.35 of the mass, together past 0.5
  std::map<int32_t, int> seen_k, seen_p;
  for (int i = 0; i < 2000; ++i) {
    ++seen_k[draw_token(logits, top2, rng)];
    ++seen_p[draw_token(logits, nucleus, rng)];
  }
  CHECK(seen_k.size() == 2);
  CHECK(seen_k.count(1) == 1);
  CHECK(seen_k.count(4) == 1);
  CHECK(seen_p.size() == 2);
  CHECK(seen_p.count(1) == 1);
  // Unrestricted at temperature 1, token 0 (probability e^0 / Σ ≈ 0.023) turns up near its share.
  SamplingOptions all;
  all.temperature = 1;
  int zeros = 0;
  for (int i = 0; i < 20000; ++i) zeros += draw_token(logits, all, rng) == 0;
  double total = 0;
  for (float l : logits) total += std::exp(double(l));
  CHECK(zeros / 20000.0 == doctest::Approx(1.0 / total).epsilon(0.2));
  SamplingOptions bad;
  bad.top_p = 0;
  CHECK(validate(bad).error().reason.find("--top-p") != std::string::npos);
  bad = SamplingOptions{};
  bad.temperature = -1;
  CHECK(!validate(bad).ok());
  bad = SamplingOptions{};
  bad.top_k = -2;
  CHECK(!validate(bad).ok());
  CHECK(validate(SamplingOptions{}).ok());
}

TEST_CASE("the tiny model's held-out loss drops by a clear margin within a few hundred steps") {
  set_compute_threads(2);
  auto setup = tiny_setup("sync", 1, 25, 300);
  setup.outer.lr = 1.0;
  setup.outer.momentum = 0.0;
  setup.run.eval_every = 4;
  auto result = run_reference(setup, testing::kjv());
  REQUIRE_MESSAGE(result.ok(), (result.ok() ? "" : result.error().to_string()));
  MESSAGE("held-out loss " << result->initial_heldout_loss << " -> " << result->heldout_loss);
  CHECK(result->initial_heldout_loss > 5.0);  // ~ln 256 at initialization
  CHECK(result->heldout_loss < result->initial_heldout_loss - 2.0);
  CHECK(result->steps == 300);
}

namespace {

struct Divergence {
  double max_diff = 0;   // DiLoCo vs plain AdamW parameters
  double max_moved = 0;  // plain AdamW vs its initial parameters
};

// The data cursor of learner 0 of a one-learner run of `setup`.
DataCursor first_learner_cursor(const ReferenceSetup& setup) {
  auto corpus = testing::kjv();
  auto split = split_corpus(*corpus, setup.data.split, setup.data.heldout_fraction);
  auto shards = make_shards(*corpus, *split, setup.data.sharding, 1, setup.data.chunk_bytes, setup.run.seed);
  return DataCursor(std::shared_ptr<const std::vector<Token>>(corpus, &corpus->tokens), (*shards)[0], setup.inner.batch_size,
                    setup.model.seq_len, setup.run.seed, 0);
}

// DiLoCo(M=1, H=1, outer lr 1, momentum 0) and plain AdamW for `steps` steps from the same seed.
Divergence diloco_vs_adamw(int steps) {
  auto setup = tiny_setup("sync", 1, 1, steps);
  setup.outer.lr = 1.0;
  setup.outer.momentum = 0.0;
  setup.outer.merge = "mean";
  setup.inner.total_steps = steps;
  auto diloco = run_reference(setup, testing::kjv());
  REQUIRE(diloco.ok());
  REQUIRE(diloco->steps == steps);

  auto cursor = first_learner_cursor(setup);
  auto plain = Replica::create(setup.model, setup.inner, "cpu", setup.run.seed);
  REQUIRE(plain.ok());
  auto initial = (*plain)->read_parameters();
  for (int i = 0; i < steps; ++i) (*plain)->step(cursor.next());
  auto expected = (*plain)->read_parameters();
  REQUIRE(expected.size() == diloco->final_parameters.size());
  Divergence d;
  for (size_t i = 0; i < expected.size(); ++i) {
    d.max_diff = std::max(d.max_diff, std::fabs(double(expected[i]) - diloco->final_parameters[i]));
    d.max_moved = std::max(d.max_moved, std::fabs(double(expected[i]) - initial[i]));
  }
  return d;
}

}  // namespace

TEST_CASE("DiLoCo with M=1, H=1, outer lr 1 and momentum 0 reproduces plain AdamW") {
  set_compute_threads(1);
  // One step: θ − (θ − θ_1) equals θ_1 up to the fp32 rounding of the pseudo-gradient (≤ 1 ulp).
  auto one = diloco_vs_adamw(1);
  CHECK(one.max_moved > 1e-4);
  CHECK(one.max_diff <= 1e-8);
  // Twenty steps: those ulps feed back through AdamW (which divides by √v), yet the two runs stay
  // within 0.2% of how far training moved the weights.
  auto twenty = diloco_vs_adamw(20);
  MESSAGE("after 20 steps: max |diff| " << twenty.max_diff << ", max |moved| " << twenty.max_moved);
  CHECK(twenty.max_moved > 1e-2);
  CHECK(twenty.max_diff <= 2e-3 * twenty.max_moved);
}

TEST_CASE("the reference engine is deterministic and counts the fp32 model up and down per learner and round") {
  set_compute_threads(1);
  auto setup = tiny_setup("sync", 2, 5, 10);
  auto first = run_reference(setup, testing::kjv());
  auto second = run_reference(setup, testing::kjv());
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(first->final_parameters == second->final_parameters);
  CHECK(first->rounds == 2);
  const int64_t model_bytes = first->parameters * 4;
  // Computed (the reference engine has no links): the fp32 model up and down per learner and round.
  CHECK(first->bytes_sent == 2 /*rounds*/ * model_bytes * 2 /*learners*/ * 2 /*up+down*/);

  auto ddp = run_reference(tiny_setup("ddp", 2, 5, 10), testing::kjv());
  REQUIRE(ddp.ok());
  CHECK(ddp->steps == 10);
  CHECK(ddp->tokens == first->tokens);
  CHECK(ddp->bytes_ddp_equivalent == first->bytes_ddp_equivalent);  // same tokens, same model
  CHECK(ddp->heldout_loss < ddp->initial_heldout_loss);
}

TEST_CASE("the drop fault: a round that loses every pseudo-gradient leaves theta as it was, losing some still trains") {
  set_compute_threads(1);
  auto setup = tiny_setup("sync", 2, 5, 20);  // 4 rounds of 2 learners
  setup.drop_outer_gradient = 0.999999;
  auto none = run_reference(setup, testing::kjv());
  REQUIRE(none.ok());
  CHECK(none->rounds == 4);
  CHECK(none->dropped_outer_gradients == 8);
  CHECK(none->rounds_without_outer_step == 4);
  CHECK(none->heldout_loss == none->initial_heldout_loss);  // θ0 evaluated again: no outer step was made

  setup.drop_outer_gradient = 0.5;
  auto half = run_reference(setup, testing::kjv());
  setup.drop_outer_gradient = 0;
  auto all = run_reference(setup, testing::kjv());
  REQUIRE(half.ok());
  REQUIRE(all.ok());
  CHECK(all->dropped_outer_gradients == 0);
  CHECK(half->dropped_outer_gradients > 0);
  CHECK(half->dropped_outer_gradients < 8);
  CHECK(half->tokens == all->tokens);  // the lost work was computed all the same
  CHECK(half->final_parameters != all->final_parameters);
  CHECK(half->heldout_loss < half->initial_heldout_loss);
}

TEST_CASE("bad settings are refused with the key named") {
  auto setup = tiny_setup("decoupled", 1, 1, 1);
  auto result = run_reference(setup, testing::kjv());
  REQUIRE_FALSE(result.ok());
  CHECK(result.error().reason.find("train.mode") != std::string::npos);
  setup = tiny_setup("sync", 1, 1, 1);
  setup.run.max_tokens = 0;
  CHECK(run_reference(setup, testing::kjv()).error().reason.find("max_tokens") != std::string::npos);
  CHECK(Replica::create(tiny(), InnerOptions{}, "tpu:7", 1).error().reason.find("train.device") != std::string::npos);
  CHECK_FALSE(model_preset("huge").ok());
}

TEST_CASE("fragment planner: every parameter in exactly one fragment, balanced bytes on small") {
  auto replica = Replica::create(*model_preset("small"), InnerOptions{}, "cpu", 1);
  REQUIRE(replica.ok());
  const auto& parameters = (*replica)->parameters();
  MESSAGE("small preset: " << (*replica)->parameter_count() << " parameters");
  CHECK((*replica)->parameter_count() > 2000000);
  CHECK((*replica)->parameter_count() < 6000000);
  for (std::string layout : {"balanced", "strided"}) {
    auto plan = plan_fragments(parameters, 4, layout);
    REQUIRE(plan.ok());
    std::vector<int> seen(parameters.size(), 0);
    int64_t total = 0, smallest = INT64_MAX, largest = 0;
    for (const auto& fragment : plan->fragments) {
      for (int p : fragment.parameters) seen[p] += 1;
      total += fragment.numel;
      smallest = std::min(smallest, fragment.numel);
      largest = std::max(largest, fragment.numel);
    }
    CAPTURE(layout);
    CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
    CHECK(total == (*replica)->parameter_count());
    if (layout == "balanced") CHECK(double(largest) / smallest <= 1.15);
  }
  // Gather then scatter is the identity on the flat vector.
  auto plan = plan_fragments(parameters, 4, "balanced");
  auto flat = (*replica)->read_parameters();
  std::vector<float> rebuilt(flat.size(), 0.0f);
  for (int f = 0; f < 4; ++f) {
    auto values = gather_fragment(*plan, parameters, f, flat.data());
    scatter_fragment(*plan, parameters, f, values.data(), rebuilt.data());
  }
  CHECK(rebuilt == flat);
  CHECK_FALSE(plan_fragments(parameters, 1000, "balanced").ok());
  CHECK_FALSE(plan_fragments(parameters, 4, "zigzag").ok());
}

TEST_CASE("AdamW state exported from one replica and imported into another continues the same training") {
  set_compute_threads(1);
  auto setup = tiny_setup("sync", 1, 1, 10);
  auto cursor = first_learner_cursor(setup);
  auto a = Replica::create(setup.model, setup.inner, "cpu", setup.run.seed);
  auto b = Replica::create(setup.model, setup.inner, "cpu", setup.run.seed + 1);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)->export_optimizer_state().adam_steps == 0);
  for (int i = 0; i < 7; ++i) (*a)->step(cursor.next());
  auto state = (*a)->export_optimizer_state();
  CHECK(state.schedule_steps == 7);
  CHECK(state.adam_steps == 7);
  REQUIRE(state.exp_avg.size() == static_cast<size_t>((*a)->parameter_count()));

  // b takes a's weights and AdamW state: the next step must land on the same weights.
  (*b)->write_parameters((*a)->read_parameters());
  REQUIRE((*b)->import_optimizer_state(state).ok());
  CHECK((*b)->steps_taken() == 7);
  auto batch = cursor.next();
  (*a)->step(batch);
  (*b)->step(batch);
  auto wa = (*a)->read_parameters(), wb = (*b)->read_parameters();
  double diff = 0;
  for (size_t i = 0; i < wa.size(); ++i) diff = std::max(diff, std::fabs(double(wa[i]) - wb[i]));
  CHECK(diff == 0.0);

  // Without the moments the same step lands elsewhere: the test above can fail.
  auto c = Replica::create(setup.model, setup.inner, "cpu", setup.run.seed);
  (*c)->write_parameters(wa);
  (*c)->set_steps_taken(8);
  (*a)->step(batch);
  (*c)->step(batch);
  auto wc = (*c)->read_parameters();
  wa = (*a)->read_parameters();
  double other = 0;
  for (size_t i = 0; i < wa.size(); ++i) other = std::max(other, std::fabs(double(wa[i]) - wc[i]));
  CHECK(other > 1e-5);

  // A state of the wrong size is refused and changes nothing.
  auto wrong = state;
  wrong.exp_avg.pop_back();
  CHECK_FALSE((*b)->import_optimizer_state(wrong).ok());
  CHECK((*b)->steps_taken() == 8);
}

TEST_CASE("inner.precision auto is bf16 exactly where /proc/cpuinfo lists bf16 matmuls, fp32 on CUDA") {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  bool listed = false;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream flags(line.substr(line.find(':') + 1));
    std::string flag;
    while (flags >> flag) listed = listed || flag == "avx512_bf16" || flag == "amx_bf16";
    break;
  }
  CHECK(resolve_precision("auto", "cpu") == (listed ? "bf16" : "fp32"));
  CHECK(resolve_precision("auto", "cuda:0") == "fp32");
  CHECK(resolve_precision("fp32", "cpu") == "fp32");
  CHECK(resolve_precision("bf16", "cuda") == "bf16");
}

TEST_CASE("a bf16 replica trains under autocast and evaluates in fp32: the same weights score the same") {
  set_compute_threads(1);
  auto setup = tiny_setup("sync", 1, 1, 10);
  auto cursor = first_learner_cursor(setup);
  InnerOptions bf16 = setup.inner;
  bf16.precision = "bf16";
  auto a = Replica::create(setup.model, setup.inner, "cpu", setup.run.seed);
  auto b = Replica::create(setup.model, bf16, "cpu", setup.run.seed);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  std::vector<Batch> held_out{cursor.next(), cursor.next()};
  CHECK((*a)->evaluate(held_out) == (*b)->evaluate(held_out));
  // Training differs: autocast rounds the matmuls to bf16, so one step lands elsewhere (this is what
  // makes the equality above a check of the evaluation, not of identical models).
  auto batch = cursor.next();
  auto sa = (*a)->step(batch), sb = (*b)->step(batch);
  CHECK(sa.loss != sb.loss);
  CHECK(std::fabs(sa.loss - sb.loss) < 0.05 * sa.loss);
  auto wa = (*a)->read_parameters(), wb = (*b)->read_parameters();
  double diff = 0;
  for (size_t i = 0; i < wa.size(); ++i) diff = std::max(diff, std::fabs(double(wa[i]) - wb[i]));
  CHECK(diff > 0.0);
}

TEST_CASE("inner.precision auto is measured: the faster precision wins, kept per CPU model and shape, a bad cache is replaced") {
  const auto dir = std::filesystem::temp_directory_path() / ("precision-choice-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  PrecisionProbe probe;
  probe.model = *model_preset("tiny");
  probe.inner.precision = "auto";
  probe.threads = 1;
  probe.cache_file = (dir / "precision.json").string();

  const auto first = choose_precision(probe);
  CHECK(first.how == "measured");
  CHECK(first.setting == "auto");
  REQUIRE(first.fp32_step_s > 0);
  REQUIRE(first.bf16_step_s > 0);
  // The choice follows the timings: the precision named is the one whose step was faster.
  CHECK(first.precision == (first.bf16_step_s < first.fp32_step_s ? "bf16" : "fp32"));
  CHECK(first.message.find("measured") != std::string::npos);

  const auto again = choose_precision(probe);
  CHECK(again.how == "cached");
  CHECK(again.precision == first.precision);
  CHECK(again.fp32_step_s == first.fp32_step_s);

  PrecisionProbe other_shape = probe;  // another model shape is measured apart
  other_shape.model.layers += 1;
  CHECK(choose_precision(other_shape).how == "measured");
  CHECK(choose_precision(probe).how == "cached");  // the first entry stayed beside it

  { std::ofstream(probe.cache_file, std::ios::trunc) << "not json {"; }
  const auto replaced = choose_precision(probe);
  CHECK(replaced.how == "measured");
  CHECK(replaced.message.find("not a JSON object") != std::string::npos);
  CHECK(choose_precision(probe).how == "cached");

  probe.inner.precision = "fp32";
  CHECK(choose_precision(probe).how == "set");
  probe.inner.precision = "auto";
  probe.device = "cuda:0";
  CHECK(choose_precision(probe).precision == "fp32");
  CHECK(choose_precision(probe).how == "cuda");
  std::filesystem::remove_all(dir);
}

TEST_CASE("the inner learning rate: warm-up in steps, then a cosine over total_steps or, with none, over the time budget spent") {
  using archipelago::training::InnerOptions;
  using archipelago::training::scheduled_learning_rate;
  InnerOptions o;
  o.lr = 1e-2;
  o.warmup_steps = 10;
  o.min_lr_fraction = 0.05;
  o.total_steps = 0;
  auto rate = [&](int64_t step, double spent) { return scheduled_learning_rate(o, step, spent); };
  auto near = [](double v) { return doctest::Approx(v).epsilon(1e-12).scale(0); };
  CHECK(rate(4, -1) == near(5e-3));   // warm-up: (4 + 1) / 10 of the peak, whatever the budget
  CHECK(rate(4, 0.9) == near(5e-3));
  CHECK(rate(50, -1) == near(1e-2));  // no budget to decay over: the peak
  CHECK(rate(50, 0.0) == near(1e-2));
  CHECK(rate(50, 0.5) == near(1e-2 * (0.05 + 0.95 * 0.5)));
  CHECK(rate(50, 0.25) == near(1e-2 * (0.05 + 0.95 * 0.5 * (1 + std::cos(M_PI / 4)))));
  CHECK(rate(50, 1.0) == near(5e-4));
  CHECK(rate(50, 1.7) == near(5e-4));  // past the budget (the drain): the floor
  CHECK(rate(500, 0.5) == rate(50, 0.5));  // time, not steps
  // A cosine length in steps wins over the budget.
  o.total_steps = 110;
  CHECK(rate(60, 0.9) == near(1e-2 * (0.05 + 0.95 * 0.5)));
  CHECK(rate(60, -1) == rate(60, 0.9));
}

// Benchmarks of the actor runtime (see README.md for the numbers and the commands):
//   overhead  tokens/s of one learner inside the runtime vs the bare inner loop (same model, data)
//   compare   decoupled M=4 vs sync M=4 vs ddp at equal tokens: held-out loss and bytes
//   goodput   decoupled M=4 with a learner killed every K seconds: goodput, kill -> first merge
//   codecs    decoupled M=4 at equal tokens for each uplink x downlink codec pair and H: held-out
//             loss, bytes per token up and down (measured on the links), versions per fragment round
// Usage: bench_actors overhead [preset] [steps] [threads] | compare [preset] [steps] [H] [variants] |
//        goodput [preset] [seconds] [kill-every-s] [learner-checkpoint-every] |
//        codecs [preset] [steps] [H,H,...] [up/down,up/down,...] [repeats]; one JSON line per result.
// compare's variants (comma-separated, default decoupled,sync,ddp) may add decoupled-replace,
// decoupled-mix and decoupled-carry (apply_variant); goodput takes one of them as a 6th argument.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>
#include <thread>

#include <nlohmann/json.hpp>

#include "run/cluster.hpp"
#include "actors/compute_threads.hpp"
#include "common/log.hpp"
#include "training/replica.hpp"

using namespace archipelago;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<const training::Corpus> corpus() {
  training::DataOptions data;
  auto loaded = training::load_corpus(data);
  if (!loaded) {
    std::fprintf(stderr, "corpus: %s\n", loaded.error().to_string().c_str());
    std::exit(1);
  }
  return std::make_shared<const training::Corpus>(std::move(*loaded));
}

actors::RuntimeOptions base_options(const std::string& name, const std::string& preset, const std::string& mode,
                                    int learners) {
  actors::RuntimeOptions o;
  auto& s = o.setup;
  s.model = *training::model_preset(preset);
  s.run.mode = *archipelago::diloco::parse_mode(mode);
  s.run.learners = learners;
  s.outer.fragments = 4;
  o.eval_every_versions = 1000000;  // final evaluation only: the benchmark measures training
  o.progress_interval_s = 5;
  o.run_dir = (std::filesystem::temp_directory_path() / ("archipelago-bench-" + name)).string();
  std::filesystem::remove_all(o.run_dir);
  return o;
}

// "decoupled-replace": a received global replaces the local fragment; "decoupled-mix": α = 0.5;
// "decoupled-carry": the steps taken while an update was in flight are kept (outer.install = "carry").
void apply_variant(actors::RuntimeOptions& o, const std::string& variant) {
  if (variant == "decoupled-replace") {
    o.syncer.carry_unsent = false;
    o.syncer.alpha = 0;
  } else if (variant == "decoupled-mix") {
    o.syncer.carry_unsent = false;
    o.syncer.alpha = 0.5;
  } else if (variant == "decoupled-carry") {
    o.syncer.carry_unsent = true;
  }
}

json run_cluster(actors::RuntimeOptions options, const std::shared_ptr<const training::Corpus>& text) {
  auto cluster = run::LocalCluster::start(options, text);
  if (!cluster) {
    std::fprintf(stderr, "start: %s\n", cluster.error().to_string().c_str());
    std::exit(1);
  }
  double first_tokens_s = -1, last_s = 0;
  int64_t first_tokens = 0, last_tokens = 0;
  auto result = (*cluster)->run([&](const run::ProgressSample& p) {
    std::fprintf(stderr, "  %.0fs version %llu tokens %lld alive %d/%d goodput %.3f\n", p.elapsed_s,
                 static_cast<unsigned long long>(p.version), static_cast<long long>(p.tokens), p.alive, p.total,
                 p.goodput);
    if (p.tokens > 0 && first_tokens_s < 0) {
      first_tokens_s = p.elapsed_s;
      first_tokens = p.tokens;
    }
    last_s = p.elapsed_s;
    last_tokens = p.tokens;
  });
  if (!result) {
    std::fprintf(stderr, "run: %s\n", result.error().to_string().c_str());
    std::exit(1);
  }
  const auto& r = *result;
  const double steady = last_s > first_tokens_s && first_tokens_s >= 0 ? (last_tokens - first_tokens) / (last_s - first_tokens_s) : 0;
  return {{"mode", archipelago::diloco::mode_name(r.mode)}, {"learners", r.learners}, {"inner_steps", r.inner_steps}, {"tokens", r.tokens},
          {"steps", r.steps}, {"wall_s", r.wall_s}, {"tokens_per_s_wall", r.tokens / r.wall_s},
          {"tokens_per_s_steady", steady}, {"initial_heldout_loss", r.initial_heldout_loss},
          {"heldout_loss", r.heldout_loss}, {"versions_committed", r.versions_committed},
          {"bytes_sent", r.bytes_sent}, {"bytes_up", r.bytes_up}, {"bytes_down", r.bytes_down},
          {"bytes_ddp_equivalent", r.bytes_ddp_equivalent},
          {"ddp_bytes_ratio", r.bytes_sent > 0 ? static_cast<double>(r.bytes_ddp_equivalent) / r.bytes_sent : 0.0},
          {"bytes_up_per_token", r.tokens > 0 ? static_cast<double>(r.bytes_up) / r.tokens : 0.0},
          {"bytes_down_per_token", r.tokens > 0 ? static_cast<double>(r.bytes_down) / r.tokens : 0.0},
          {"versions_per_fragment_round", r.versions_per_fragment_round},
          {"goodput", actors::to_json(r.goodput)}, {"restarts", r.restarts},
          {"rejected_updates", r.rejected_updates}, {"kill_to_merge_s", r.kill_to_merge_s},
          {"learner_compute_s", r.details["learner_supervisor"]}};
}

// The bare inner loop: one replica, learner 0's cursor, no actors.
json bare_loop(const std::string& preset, int64_t steps, int threads, const std::shared_ptr<const training::Corpus>& text) {
  training::ReferenceSetup s;
  s.model = *training::model_preset(preset);
  auto split = training::split_corpus(*text, s.data.split, s.data.heldout_fraction);
  auto shards = training::make_shards(*text, *split, s.data.sharding, 1, s.data.chunk_bytes, s.run.seed);
  actors::configure_compute_threads(threads, 1, training::resolve_precision(s.inner.precision, "cpu"));  // as the runtime does for one learner
  auto replica = training::Replica::create(s.model, s.inner, "cpu", s.run.seed);
  training::DataCursor cursor(std::shared_ptr<const std::vector<training::Token>>(text, &text->tokens), (*shards)[0], s.inner.batch_size,
                              s.model.seq_len, s.run.seed, 0);
  (*replica)->step(cursor.next());  // warm-up
  const auto begin = Clock::now();
  int64_t tokens = 0;
  for (int64_t i = 0; i < steps; ++i) tokens += (*replica)->step(cursor.next()).tokens;
  const double wall = std::chrono::duration<double>(Clock::now() - begin).count();
  return {{"bare_tokens_per_s", tokens / wall}, {"steps", steps}, {"wall_s", wall}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "overhead";
  const std::string preset = argc > 2 ? argv[2] : "small";
  init_logging({"bench", "warn", ""});
  auto text = corpus();

  if (mode == "overhead") {
    const int64_t steps = argc > 3 ? std::atoll(argv[3]) : 100;
    const int threads = argc > 4 ? std::atoi(argv[4]) : 1;  // 1: robust when other work shares the cores
    // On its own thread, as a detached learner runs (the main thread's malloc arena is slower here).
    json bare;
    std::thread([&] { bare = bare_loop(preset, steps, threads, text); }).join();
    auto o = base_options("overhead", preset, "decoupled", 1);
    o.setup.run.inner_steps = 25;
    o.setup.run.max_tokens = steps * o.setup.inner.batch_size * o.setup.model.seq_len;
    o.setup.run.threads = threads;
    auto runtime = run_cluster(o, text);
    json bare_after;  // again after the runtime: the machine's load may drift
    std::thread([&] { bare_after = bare_loop(preset, steps, threads, text); }).join();
    bare["bare_tokens_per_s_after"] = bare_after["bare_tokens_per_s"];
    bare["bare_tokens_per_s"] = (bare["bare_tokens_per_s"].get<double>() + bare_after["bare_tokens_per_s"].get<double>()) / 2;
    // The learner's own rate: its steps over the time the learner slot existed (compute + syncing).
    json out = {{"bench", "overhead"}, {"preset", preset}, {"bare", bare}, {"runtime", runtime}};
    out["ratio_steady"] = runtime["tokens_per_s_steady"].get<double>() / bare["bare_tokens_per_s"].get<double>();
    out["ratio_wall"] = runtime["tokens_per_s_wall"].get<double>() / bare["bare_tokens_per_s"].get<double>();
    std::printf("%s\n", out.dump().c_str());
  } else if (mode == "compare") {
    const int64_t steps = argc > 3 ? std::atoll(argv[3]) : 200;
    const int inner_steps = argc > 4 ? std::atoi(argv[4]) : 25;
    std::vector<std::string> variants;
    std::stringstream list(argc > 5 ? argv[5] : "decoupled,sync,ddp");
    for (std::string v; std::getline(list, v, ',');) variants.push_back(v);
    for (const auto& variant : variants) {
      const std::string m = variant.rfind("decoupled", 0) == 0 ? "decoupled" : variant;
      auto o = base_options("compare-" + variant, preset, m, 4);
      apply_variant(o, variant);
      o.setup.run.inner_steps = inner_steps;
      o.setup.run.max_tokens = steps * 4 * o.setup.inner.batch_size * o.setup.model.seq_len;
      std::fprintf(stderr, "%s ...\n", m.c_str());
      auto r = run_cluster(o, text);
      r.erase("learner_compute_s");
      std::printf("%s\n", json({{"bench", "compare"}, {"preset", preset}, {"variant", variant}, {"result", r}}).dump().c_str());
      std::fflush(stdout);
    }
  } else if (mode == "goodput") {
    const double seconds = argc > 3 ? std::atof(argv[3]) : 300;
    const double every = argc > 4 ? std::atof(argv[4]) : 30;
    auto o = base_options("goodput", preset, "decoupled", 4);
    if (argc > 5) o.learner_checkpoint_every = std::atoi(argv[5]);
    if (argc > 6) apply_variant(o, argv[6]);
    o.setup.run.inner_steps = 25;
    o.setup.run.max_seconds = seconds;
    o.faults.kill_learner_every_s = every;
    auto r = run_cluster(o, text);
    std::printf("%s\n", json({{"bench", "goodput"}, {"preset", preset}, {"seconds", seconds}, {"kill_every_s", every},
                              {"learner_checkpoint_every", o.learner_checkpoint_every}, {"result", r}})
                             .dump()
                             .c_str());
  } else if (mode == "codecs") {
    const int64_t steps = argc > 3 ? std::atoll(argv[3]) : 125;
    auto split = [](const std::string& text, char separator) {
      std::vector<std::string> parts;
      std::stringstream in(text);
      for (std::string part; std::getline(in, part, separator);) parts.push_back(part);
      return parts;
    };
    const auto horizons = split(argc > 4 ? argv[4] : "25,50,100", ',');
    const auto pairs = split(argc > 5 ? argv[5] : "fp32/fp32,fp32/int8,fp32/int4,int8/fp32,int8/int8,int8/int4,"
                                                  "int4/fp32,int4/int8,int4/int4", ',');
    const int repeats = argc > 6 ? std::atoi(argv[6]) : 1;
    for (int repeat = 0; repeat < repeats; ++repeat) {
      for (const auto& h : horizons) {
        for (const auto& pair : pairs) {
          const auto codecs = split(pair, '/');
          if (codecs.size() != 2) {
            std::fprintf(stderr, "codec pair '%s' is not up/down\n", pair.c_str());
            return 2;
          }
          auto o = base_options("codecs", preset, "decoupled", 4);
          o.setup.run.inner_steps = std::atoi(h.c_str());
          o.setup.run.max_tokens = steps * 4 * o.setup.inner.batch_size * o.setup.model.seq_len;
          o.setup.outer.codec = codecs[0];
          o.setup.outer.downlink_codec = codecs[1];
          std::fprintf(stderr, "H %s, up %s, down %s (repeat %d) ...\n", h.c_str(), codecs[0].c_str(),
                       codecs[1].c_str(), repeat);
          auto r = run_cluster(o, text);
          r.erase("learner_compute_s");
          std::printf("%s\n", json({{"bench", "codecs"}, {"preset", preset}, {"H", o.setup.run.inner_steps},
                                    {"up", codecs[0]}, {"down", codecs[1]}, {"repeat", repeat}, {"result", r}})
                                  .dump()
                                  .c_str());
          std::fflush(stdout);
        }
      }
    }
  } else {
    std::fprintf(stderr, "usage: bench_actors overhead|compare|goodput|codecs [preset] [steps|seconds] [H|kill-every]\n");
    return 2;
  }
  return 0;
}

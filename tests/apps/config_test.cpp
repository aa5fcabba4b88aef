// Configuration: the embedded default, overlays, overrides, and rejection of bad keys and values.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <doctest/doctest.h>

#include "apps/config.hpp"
#include "diloco/tunables.hpp"

using archipelago::apps::load_config;

namespace {

std::string rejection(const std::optional<std::string>& file, const std::vector<std::string>& sets) {
  auto config = load_config(file, "test.toml", sets);
  REQUIRE_FALSE(config.ok());
  return config.error().reason;
}

}  // namespace

TEST_CASE("the embedded default is valid and is the documented run") {
  auto config = load_config(std::nullopt, "", {});
  REQUIRE_MESSAGE(config.ok(), (config.ok() ? "" : config.error().reason));
  CHECK(config->model.preset == "small");
  CHECK(config->run.learners == 4);
  CHECK(config->outer.lr == doctest::Approx(0.7));
  CHECK(config->outer.momentum == doctest::Approx(0.9));
  CHECK(config->inner.beta2 == doctest::Approx(0.99));
  CHECK(config->data.corpus == "kjv");
  CHECK(config->outer.codec == "int4");           // the measured default: bench/actors/README.md, section 4
  CHECK(config->outer.downlink_codec == "int4");
  CHECK(config->outer.optimizer == "auto");        // the work clock in decoupled and async mode
}

TEST_CASE("a file overlays the default and --set overlays both") {
  std::string file = "[model]\npreset = \"tiny\"\n[train]\nlearners = 2\nmax_seconds = 5\n[outer]\nlr = 1\n";
  auto config = load_config(file, "test.toml", {"train.learners=3", "outer.merge=rda", "train.device=cuda:1",
                                                "inner.lr=1e-3", "data.corpus=\"/tmp/some text\""});
  REQUIRE_MESSAGE(config.ok(), (config.ok() ? "" : config.error().reason));
  CHECK(config->model.preset == "tiny");
  CHECK(config->model.d_model == 64);
  CHECK(config->run.learners == 3);
  CHECK(config->run.max_seconds == doctest::Approx(5.0));  // integer accepted for a float key
  CHECK(config->outer.lr == doctest::Approx(1.0));
  CHECK(config->outer.merge == "rda");
  CHECK(config->run.device == "cuda:1");
  CHECK(config->inner.lr == doctest::Approx(1e-3));
  CHECK(config->data.corpus == "/tmp/some text");
  CHECK(config->toml.find("preset = 'tiny'") != std::string::npos);
}

TEST_CASE("unknown keys and invalid values are rejected with the key named") {
  struct Case {
    std::optional<std::string> file;
    std::vector<std::string> sets;
    std::string names;
  };
  const std::vector<Case> cases = {
      {std::nullopt, {"train.bogus=1"}, "train.bogus"},
      {std::nullopt, {"nosection.key=1"}, "nosection.key"},
      {std::nullopt, {"learners=4"}, "learners=4"},
      {std::nullopt, {"train.learners=abc"}, "train.learners"},
      {std::nullopt, {"train.learners=0"}, "train.learners"},
      {std::nullopt, {"train.learners=2.5"}, "train.learners"},
      {std::nullopt, {"train.mode=fast"}, "train.mode"},
      {std::nullopt, {"model.preset=huge"}, "model.preset"},
      {std::nullopt, {"outer.momentum=1.5"}, "outer.momentum"},
      {std::nullopt, {"outer.codec=int3"}, "outer.codec"},
      {std::nullopt, {"outer.downlink_codec=fp8"}, "outer.downlink_codec"},
      {std::nullopt, {"outer.optimizer=adam"}, "outer.optimizer"},
      {std::nullopt, {"outer.screen_max_ratio=0"}, "outer.screen_max_ratio"},
      {std::nullopt, {"outer.max_norm_growth=0.5"}, "outer.max_norm_growth"},
      // A value the mode would ignore is refused, naming the key and the values the mode takes.
      {std::nullopt, {"train.mode=sync", "outer.optimizer=delayed_nesterov"}, "outer.optimizer = 'delayed_nesterov' in sync mode"},
      {std::nullopt, {"train.mode=sync", "outer.optimizer=per_commit_nesterov"}, "outer.optimizer"},
      {std::nullopt, {"train.mode=ddp", "outer.optimizer=nesterov"}, "ddp has no outer optimizer"},
      {std::nullopt, {"train.mode=sync", "train.engine=reference", "outer.optimizer=memoryless"}, "reference engine"},
      {std::nullopt, {"faults.nonfinite_learner=-2"}, "faults.nonfinite_learner"},
      {std::nullopt, {"data.heldout_fraction=0"}, "data.heldout_fraction"},
      {std::nullopt, {"inner.precision=fp8"}, "inner.precision"},
      {std::nullopt, {"runtime.learner_nice=20"}, "runtime.learner_nice: must be <= 19"},
      {std::nullopt, {"runtime.learner_nice=-1"}, "runtime.learner_nice: must be >= 0"},
      {std::string("[train]\nspeed = 3\n"), {}, "train.speed"},
      {std::string("[wat]\nx = 1\n"), {}, "wat"},
      {std::string("[train]\nlearners = \"four\"\n"), {}, "train.learners"},
      {std::string("[train\nlearners = 4\n"), {}, "test.toml:1"},
  };
  for (const auto& c : cases) {
    auto reason = rejection(c.file, c.sets);
    CAPTURE(reason);
    CHECK(reason.find(c.names) != std::string::npos);
  }
}

TEST_CASE("a runtime-tunable key is refused at start outside the bounds the console's set refuses it outside") {
  const archipelago::diloco::Tunable* grace = archipelago::diloco::find_tunable("outer.grace_max_s");
  REQUIRE(grace != nullptr);
  auto text = [](double v) {
    std::ostringstream out;
    out << v;
    return out.str();
  };
  auto at_max = load_config(std::nullopt, "", {"outer.grace_max_s=" + text(grace->max)});
  REQUIRE_MESSAGE(at_max.ok(), (at_max.ok() ? "" : at_max.error().reason));
  CHECK(at_max->syncer.grace_max_s == doctest::Approx(grace->max));
  CHECK(rejection(std::nullopt, {"outer.grace_max_s=" + text(grace->max + 1)}).find("outer.grace_max_s must be in") !=
        std::string::npos);
  CHECK(rejection(std::nullopt, {"outer.grace_max_s=100"}) == "outer.grace_max_s must be in [0, 60], not 100");
  // outer.quorum's bound is the run's learners (4 by default).
  CHECK(rejection(std::nullopt, {"outer.quorum=5"}) == "outer.quorum must be a whole number in [1, 4], not 5");
  CHECK(load_config(std::nullopt, "", {"outer.quorum=5", "train.learners=5"}).ok());
}

TEST_CASE("stragglers, the drop fault and the outer-momentum warm-up: parsed, and refused with the reason") {
  auto config = load_config(std::nullopt, "", {"faults.slow_learners=2:2,3:4.5", "faults.slow_learner=0",
                                               "faults.slow_factor=3", "outer.momentum_warmup=8"});
  REQUIRE_MESSAGE(config.ok(), (config.ok() ? "" : config.error().reason));
  const std::map<int, double> expected = {{0, 3.0}, {2, 2.0}, {3, 4.5}};
  CHECK(config->faults.slowdowns == expected);
  CHECK(config->outer.momentum_warmup == 8);
  CHECK(load_config(std::nullopt, "", {})->faults.slowdowns.empty());
  CHECK(load_config(std::nullopt, "", {})->faults.slow_jitter == 0);
  CHECK(load_config(std::nullopt, "", {"faults.slow_jitter=0.1"})->faults.slow_jitter == 0.1);
  CHECK(rejection(std::nullopt, {"faults.slow_jitter=-0.1"}).find("faults.slow_jitter: must be >= 0") != std::string::npos);
  CHECK(rejection(std::nullopt, {"faults.slow_jitter=1.5"}).find("faults.slow_jitter: must be <= 1") != std::string::npos);

  CHECK(rejection(std::nullopt, {"faults.slow_learners=2"}).find("no ':'") != std::string::npos);
  CHECK(rejection(std::nullopt, {"faults.slow_learners=x:2"}).find("not a whole number") != std::string::npos);
  CHECK(rejection(std::nullopt, {"faults.slow_learners=1:fast"}).find("not a number") != std::string::npos);
  CHECK(rejection(std::nullopt, {"faults.slow_learners=4:2"}).find("no learner 4") != std::string::npos);
  CHECK(rejection(std::nullopt, {"faults.slow_learners=1:0.5"}).find("[1, 100]") != std::string::npos);
  CHECK(rejection(std::nullopt, {"faults.slow_learners=1:2,1:3"}).find("named twice") != std::string::npos);
  CHECK(rejection(std::nullopt, {"faults.slow_learners=1:2", "faults.slow_learner=1"}).find("also in") !=
        std::string::npos);
  CHECK(rejection(std::nullopt, {"faults.slow_learner=9"}).find("does not exist") != std::string::npos);
  CHECK(rejection(std::nullopt, {"outer.momentum_warmup=-1"}).find("outer.momentum_warmup") != std::string::npos);

  CHECK(rejection(std::nullopt, {"faults.drop_outer_gradient=0.5"}).find("reference engine's sync mode") !=
        std::string::npos);  // the default: actor runtime, decoupled
  CHECK(rejection(std::nullopt, {"faults.drop_outer_gradient=1", "train.engine=reference", "train.mode=sync"})
            .find("faults.drop_outer_gradient") != std::string::npos);
  CHECK(load_config(std::nullopt, "", {"faults.drop_outer_gradient=0.5", "train.engine=reference", "train.mode=sync"})
            .ok());
}

TEST_CASE("a run directory names its syncer shard: recorded once, and another shard or an unsharded run is refused") {
  namespace fs = std::filesystem;
  using archipelago::apps::read_run_shard;
  using archipelago::apps::record_run_shard;
  const auto dir = fs::temp_directory_path() / "archipelago-shard-record-test";
  fs::remove_all(dir);
  fs::create_directories(dir / "a");
  // An unsharded run writes nothing and reads as 0 of 1.
  REQUIRE(record_run_shard((dir / "a").string(), 0, 1).ok());
  CHECK_FALSE(fs::exists(dir / "a" / "shard.json"));
  CHECK(read_run_shard((dir / "a").string())->count == 1);
  // A shard's directory keeps its identity; the same shard restarts on it, no other may.
  fs::create_directories(dir / "b");
  REQUIRE(record_run_shard((dir / "b").string(), 1, 2).ok());
  auto recorded = read_run_shard((dir / "b").string());
  REQUIRE(recorded.ok());
  CHECK(recorded->index == 1);
  CHECK(recorded->count == 2);
  CHECK(record_run_shard((dir / "b").string(), 1, 2).ok());
  auto other = record_run_shard((dir / "b").string(), 0, 2);
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().reason.find("is shard 1 of 2, not shard 0 of 2") != std::string::npos);
  CHECK_FALSE(record_run_shard((dir / "b").string(), 0, 1).ok());
  // An unsharded run that committed versions (its store exists) cannot become a shard.
  fs::create_directories(dir / "a" / "store");
  auto became = record_run_shard((dir / "a").string(), 0, 2);
  REQUIRE_FALSE(became.ok());
  CHECK(became.error().reason.find("is an unsharded run") != std::string::npos);
  // A damaged file is refused with its path.
  std::ofstream(dir / "b" / "shard.json") << "{\"index\": 2, \"count\": 2}";
  auto damaged = read_run_shard((dir / "b").string());
  REQUIRE_FALSE(damaged.ok());
  CHECK(damaged.error().reason.find("shard.json") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a restarted coordinator's configuration: run-control keys are taken, a key of what is trained is named") {
  using archipelago::apps::run_control_change;
  auto effective = [](const std::vector<std::string>& sets) {
    auto config = load_config(std::nullopt, "", sets);
    REQUIRE_MESSAGE(config.ok(), (config.ok() ? "" : config.error().reason));
    return config->toml;
  };
  const std::string running = effective({"train.max_seconds=0"});
  auto same = run_control_change(running, running);
  REQUIRE(same.ok());
  CHECK(same->keys.empty());
  CHECK(same->max_seconds == 0);
  auto longer = run_control_change(running, effective({"train.max_seconds=600", "runtime.progress_interval_s=1",
                                                        "net.reconnect_max_s=9", "log.level=debug"}));
  REQUIRE_MESSAGE(longer.ok(), (longer.ok() ? "" : longer.error().reason));
  CHECK(longer->keys == std::vector<std::string>{"log.level", "net.reconnect_max_s", "runtime.progress_interval_s",
                                                 "train.max_seconds"});
  CHECK(longer->max_seconds == 600);
  // Keys that change the model, its data or its optimizer are refused, the first one named, even
  // beside run-control keys; train.max_tokens sets the schedule (inner.total_steps = 0): refused too.
  for (const std::string key : {"model.preset=tiny", "inner.lr=0.001", "outer.momentum=0.8", "train.max_tokens=1000",
                                "data.tokenizer=bytes", "train.learners=8"}) {
    CAPTURE(key);
    auto changed = run_control_change(running, effective({"train.max_seconds=600", key}));
    REQUIRE_FALSE(changed.ok());
    CHECK(changed.error().code == archipelago::ErrorCode::conflict);
    CHECK(changed.error().reason.find(key.substr(0, key.find('='))) != std::string::npos);
  }
  // A key only one side has is a change too; text that is not TOML is refused as such.
  CHECK(run_control_change(running, running + "\n[extra]\nkey = 1\n").error().reason.find("extra.key") != std::string::npos);
  CHECK(run_control_change(running, "[[[").error().code == archipelago::ErrorCode::invalid_argument);
}

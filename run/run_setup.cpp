#include "run/run_setup.hpp"

#include <filesystem>

#include "actors/evaluator.hpp"
#include "actors/failure_monitor.hpp"
#include "actors/store_actor.hpp"
#include "actors/syncer.hpp"
#include "actors/supervisor.hpp"
#include "actors/wire.hpp"
#include "training/exported_model.hpp"
#include "training/replica.hpp"
#include "training/run_data.hpp"

namespace archipelago::run {

using namespace archipelago::actors;  // the actors a process is assembled from

Expected<ModelStart> build_model_start(const training::ReferenceSetup& setup, bool apply_init_from) {
  const auto& run = setup.run;
  auto replica = training::Replica::create(setup.model, setup.inner, run.device, run.seed);
  if (!replica) return replica.error();
  if (apply_init_from && !setup.model.init_from.empty()) {
    auto flat = training::init_from_weights(setup.model.init_from, (*replica)->parameters());
    if (!flat) return flat.error();
    (*replica)->write_parameters(*flat);
  }
  auto layout = std::make_shared<ModelLayout>();
  layout->parameters = (*replica)->parameters();
  layout->parameter_count = (*replica)->parameter_count();
  auto plan = training::plan_fragments(layout->parameters, setup.outer.fragments, setup.outer.fragment_layout);
  if (!plan) return plan.error();
  layout->plan = std::move(*plan);
  const auto theta0 = (*replica)->read_parameters();
  std::vector<std::vector<float>> initial;
  for (const auto& fragment : layout->plan.fragments) {
    initial.push_back(training::gather_fragment(layout->plan, layout->parameters, fragment.id, theta0.data()));
  }
  return ModelStart{std::move(*replica), layout, std::make_shared<InitialFragments>(std::move(initial))};
}

Expected<std::shared_ptr<storage::CheckpointStore>> open_run_store(const RuntimeOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.run_dir, ec);
  storage::StoreOptions store_options;
  store_options.sync = options.store_sync;
  store_options.retention.keep_last = options.keep_versions;
  store_options.fault_hook = options.store_fault_hook;
  auto store = storage::CheckpointStore::open((std::filesystem::path(options.run_dir) / "store").string(), store_options);
  if (!store) return store.error();
  return std::shared_ptr<storage::CheckpointStore>(std::move(*store));
}

void add_infrastructure_children(SupervisorSpec& root, std::shared_ptr<storage::CheckpointStore> store,
                                 std::shared_ptr<const RuntimeOptions> options,
                                 std::shared_ptr<InitialFragments> initial_fragments,
                                 std::shared_ptr<const std::vector<training::Batch>> heldout,
                                 std::shared_ptr<const ModelLayout> layout) {
  root.children.push_back({store_name(), "checkpoint_store", 0,
                           [=](caf::actor_system& s, const ChildContext&) { return spawn_store_actor(s, store, options->shard); }});
  root.children.push_back({monitor_name(), "failure_monitor", 0,
                           [=](caf::actor_system& s, const ChildContext&) { return spawn_failure_monitor(s, options); }});
  root.children.push_back({syncer_name(), "syncer", 0, [=](caf::actor_system& s, const ChildContext&) {
                             return spawn_syncer(s, SyncerSpec{options, initial_fragments});
                           }});
  // A syncer shard holds only its own fragments' versions: the model is assembled from every shard's
  // store (archipelago eval --run-dir per shard), not scored by one of them.
  if (options->shard.count > 1) return;
  root.children.push_back({evaluator_name(), "evaluator", 0, [=](caf::actor_system& s, const ChildContext&) {
                             return spawn_evaluator(s, EvaluatorSpec{options, heldout, layout});
                           }});
}

Expected<RunSetup> prepare_run(RuntimeOptions& options, const training::Corpus& corpus) {
  auto& setup = options.setup;
  const auto& run = setup.run;
  if (Status across = diloco::check_across_processes(run.mode); !across) {
    return make_error(ErrorCode::invalid_argument, "train.mode: " + across.error().reason);
  }
  if (run.learners < 1) return make_error(ErrorCode::invalid_argument, "train.learners must be at least 1");
  auto codec = messages::parse_codec(setup.outer.codec);
  if (!codec) return codec.error();
  auto data = training::prepare_run_data(corpus, setup);
  if (!data) return data.error();
  RunSetup out;
  out.heldout = std::make_shared<const std::vector<training::Batch>>(std::move(data->heldout));
  out.shards = std::make_shared<const std::vector<std::vector<training::Span>>>(std::move(data->shards));
  out.tokens_per_learner_step = training::tokens_per_learner_step(setup);
  out.step_limit = training::plan_step_budget(setup);
  auto start = build_model_start(setup);
  if (!start) return start.error();
  out.layout = start->layout;
  out.initial_fragments = start->initial_fragments;
  return out;
}

Expected<std::vector<float>> flat_parameters(const ModelLayout& layout, const storage::VersionData& version) {
  std::vector<float> flat(layout.parameter_count);
  for (const auto& [fragment, blob] : version.fragments) {
    if (fragment >= layout.plan.fragments.size() || blob.size() != layout.plan.fragments[fragment].numel * sizeof(float)) {
      return make_error(ErrorCode::inconsistent, "the stored model does not match this configuration");
    }
    auto values = bytes_to_floats(blob);
    training::scatter_fragment(layout.plan, layout.parameters, static_cast<int>(fragment), values.data(), flat.data());
  }
  return flat;
}

Expected<double> heldout_loss(const RuntimeOptions& options, const RunSetup& setup, const storage::VersionData* version) {
  const auto& s = options.setup;
  auto replica = training::Replica::create(s.model, s.inner, s.run.device, s.run.seed);
  if (!replica) return replica.error();
  if (version) {
    auto flat = flat_parameters(*setup.layout, *version);
    if (!flat) return flat.error();
    (*replica)->write_parameters(*flat);
  }
  return (*replica)->evaluate(*setup.heldout);
}

SupervisorSpec learner_supervisor_spec(std::shared_ptr<const RuntimeOptions> options,
                                       std::shared_ptr<const training::Corpus> corpus, const RunSetup& setup,
                                       const LearnerSlots& slots) {
  SupervisorSpec spec{"learner_supervisor", learner_supervisor_name(), options, {}, true};
  for (int i = 0; i < slots.count; ++i) {
    const int index = slots.first + i;
    ChildSpec child;
    child.name = learner_name(index);
    child.id = learner_id(index);
    child.start_step = i < static_cast<int>(slots.start_steps.size()) ? slots.start_steps[i] : 0;
    auto layout = setup.layout;
    auto shards = setup.shards;
    const int64_t step_limit = setup.step_limit;
    const auto deadline = slots.deadline;
    child.spawn = [=](caf::actor_system& system, const ChildContext& context) {
      LearnerSpec learner;
      learner.index = index;
      learner.incarnation = context.incarnation;
      learner.options = options;
      learner.corpus = corpus;
      learner.shards = {(*shards)[index]};
      learner.layout = layout;
      learner.start_step = context.last_step;
      learner.step_limit = step_limit;
      learner.run_deadline = deadline;
      learner.supervisor = context.supervisor;
      learner.crash_on_start = options->faults.crash_learner_on_start == index;
      return spawn_learner(system, std::move(learner));
    };
    spec.children.push_back(std::move(child));
  }
  return spec;
}

}  // namespace archipelago::run

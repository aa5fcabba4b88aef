#include "apps/committed_model.hpp"

#include <cmath>
#include <filesystem>

#include "apps/config.hpp"

namespace archipelago::apps {
namespace fs = std::filesystem;

std::variant<CommittedModel, LoadFailure> load_committed_model(const std::string& run_dir,
                                                               std::optional<uint64_t> wanted) {
  const fs::path dir(run_dir);
  if (!fs::is_directory(dir)) return LoadFailure{2, "no run directory " + run_dir};
  if (!fs::exists(dir / "config.toml") || !fs::is_directory(dir / "store")) {
    return LoadFailure{2, run_dir + " is not a run directory (it needs config.toml and store/)"};
  }
  auto runtime = stored_run_options(run_dir);
  if (!runtime) return LoadFailure{2, "invalid configuration: " + runtime.error().reason};
  runtime->setup.run.device = "cpu";  // what is loaded runs here, whatever trained it
  auto tokenizer = training::Tokenizer::load(runtime->setup.data.tokenizer);
  if (!tokenizer) return LoadFailure{2, tokenizer.error().reason};
  auto start = actors::build_model_start(runtime->setup, /*apply_init_from=*/false);  // the version's weights follow
  if (!start) return LoadFailure{1, "model: " + start.error().reason};
  const auto& layout = *start->layout;

  // Retention acts on commits only: a reader, which never commits, removes nothing.
  auto store = actors::open_run_store(*runtime);
  if (!store) {
    return LoadFailure{1, "cannot open the store of " + run_dir + " (is a coordinator still using it?): " +
                              store.error().reason};
  }
  // The newest version that verifies (a damaged newer one is logged by the store and passed over).
  auto latest = (*store)->latest_committed_version();
  const uint64_t newest = (*store)->high_water_version();
  if (!wanted && !latest) {
    if (newest == 0) return LoadFailure{2, run_dir + " has no committed version"};
    return LoadFailure{1, "no committed version of " + run_dir + " verifies (the newest is version " +
                              std::to_string(newest) + "): " + latest.error().reason};
  }
  const uint64_t version = wanted ? *wanted : *latest;
  auto data = (*store)->get(version);
  if (!data) {
    if (data.error().code == ErrorCode::not_found) {
      return LoadFailure{2, "version " + std::to_string(version) + " is not a committed version of " + run_dir +
                                " (latest: " + std::to_string(newest) + ")"};
    }
    return LoadFailure{1, "version " + std::to_string(version) + " does not verify: " + data.error().reason};
  }
  if (data->fragments.size() != layout.plan.fragments.size()) {
    return LoadFailure{1, "version " + std::to_string(version) + " holds " + std::to_string(data->fragments.size()) +
                              " of " + std::to_string(layout.plan.fragments.size()) + " fragments"};
  }
  auto flat = actors::flat_parameters(layout, *data);
  if (!flat) return LoadFailure{1, "version " + std::to_string(version) + ": " + flat.error().reason};
  for (float v : *flat) {
    if (!std::isfinite(v)) return LoadFailure{1, "version " + std::to_string(version) + " holds a non-finite parameter"};
  }
  return CommittedModel{std::move(*runtime), std::move(*start), std::move(*tokenizer), version, std::move(*flat)};
}

}  // namespace archipelago::apps

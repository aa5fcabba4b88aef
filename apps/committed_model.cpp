#include "apps/committed_model.hpp"

#include <cmath>
#include <filesystem>

#include "apps/config.hpp"

namespace archipelago::apps {
namespace fs = std::filesystem;

namespace {

// One run directory's version, read and verified, before its parameters are laid out.
struct LoadedVersion {
  actors::RuntimeOptions runtime;
  actors::ModelStart start;
  training::Tokenizer tokenizer;
  storage::VersionData data;
};

std::variant<LoadedVersion, LoadFailure> load_version(const std::string& run_dir, std::optional<uint64_t> wanted) {
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
  return LoadedVersion{std::move(*runtime), std::move(*start), std::move(*tokenizer), std::move(*data)};
}

std::variant<CommittedModel, LoadFailure> laid_out(LoadedVersion loaded, std::vector<uint64_t> shard_versions,
                                                   std::vector<std::string> shard_run_dirs) {
  const uint64_t version = loaded.data.version;
  auto flat = actors::flat_parameters(*loaded.start.layout, loaded.data);
  if (!flat) return LoadFailure{1, "version " + std::to_string(version) + ": " + flat.error().reason};
  for (float v : *flat) {
    if (!std::isfinite(v)) return LoadFailure{1, "version " + std::to_string(version) + " holds a non-finite parameter"};
  }
  return CommittedModel{std::move(loaded.runtime), std::move(loaded.start), std::move(loaded.tokenizer), version,
                        std::move(*flat), std::move(shard_versions), std::move(shard_run_dirs)};
}

}  // namespace

std::variant<CommittedModel, LoadFailure> load_committed_model(const std::string& run_dir,
                                                               std::optional<uint64_t> wanted) {
  auto loaded = load_version(run_dir, wanted);
  if (auto* failure = std::get_if<LoadFailure>(&loaded)) return *failure;
  auto& version = std::get<LoadedVersion>(loaded);
  if (version.runtime.shard.count > 1) {
    return LoadFailure{2, run_dir + " is syncer " + version.runtime.shard.name() + ": name every shard's run directory"};
  }
  return laid_out(std::move(version), {}, {});
}

std::variant<CommittedModel, LoadFailure> load_committed_model(const std::vector<std::string>& run_dirs,
                                                               const std::vector<uint64_t>& wanted) {
  if (run_dirs.empty()) return LoadFailure{2, "no run directory"};
  if (!wanted.empty() && wanted.size() != run_dirs.size()) {
    return LoadFailure{2, "give one version per run directory, or none (the latest of each)"};
  }
  auto version_at = [&](size_t i) { return wanted.empty() ? std::nullopt : std::optional<uint64_t>(wanted[i]); };
  if (run_dirs.size() == 1) return load_committed_model(run_dirs.front(), version_at(0));
  std::vector<std::optional<LoadedVersion>> shards(run_dirs.size());
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    const auto& dir = run_dirs[i];
    auto loaded = load_version(dir, version_at(i));
    if (auto* failure = std::get_if<LoadFailure>(&loaded)) return *failure;
    auto& version = std::get<LoadedVersion>(loaded);
    const auto shard = version.runtime.shard;
    if (shard.count != static_cast<int>(run_dirs.size())) {
      return LoadFailure{2, dir + " is " + shard.name() + ", and " + std::to_string(run_dirs.size()) +
                                " run directories were given"};
    }
    if (shards[shard.index]) return LoadFailure{2, "two run directories are shard " + std::to_string(shard.index)};
    shards[shard.index] = std::move(version);
  }
  // Shard 0's configuration and model, with every fragment from the shard that owns it.
  LoadedVersion assembled = std::move(*shards.front());
  std::vector<uint64_t> versions{assembled.data.version};
  std::vector<std::string> dirs{assembled.runtime.run_dir};
  const auto& plan = assembled.start.layout->plan;
  for (size_t i = 1; i < shards.size(); ++i) {
    auto& shard = *shards[i];
    if (shard.start.layout->plan.fragments.size() != plan.fragments.size() ||
        shard.tokenizer.hash() != assembled.tokenizer.hash()) {
      return LoadFailure{2, shard.runtime.run_dir + ": shard " + std::to_string(i) + "'s model or tokenizer is not shard 0's"};
    }
    versions.push_back(shard.data.version);
    dirs.push_back(shard.runtime.run_dir);
    for (size_t p = 0; p < plan.fragments.size(); ++p) {
      if (!shard.runtime.shard.owns(static_cast<int>(p))) continue;
      assembled.data.fragments[static_cast<uint32_t>(p)] = std::move(shard.data.fragments[static_cast<uint32_t>(p)]);
    }
  }
  return laid_out(std::move(assembled), std::move(versions), std::move(dirs));
}

}  // namespace archipelago::apps

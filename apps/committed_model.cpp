#include "apps/committed_model.hpp"

#include <cmath>
#include <filesystem>

#include "apps/config.hpp"

namespace archipelago::apps {
namespace fs = std::filesystem;

namespace {

// One run directory: its configuration, tokenizer and a replica of its model.
struct RunDirectory {
  actors::RuntimeOptions runtime;
  run::ModelStart start;
  training::Tokenizer tokenizer;
};

std::variant<RunDirectory, LoadFailure> load_run(const std::string& run_dir) {
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
  auto start = run::build_model_start(runtime->setup, /*apply_init_from=*/false);  // the version's weights follow
  if (!start) return LoadFailure{1, "model: " + start.error().reason};
  return RunDirectory{std::move(*runtime), std::move(*start), std::move(*tokenizer)};
}

// One run directory's version, read and verified, before its parameters are laid out.
struct LoadedVersion {
  RunDirectory run;
  storage::VersionData data;
};

const RunDirectory& run_of(const RunDirectory& run) { return run; }
const RunDirectory& run_of(const LoadedVersion& loaded) { return loaded.run; }

// The run directories of a sharded run in shard order: refused when their count is not the shards',
// a shard is named twice, or a shard's model or tokenizer is not shard 0's.
template <class T>
std::variant<std::vector<T>, LoadFailure> in_shard_order(std::vector<T> items) {
  std::vector<std::optional<T>> slots(items.size());
  for (auto& item : items) {
    const auto& runtime = run_of(item).runtime;
    if (runtime.shard.count != static_cast<int>(items.size())) {
      return LoadFailure{2, runtime.run_dir + " is " + runtime.shard.name() + ", and " + std::to_string(items.size()) +
                                " run directories were given"};
    }
    if (slots[runtime.shard.index]) return LoadFailure{2, "two run directories are shard " + std::to_string(runtime.shard.index)};
    slots[runtime.shard.index] = std::move(item);
  }
  std::vector<T> ordered;
  for (auto& slot : slots) ordered.push_back(std::move(*slot));
  const RunDirectory& first = run_of(ordered.front());
  for (size_t i = 1; i < ordered.size(); ++i) {
    const RunDirectory& run = run_of(ordered[i]);
    if (run.start.layout->plan.fragments.size() != first.start.layout->plan.fragments.size() ||
        run.tokenizer.hash() != first.tokenizer.hash()) {
      return LoadFailure{2, run.runtime.run_dir + ": shard " + std::to_string(i) + "'s model or tokenizer is not shard 0's"};
    }
  }
  return ordered;
}

// One run directory given alone that is one shard of several: refused, naming what is missing.
std::optional<LoadFailure> lone_shard(const std::string& run_dir, const actors::RuntimeOptions& runtime) {
  if (runtime.shard.count <= 1) return std::nullopt;
  return LoadFailure{2, run_dir + " is syncer " + runtime.shard.name() + ": name every shard's run directory"};
}

// Moves into `into` (shard 0's version) the fragments that `shard` owns, from its version.
void take_owned_fragments(storage::VersionData& into, const actors::ShardOptions& shard, storage::VersionData&& from) {
  for (auto& [p, blob] : from.fragments) {
    if (shard.owns(static_cast<int>(p))) into.fragments[p] = std::move(blob);
  }
}

Status check_fragment_count(const storage::VersionData& data, const actors::ModelLayout& layout) {
  if (data.fragments.size() == layout.plan.fragments.size()) return {};
  return make_error(ErrorCode::inconsistent, "version " + std::to_string(data.version) + " holds " +
                                                 std::to_string(data.fragments.size()) + " of " +
                                                 std::to_string(layout.plan.fragments.size()) + " fragments");
}

// `data`'s parameters in the layout's order, refused when one is not finite.
Expected<std::vector<float>> finite_parameters(const actors::ModelLayout& layout, const storage::VersionData& data) {
  auto flat = run::flat_parameters(layout, data);
  if (!flat) return make_error(flat.error().code, "version " + std::to_string(data.version) + ": " + flat.error().reason);
  for (float v : *flat) {
    if (!std::isfinite(v)) return make_error(ErrorCode::corrupt, "version " + std::to_string(data.version) + " holds a non-finite parameter");
  }
  return flat;
}

std::variant<LoadedVersion, LoadFailure> load_version(const std::string& run_dir, std::optional<uint64_t> wanted) {
  auto loaded = load_run(run_dir);
  if (auto* failure = std::get_if<LoadFailure>(&loaded)) return *failure;
  auto& run = std::get<RunDirectory>(loaded);

  // Retention acts on commits only: a reader, which never commits, removes nothing.
  auto store = run::open_run_store(run.runtime);
  if (!store) {
    return LoadFailure{1, "cannot open the store of " + run_dir + " (is a coordinator still using it? "
                              "eval --follow reads a live run): " + store.error().reason};
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
  if (Status counted = check_fragment_count(*data, *run.start.layout); !counted) return LoadFailure{1, counted.error().reason};
  return LoadedVersion{std::move(run), std::move(*data)};
}

std::variant<CommittedModel, LoadFailure> laid_out(LoadedVersion loaded, std::vector<uint64_t> shard_versions,
                                                   std::vector<std::string> shard_run_dirs) {
  auto flat = finite_parameters(*loaded.run.start.layout, loaded.data);
  if (!flat) return LoadFailure{1, flat.error().reason};
  return CommittedModel{std::move(loaded.run.runtime), std::move(loaded.run.start), std::move(loaded.run.tokenizer),
                        loaded.data.version, std::move(*flat), std::move(shard_versions), std::move(shard_run_dirs)};
}

}  // namespace

std::variant<CommittedModel, LoadFailure> load_committed_model(const std::string& run_dir,
                                                               std::optional<uint64_t> wanted) {
  auto loaded = load_version(run_dir, wanted);
  if (auto* failure = std::get_if<LoadFailure>(&loaded)) return *failure;
  auto& version = std::get<LoadedVersion>(loaded);
  if (auto lone = lone_shard(run_dir, version.run.runtime)) return *lone;
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
  std::vector<LoadedVersion> loaded;
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    auto version = load_version(run_dirs[i], version_at(i));
    if (auto* failure = std::get_if<LoadFailure>(&version)) return *failure;
    loaded.push_back(std::move(std::get<LoadedVersion>(version)));
  }
  auto ordered = in_shard_order(std::move(loaded));
  if (auto* failure = std::get_if<LoadFailure>(&ordered)) return *failure;
  auto& shards = std::get<std::vector<LoadedVersion>>(ordered);
  // Shard 0's configuration and model, with every fragment from the shard that owns it.
  LoadedVersion assembled = std::move(shards.front());
  std::vector<uint64_t> versions{assembled.data.version};
  std::vector<std::string> dirs{assembled.run.runtime.run_dir};
  for (size_t i = 1; i < shards.size(); ++i) {
    versions.push_back(shards[i].data.version);
    dirs.push_back(shards[i].run.runtime.run_dir);
    take_owned_fragments(assembled.data, shards[i].run.runtime.shard, std::move(shards[i].data));
  }
  return laid_out(std::move(assembled), std::move(versions), std::move(dirs));
}

// ---- following a live run ----------------------------------------------------------------------

struct ModelFollower::Shard {
  RunDirectory run;
  std::unique_ptr<storage::StoreFollower> store;
};

ModelFollower::ModelFollower() = default;
ModelFollower::~ModelFollower() = default;

std::variant<std::unique_ptr<ModelFollower>, LoadFailure> ModelFollower::open(const std::vector<std::string>& run_dirs) {
  if (run_dirs.empty()) return LoadFailure{2, "no run directory"};
  std::vector<RunDirectory> runs;
  for (const auto& dir : run_dirs) {
    auto run = load_run(dir);
    if (auto* failure = std::get_if<LoadFailure>(&run)) return *failure;
    runs.push_back(std::move(std::get<RunDirectory>(run)));
  }
  if (runs.size() == 1) {
    if (auto lone = lone_shard(run_dirs.front(), runs.front().runtime)) return *lone;
  }
  auto ordered = in_shard_order(std::move(runs));
  if (auto* failure = std::get_if<LoadFailure>(&ordered)) return *failure;
  std::unique_ptr<ModelFollower> follower(new ModelFollower());
  for (auto& run : std::get<std::vector<RunDirectory>>(ordered)) {
    const std::string path = (fs::path(run.runtime.run_dir) / "store").string();
    follower->shards_.push_back(Shard{std::move(run), nullptr});
    auto store = storage::StoreFollower::open(path);
    if (!store) return LoadFailure{1, "cannot follow the store of " + follower->shards_.back().run.runtime.run_dir + ": " + store.error().reason};
    follower->shards_.back().store = std::move(*store);
  }
  return follower;
}

training::Replica& ModelFollower::replica() { return *shards_.front().run.start.replica; }
const training::Tokenizer& ModelFollower::tokenizer() const { return shards_.front().run.tokenizer; }
std::vector<std::string> ModelFollower::run_dirs() const {
  std::vector<std::string> dirs;
  for (const auto& shard : shards_) dirs.push_back(shard.run.runtime.run_dir);
  return dirs;
}

Expected<std::optional<FollowedVersion>> ModelFollower::next() {
  // A store that cannot be read (its owner restarting, or a version retired between the open and
  // the read) is named in the error; the next call opens it afresh (catch_up opens it again).
  auto failed = [&](size_t i, const Error& error) -> Expected<std::optional<FollowedVersion>> {
    return make_error(error.code, shards_[i].run.runtime.run_dir + ": " + error.reason);
  };
  std::vector<storage::VersionData> data;
  std::vector<uint64_t> versions;
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (Status caught = shards_[i].store->catch_up(); !caught) return failed(i, caught.error());
    auto latest = shards_[i].store->latest_committed_version();
    if (!latest) {
      // Before its first commit a store has none; once it had one, none is a failure to read.
      if (latest.error().code == ErrorCode::not_found && last_.empty()) return std::optional<FollowedVersion>();
      return failed(i, latest.error());
    }
    versions.push_back(*latest);
  }
  if (versions == last_) return std::optional<FollowedVersion>();
  for (size_t i = 0; i < shards_.size(); ++i) {
    auto read = shards_[i].store->get(versions[i]);
    if (!read) return failed(i, read.error());
    if (Status counted = check_fragment_count(*read, *shards_[i].run.start.layout); !counted) return counted.error();
    data.push_back(std::move(*read));
  }
  storage::VersionData assembled = std::move(data.front());
  for (size_t i = 1; i < shards_.size(); ++i) {
    take_owned_fragments(assembled, shards_[i].run.runtime.shard, std::move(data[i]));
  }
  auto flat = finite_parameters(*shards_.front().run.start.layout, assembled);
  if (!flat) return flat.error();
  last_ = versions;
  return std::optional<FollowedVersion>(FollowedVersion{std::move(versions), std::move(*flat)});
}

}  // namespace archipelago::apps

// One committed version of a run, loaded for use outside training: `export` writes it out, `sample`
// generates text with it, `train` samples its final version. The version is read from the run's
// store with every blob's checksum verified, and refused with the version named when one does not.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <variant>
#include <string>
#include <vector>

#include "common/error.hpp"

#include "run/run_setup.hpp"
#include "training/tokenizer.hpp"

namespace archipelago::apps {

struct CommittedModel {
  actors::RuntimeOptions runtime;  // the run's configuration (config.toml)
  run::ModelStart start;        // a replica of the run's model (its weights are not yet the version's)
  training::Tokenizer tokenizer;   // the run's (its directory's tokenizer.model, or byte-level)
  uint64_t version = 0;            // of a sharded run: shard 0's
  std::vector<float> flat;         // the version's parameters, in the replica's order
  std::vector<uint64_t> shard_versions;  // of a sharded run: each shard's version, in shard order (empty: unsharded)
  std::vector<std::string> shard_run_dirs;  // ... and its run directory
};

struct LoadFailure {
  int exit_code;  // 2: bad input (no run directory, not a run, no such version); 1: unreadable or damaged
  std::string message;
};

// `version`: none for the latest committed. The store is opened read-only in effect (no commit, so
// no retention runs); it fails while a coordinator holds it.
std::variant<CommittedModel, LoadFailure> load_committed_model(const std::string& run_dir,
                                                               std::optional<uint64_t> version);
// A sharded run's model (one run directory per syncer shard, in any order): each fragment from the
// shard that owns it, at that shard's version in `versions` (one per directory, in their order; empty:
// each shard's latest). A model version of a sharded run is this vector. One directory: as above.
std::variant<CommittedModel, LoadFailure> load_committed_model(const std::vector<std::string>& run_dirs,
                                                               const std::vector<uint64_t>& versions);

// A live run's model, followed while it trains (archipelago eval --follow): every run directory's
// store is opened as a StoreFollower (read-only: it can be read while its coordinator or shard
// holds it, and writes nothing there), and each next() assembles the model
// from every shard's latest committed version, each fragment from its owner. The same checks as
// load_committed_model: every shard named once, the same model and tokenizer.
struct FollowedVersion {
  std::vector<uint64_t> versions;  // per shard, in shard order (one entry for an unsharded run)
  std::vector<float> flat;         // the assembled parameters, in the replica's order
};

class ModelFollower {
 public:
  static std::variant<std::unique_ptr<ModelFollower>, LoadFailure> open(const std::vector<std::string>& run_dirs);
  ~ModelFollower();

  // Catches every store up; the assembled model when some shard's latest version changed since the
  // last one returned, nothing when none did or a shard has none yet. An error names the store that
  // could not be read (the next call opens it afresh: its owner may have been restarting, or have
  // retired the version meanwhile) or the version that holds a non-finite parameter (corrupt).
  Expected<std::optional<FollowedVersion>> next();

  training::Replica& replica();                    // shard 0's model; write a FollowedVersion's flat into it
  const training::Tokenizer& tokenizer() const;
  std::vector<std::string> run_dirs() const;       // in shard order

 private:
  ModelFollower();
  struct Shard;
  std::vector<Shard> shards_;
  std::vector<uint64_t> last_;
};

}  // namespace archipelago::apps

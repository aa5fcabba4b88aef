// What a committed version says about itself, beside its blobs: the manifest the syncer writes with
// every version and everyone who reads a version back relies on (a restarted syncer, the store
// serving a learner, a resumed run, the drill's checks, `console version show`). Like LevelDB's
// VersionEdit it is a value with its own encoding: `encode()` is the JSON text the store keeps,
// `decode()` reads it back, checking every field's type.
//
// Invariants of an encoded manifest: `fragment_versions` has one entry per fragment of the model,
// none above `version`; a fragment is either in `fragments` (changed by this version, its
// fragment_version is `version`) or in `carried` (taken unchanged from the newest version); an
// initial version (θ0) has no contributors. decode() accepts a manifest written by an older build
// (a key it lacks takes its default) and ignores keys it does not know.
//
// Two parts are documents of their own, kept as JSON here and read by their owners: each fragment's
// outer-optimizer entry (actors/fragment_state.hpp, stored_entry) and the accounting that carries the
// learners' records and the goodput ledger across restarts (actors/accounting.hpp). A plain value:
// any thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "diloco/mode.hpp"

namespace archipelago::diloco {

// One learner's update merged into a fragment of this version.
struct Contribution {
  std::string learner;     // learner id
  int fragment = 0;
  uint64_t base = 0;       // the version its work started from
  double share = 0;        // the fragment's share of the merge it was part of
  uint64_t round = 0;      // the schedule slot it was due in
  bool on_time = false;    // merged in the round it was due in
  int64_t staleness = 0;   // committed versions of the fragment since `base`
  int64_t steps = 0;       // credited inner steps
  int64_t tokens = 0;      // credited tokens
  double train_loss = 0;   // the learner's training loss it reported
  bool operator==(const Contribution& o) const;
};

struct VersionManifest {
  uint64_t version = 0;
  Mode mode = Mode::sync;
  bool initial = false;                     // version 1 of a fresh run: θ0 (kind "initial")
  std::vector<int> fragments;               // changed by this version
  std::vector<int> carried;                 // taken unchanged from the newest version
  std::vector<uint64_t> fragment_versions;  // per fragment, the version that last changed it
  std::vector<Contribution> contributors;
  // Per fragment, the screening's last known update norm of each learner (learner id -> norm).
  std::vector<std::map<std::string, double>> screening_norms;
  int64_t bytes_from_learners = 0;          // the syncer's counters when it sealed this version
  int64_t bytes_to_learners = 0;
  nlohmann::json outer_state = nlohmann::json::array();   // per fragment: actors/fragment_state.hpp
  nlohmann::json accounting = nlohmann::json::object();   // actors/accounting.hpp (learners, ledger)

  // The version that last changed `fragment`: fragment_versions[fragment], or `version` when the
  // manifest names no such fragment (an old manifest).
  uint64_t version_of(int fragment) const;
  // The JSON text the store keeps (compact).
  std::string encode() const;
  // Reads `text` back. corrupt: not a JSON object, or a key of the wrong type (the reason names it);
  // inconsistent: a fragment both changed and carried, or a fragment version above `version`.
  static Expected<VersionManifest> decode(std::string_view text);
};

}  // namespace archipelago::diloco

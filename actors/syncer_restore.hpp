// The fragments' values a syncer starts from, checked against the model's fragment sizes: none yet
// (sizes only, until the store answers), θ0 of a fresh run (every fragment θ = B = θ0, zero outer
// state), or a committed version read back from the checkpoint store (per fragment B_p, the outer-
// state blob and the manifest's entry: fragment_state.hpp, from_stored). Each returns a whole new
// set of values or an error that names the fragment, never a mix. Pure functions over values; any
// thread.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/fragment_state.hpp"
#include "common/error.hpp"
#include "diloco/version_manifest.hpp"

namespace archipelago::actors {

// Fragments of `numels` values each, without values: empty running sums of the run's merge rule.
std::vector<FragmentState> sized_fragments(const std::vector<int64_t>& numels, const FragmentRules& rules);

// θ0 for fragments the sizes of `current`'s; invalid_argument when the count or a size differs.
Expected<std::vector<FragmentState>> initial_values(std::vector<std::vector<float>> initial,
                                                    const std::vector<FragmentState>& current, const FragmentRules& rules);

// Committed version `version` from what the store holds of it; the manifest gives each fragment's
// version (`fragment_versions`; all `version` when it has none) and stored entry (`outer_state`).
// inconsistent when the count or a size is not `current`'s, or an entry does not fit its blobs.
Expected<std::vector<FragmentState>> restored_values(uint64_t version, std::vector<std::vector<float>> broadcast,
                                                     std::vector<std::vector<float>> outer, const diloco::VersionManifest& manifest,
                                                     const std::vector<FragmentState>& current, const FragmentRules& rules);

}  // namespace archipelago::actors

#include "actors/syncer_restore.hpp"

#include <string>
#include <utility>

namespace archipelago::actors {

std::vector<FragmentState> sized_fragments(const std::vector<int64_t>& numels, const FragmentRules& rules) {
  std::vector<FragmentState> fragments;
  for (int64_t n : numels) {
    FragmentState f;
    f.numel = n;
    f.sum = training::MergeAccumulator(n, rules.merge, rules.merge_threads);
    fragments.push_back(std::move(f));
  }
  return fragments;
}

Expected<std::vector<FragmentState>> initial_values(std::vector<std::vector<float>> initial,
                                                    const std::vector<FragmentState>& current, const FragmentRules& rules) {
  if (initial.size() != current.size()) {
    return make_error(ErrorCode::invalid_argument, "initial parameters for " + std::to_string(initial.size()) +
                                                       " fragments, the model has " + std::to_string(current.size()));
  }
  for (size_t p = 0; p < initial.size(); ++p) {
    if (static_cast<int64_t>(initial[p].size()) != current[p].numel) {
      return make_error(ErrorCode::invalid_argument, "initial parameters of fragment " + std::to_string(p) +
                                                         " have the wrong size");
    }
  }
  std::vector<FragmentState> values;
  for (auto& fragment : initial) values.push_back(initial_fragment(std::move(fragment), rules));
  return values;
}

Expected<std::vector<FragmentState>> restored_values(uint64_t version, std::vector<std::vector<float>> broadcast,
                                                     std::vector<std::vector<float>> outer, const diloco::VersionManifest& manifest,
                                                     const std::vector<FragmentState>& current, const FragmentRules& rules) {
  if (broadcast.size() != current.size() || outer.size() != current.size()) {
    return make_error(ErrorCode::inconsistent, "stored version has " + std::to_string(broadcast.size()) +
                                                   " fragments, the model has " + std::to_string(current.size()));
  }
  std::vector<uint64_t> fragment_versions(current.size(), version);
  if (manifest.fragment_versions.size() == current.size()) fragment_versions = manifest.fragment_versions;
  const nlohmann::json& entries = manifest.outer_state;
  std::vector<FragmentState> restored;
  for (size_t p = 0; p < current.size(); ++p) {
    if (static_cast<int64_t>(broadcast[p].size()) != current[p].numel) {
      return make_error(ErrorCode::inconsistent, "stored fragment " + std::to_string(p) + " has the wrong shape");
    }
    const nlohmann::json entry = p < entries.size() ? entries[p] : nlohmann::json();
    auto value = from_stored(std::move(broadcast[p]), std::move(outer[p]), entry, fragment_versions[p], rules);
    if (!value) {
      return make_error(ErrorCode::inconsistent, "stored fragment " + std::to_string(p) + ": " + value.error().reason);
    }
    restored.push_back(std::move(*value));
  }
  return restored;
}

}  // namespace archipelago::actors

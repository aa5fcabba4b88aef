#include "training/fragments.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace archipelago::training {
namespace {

// Longest-processing-time-first: each parameter (largest first) goes to the lightest fragment.
void pack_balanced(const std::vector<ParameterInfo>& parameters, const std::vector<int>& which,
                   std::vector<Fragment>& fragments) {
  std::vector<int> order = which;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return parameters[a].numel > parameters[b].numel; });
  for (int index : order) {
    auto lightest = std::min_element(fragments.begin(), fragments.end(),
                                     [](const Fragment& a, const Fragment& b) { return a.numel < b.numel; });
    lightest->parameters.push_back(index);
    lightest->numel += parameters[index].numel;
  }
}

}  // namespace

Expected<FragmentPlan> plan_fragments(const std::vector<ParameterInfo>& parameters, int count,
                                      const std::string& layout) {
  if (count < 1) return make_error(ErrorCode::invalid_argument, "outer.fragments must be >= 1");
  if (count > static_cast<int>(parameters.size())) {
    return make_error(ErrorCode::invalid_argument,
                      "outer.fragments = " + std::to_string(count) + " exceeds the model's " +
                          std::to_string(parameters.size()) + " parameter tensors");
  }
  FragmentPlan plan;
  plan.fragments.resize(count);
  for (int i = 0; i < count; ++i) plan.fragments[i].id = i;

  std::vector<int> all(parameters.size());
  std::iota(all.begin(), all.end(), 0);
  if (layout == "balanced") {
    pack_balanced(parameters, all, plan.fragments);
  } else if (layout == "strided") {
    int layers = 0;
    for (const auto& p : parameters) layers = std::max(layers, p.layer + 1);
    if (count > layers) {
      return make_error(ErrorCode::invalid_argument,
                        "outer.fragment_layout = \"strided\" needs outer.fragments <= layers (" +
                            std::to_string(layers) + ")");
    }
    std::vector<int> unlayered;
    for (int i : all) {
      if (parameters[i].layer < 0) {
        unlayered.push_back(i);
      } else {
        auto& fragment = plan.fragments[parameters[i].layer % count];
        fragment.parameters.push_back(i);
        fragment.numel += parameters[i].numel;
      }
    }
    pack_balanced(parameters, unlayered, plan.fragments);
  } else {
    return make_error(ErrorCode::invalid_argument,
                      "outer.fragment_layout: unknown layout '" + layout + "' (expected balanced or strided)");
  }

  plan.fragment_of.assign(parameters.size(), -1);
  for (auto& fragment : plan.fragments) {
    std::sort(fragment.parameters.begin(), fragment.parameters.end());
    for (int index : fragment.parameters) plan.fragment_of[index] = fragment.id;
    plan.total_numel += fragment.numel;
  }
  return plan;
}

std::vector<float> gather_fragment(const FragmentPlan& plan, const std::vector<ParameterInfo>& parameters,
                                   int id, const float* flat) {
  const Fragment& fragment = plan.fragments.at(id);
  std::vector<float> out(fragment.numel);
  float* cursor = out.data();
  for (int index : fragment.parameters) {
    std::memcpy(cursor, flat + parameters[index].offset, parameters[index].numel * sizeof(float));
    cursor += parameters[index].numel;
  }
  return out;
}

void scatter_fragment(const FragmentPlan& plan, const std::vector<ParameterInfo>& parameters, int id,
                      const float* fragment_values, float* flat) {
  const Fragment& fragment = plan.fragments.at(id);
  for (int index : fragment.parameters) {
    std::memcpy(flat + parameters[index].offset, fragment_values, parameters[index].numel * sizeof(float));
    fragment_values += parameters[index].numel;
  }
}

}  // namespace archipelago::training

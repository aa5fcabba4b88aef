// Fragments: the units in which the outer optimizer syncs parameters (Streaming DiLoCo).
//
// The model's parameters live in one contiguous fp32 vector (see replica.hpp); each parameter
// tensor is a range of it. A `FragmentPlan` puts every parameter tensor into exactly one of P
// fragments, either by balanced bin-packing of bytes or strided by layer (layer l -> fragment
// l mod P). Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace archipelago::training {

struct ParameterInfo {
  std::string name;            // e.g. "blocks.2.attn.qkv.weight"
  std::vector<int64_t> shape;
  int64_t offset = 0;          // first element in the flat parameter vector
  int64_t numel = 0;
  int layer = -1;              // transformer block index, -1 for embeddings and final norm
};

struct Fragment {
  int id = 0;
  std::vector<int> parameters;  // indices into the ParameterInfo list, ascending
  int64_t numel = 0;
};

struct FragmentPlan {
  std::vector<Fragment> fragments;
  std::vector<int> fragment_of;  // parameter index -> fragment id
  int64_t total_numel = 0;
};

// layout: "balanced" (largest tensor first into the lightest fragment) or "strided".
Expected<FragmentPlan> plan_fragments(const std::vector<ParameterInfo>& parameters, int count,
                                      const std::string& layout);

// Copies fragment `id`'s elements out of / into a flat parameter vector, in parameter order.
std::vector<float> gather_fragment(const FragmentPlan& plan, const std::vector<ParameterInfo>& parameters,
                                   int id, const float* flat);
void scatter_fragment(const FragmentPlan& plan, const std::vector<ParameterInfo>& parameters, int id,
                      const float* fragment, float* flat);

}  // namespace archipelago::training

#include "diloco/learner_id.hpp"

namespace archipelago::diloco {

std::string learner_id(int index) { return "learner-" + std::to_string(index); }

std::vector<std::string> learner_ids(int count) {
  std::vector<std::string> ids;
  for (int m = 0; m < count; ++m) ids.push_back(learner_id(m));
  return ids;
}

int learner_index(const std::string& id) {
  static const std::string prefix = "learner-";
  if (id.size() <= prefix.size() || id.compare(0, prefix.size(), prefix) != 0) return -1;
  int value = 0;
  for (size_t i = prefix.size(); i < id.size(); ++i) {
    if (id[i] < '0' || id[i] > '9' || value > 1000000) return -1;
    value = value * 10 + (id[i] - '0');
  }
  return value;
}

}  // namespace archipelago::diloco

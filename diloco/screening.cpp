#include "diloco/screening.hpp"

#include <algorithm>
#include <utility>

namespace archipelago::diloco {

double Screening::median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  const double upper = values[mid];
  if (values.size() % 2) return upper;
  return (upper + *std::max_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid))) / 2;
}

Screening::Verdict Screening::judge(double norm, std::vector<double> known, bool probation) const {
  Verdict verdict;
  if (mode == Mode::none) return verdict;
  if (known.size() < kMinKnown) {
    verdict.action = Action::hold;
    return verdict;
  }
  const double median = Screening::median(std::move(known));
  if (!(median > 0)) return verdict;  // nothing to compare with: zero updates
  verdict.ratio = norm / median;
  if (mode == Mode::refuse && verdict.ratio > refuse) {
    verdict.action = Action::refuse;
  } else if (verdict.ratio > (probation ? this->probation : clip)) {
    verdict.action = Action::clip;
    verdict.scale = static_cast<float>((probation ? this->probation : clip) / verdict.ratio);
  }
  return verdict;
}

float absolute_scale(double delta_norm, double theta_norm, double max_ratio) {
  if (!(theta_norm > 0) || !(delta_norm > max_ratio * theta_norm)) return 1.0f;
  return static_cast<float>(max_ratio * theta_norm / delta_norm);
}

Expected<Screening::Mode> parse_screen_mode(const std::string& name) {
  if (name == "none") return Screening::Mode::none;
  if (name == "clip") return Screening::Mode::clip;
  if (name == "refuse") return Screening::Mode::refuse;
  return make_error(ErrorCode::invalid_argument, "outer.screen: unknown mode '" + name + "' (expected none, clip or refuse)");
}

const char* screen_mode_name(Screening::Mode mode) {
  switch (mode) {
    case Screening::Mode::none: return "none";
    case Screening::Mode::clip: return "clip";
    case Screening::Mode::refuse: return "refuse";
  }
  return "unknown";
}

ScreenedSteps screened_steps(uint64_t from_step, uint64_t to_step, int64_t credited_steps) {
  const int64_t credited = std::max<int64_t>(1, credited_steps);
  const auto from = static_cast<int64_t>(from_step), to = static_cast<int64_t>(to_step);
  const int64_t count = to > from ? std::min(to - from, credited) : credited;
  return {std::max<int64_t>(0, to - count), count};
}

}  // namespace archipelago::diloco

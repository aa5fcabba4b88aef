// Deterministic test vectors shared by the messages tests: gaussian and heavy-tailed, sparse
// "pseudo-gradient-like" data, and the relative L2 error used to judge lossy codecs.
#pragma once

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace archipelago::messages::test {

inline std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

// Student-t (2 degrees of freedom: infinite variance, rare huge outliers) on a 10% support; the
// rest is small noise. Outer pseudo-gradients look like this: a few coordinates dominate.
inline std::vector<float> heavy_tailed(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> student(2.0f);
  std::normal_distribution<float> noise(0.0f, 0.01f);
  std::bernoulli_distribution active(0.1);
  std::vector<float> v(n);
  for (auto& x : v) x = active(rng) ? student(rng) : noise(rng);
  return v;
}

// A smooth ramp sin(0.001 i): large enough counts need several chunks (kMaxChunkBytes each).
inline std::vector<float> ramp(size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = std::sin(0.001f * static_cast<float>(i));
  return values;
}

inline double relative_l2(const std::vector<float>& truth, const std::vector<float>& approx) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < truth.size(); ++i) {
    const double d = double(truth[i]) - double(approx[i]);
    err += d * d;
    norm += double(truth[i]) * double(truth[i]);
  }
  return std::sqrt(err / norm);
}

}  // namespace archipelago::messages::test

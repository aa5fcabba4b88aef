// The outer Nesterov step checked against LibTorch's own SGD(nesterov=true).
// Torch's glog CHECK macros clash with doctest's, so this file uses the prefixed doctest macros.
#include <torch/torch.h>

#define DOCTEST_CONFIG_NO_SHORT_MACRO_NAMES
#include <doctest/doctest.h>

#include "training/outer.hpp"

using namespace archipelago::training;

DOCTEST_TEST_CASE("outer Nesterov equals torch::optim::SGD(nesterov=true) to 1e-6") {
  torch::manual_seed(0);
  const int64_t n = 10000;
  auto initial = torch::randn({n});
  auto param = initial.clone().requires_grad_(true);
  torch::optim::SGD sgd({param}, torch::optim::SGDOptions(0.7).momentum(0.9).nesterov(true));

  std::vector<float> ours(initial.data_ptr<float>(), initial.data_ptr<float>() + n);
  NesterovOuter outer(n, 0.7, 0.9);
  for (int step = 0; step < 10; ++step) {
    auto delta = torch::randn({n}) * 0.01;
    param.mutable_grad() = delta.clone();
    sgd.step();
    outer.step(ours.data(), delta.data_ptr<float>());
    auto expected = param.detach().contiguous();
    const float* values = expected.data_ptr<float>();
    double max_diff = 0;
    for (int64_t i = 0; i < n; ++i) max_diff = std::max(max_diff, std::fabs(double(ours[i]) - values[i]));
    DOCTEST_CHECK(max_diff <= 1e-6);
  }
}

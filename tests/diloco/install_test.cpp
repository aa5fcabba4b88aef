// diloco/install: installing a global fragment against θ_ref (replace, mix, carry). Table-driven where it fits.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "diloco/install.hpp"

using namespace archipelago::diloco;

TEST_CASE("policy: installing a global fragment replaces, mixes or carries the unsent steps") {
  const std::vector<float> global = {10, 20, 30};
  // The learner sent at θ_ref = {1, 2, 3} and has taken steps since: θ = {1.5, 2, 2}.
  auto install = [&](InstallMode mode, double alpha) {
    std::vector<float> local = {1.5f, 2, 2}, ref = {1, 2, 3};
    install_global(mode, alpha, local.data(), ref.data(), global.data(), 3);
    CHECK(ref == global);  // the next update is measured from the new global in every mode
    return local;
  };
  CHECK(install(InstallMode::replace, 0) == global);
  CHECK(install(InstallMode::mix, 0.5) == std::vector<float>{5.75f, 11, 16});
  // carry: θ_G plus exactly the work since the send ({0.5, 0, −1}), which the next update will carry.
  CHECK(install(InstallMode::carry, 0) == std::vector<float>{10.5f, 20, 29});
  CHECK(install_mode(true, 0) == InstallMode::carry);
  CHECK(install_mode(false, 0) == InstallMode::replace);
  CHECK(install_mode(false, 0.3) == InstallMode::mix);
}

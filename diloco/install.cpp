#include "diloco/install.hpp"


namespace archipelago::diloco {

InstallMode install_mode(bool carry_unsent, double alpha) {
  if (carry_unsent) return InstallMode::carry;
  return alpha == 0 ? InstallMode::replace : InstallMode::mix;
}

void install_global(InstallMode mode, double alpha, float* local, float* ref, const float* global, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    switch (mode) {
      case InstallMode::replace: local[i] = global[i]; break;
      case InstallMode::mix: local[i] = static_cast<float>(alpha * local[i] + (1 - alpha) * global[i]); break;
      case InstallMode::carry: local[i] = global[i] + (local[i] - ref[i]); break;
    }
    ref[i] = global[i];
  }
}

}  // namespace archipelago::diloco

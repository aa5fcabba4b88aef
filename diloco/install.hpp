// Installing a received global fragment on a learner against the point its unsent work is measured
// from (θ_ref): the install step of the θ_ref algebra, whose other steps (send, recover, restore)
// and bookkeeping are diloco/fragment_slot.hpp's, its one caller. Installing θ_G sets θ_ref ← θ_G
// in every mode. Pure; any thread.
#pragma once

#include <cstdint>

namespace archipelago::diloco {

// ---- Installing a received global fragment on a learner --------------------------------------------
// `local`: the learner's θ_p; `ref`: the point its unsent work is measured from (its update is
// Δ_p = θ_ref − θ_local, and sending one sets θ_ref ← θ_local); `global`: the new θ_G,p.
//   replace  θ ← θ_G                       (α = 0; the steps taken since the last send are lost)
//   mix      θ ← α·θ + (1−α)·θ_G
//   carry    θ ← θ_G + (θ − θ_ref)          (the unsent steps are kept and go out with the next update)
// Then θ_ref ← θ_G in every mode, so the next update carries exactly what the global does not hold.
enum class InstallMode { replace, mix, carry };
InstallMode install_mode(bool carry_unsent, double alpha);
void install_global(InstallMode mode, double alpha, float* local, float* ref, const float* global, int64_t n);

}  // namespace archipelago::diloco

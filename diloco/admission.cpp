#include "diloco/admission.hpp"

namespace archipelago::diloco {

AdmissionDecision admit_update(Mode mode, const UpdateClaim& claim, const AdmissionState& state,
                               const AdmissionBounds& bounds) {
  AdmissionDecision d;
  d.work = credit_work(claim.inner_steps, claim.tokens, bounds.largest_period, bounds.tokens_per_step);
  if (!d.work.accept) {
    d.refused = UpdateRefusal::implausible_claim;
    d.reason = d.work.reason;
    return d;
  }
  if (staggered(mode)) {
    if (claim.from_step < state.received_until) {
      d.refused = UpdateRefusal::duplicate;
      d.reason = "its work starts before the end of work already accepted from it (step " +
                 std::to_string(state.received_until) + ")";
      return d;
    }
  } else if (state.same_base_pending) {
    d.refused = UpdateRefusal::duplicate;
    d.reason = "an update of it on the same base is pending";
    return d;
  }
  const StalenessDecision staleness =
      check_staleness(claim.base_version, state.commit_versions, state.latest_version, bounds.max_staleness);
  d.staleness = staleness.staleness;
  if (!staleness.accept) {
    d.refused = UpdateRefusal::stale;
    d.reason = staleness.reason;
  }
  return d;
}

}  // namespace archipelago::diloco

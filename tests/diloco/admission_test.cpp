// diloco/admission: an update's claim, duplicates by mode and staleness, in that order.
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "diloco/admission.hpp"

using namespace archipelago::diloco;

namespace {

// A fragment committed at versions 1, 3 and 5 (latest 5), H = 10, 100 tokens a step, bound 1.
AdmissionState fragment_state(uint64_t received_until = 0, bool same_base_pending = false) {
  return {received_until, same_base_pending, {1, 3, 5}, 5};
}
const AdmissionBounds kBounds{10, 100, 1};

}  // namespace

TEST_CASE("admission: an honest update is admitted with the syncer's figures and its staleness") {
  auto d = admit_update(Mode::decoupled, {10, 1000, 3, 20}, fragment_state(20), kBounds);
  CHECK(d.refused == UpdateRefusal::none);
  CHECK(d.work.steps == 10);
  CHECK(d.work.tokens == 1000);
  CHECK_FALSE(d.work.corrected);
  CHECK(d.staleness == 1);  // version 5 came after its base 3
  auto claims = admit_update(Mode::decoupled, {10, 5000, 5, 20}, fragment_state(20), kBounds);
  CHECK(claims.refused == UpdateRefusal::none);
  CHECK(claims.work.tokens == 1000);  // credited, not claimed
  CHECK(claims.work.corrected);
}

TEST_CASE("admission: a claim of 0 steps is refused before anything else, with no work credited") {
  // Also a repeat and stale: the claim is what it is refused for.
  auto d = admit_update(Mode::decoupled, {0, 0, 1, 0}, fragment_state(20), kBounds);
  CHECK(d.refused == UpdateRefusal::implausible_claim);
  CHECK(d.work.steps == 0);
  CHECK(d.reason.find("0 inner steps") != std::string::npos);
}

TEST_CASE("admission: staggered modes refuse work that starts before what was accepted, sync refuses a second on one base") {
  for (Mode mode : {Mode::decoupled, Mode::async}) {
    CAPTURE(mode_name(mode));
    auto repeat = admit_update(mode, {10, 1000, 5, 14}, fragment_state(20), kBounds);
    CHECK(repeat.refused == UpdateRefusal::duplicate);
    CHECK(repeat.reason.find("step 20") != std::string::npos);
    CHECK(admit_update(mode, {10, 1000, 5, 20}, fragment_state(20), kBounds).refused == UpdateRefusal::none);
    // Two pending on one base are distinct work here (an old incarnation's and the new one's).
    CHECK(admit_update(mode, {10, 1000, 5, 20}, fragment_state(20, true), kBounds).refused == UpdateRefusal::none);
  }
  auto redone = admit_update(Mode::sync, {10, 1000, 5, 0}, fragment_state(0, true), kBounds);
  CHECK(redone.refused == UpdateRefusal::duplicate);
  CHECK(redone.reason.find("same base") != std::string::npos);
  // Sync learners redo rounds from the same data position after a restart: not a duplicate by position.
  CHECK(admit_update(Mode::sync, {10, 1000, 5, 0}, fragment_state(20), kBounds).refused == UpdateRefusal::none);
}

TEST_CASE("admission: a repeat is refused as a duplicate before its staleness, past the bound is stale") {
  auto both = admit_update(Mode::decoupled, {10, 1000, 1, 0}, fragment_state(20), kBounds);
  CHECK(both.refused == UpdateRefusal::duplicate);
  auto stale = admit_update(Mode::decoupled, {10, 1000, 1, 20}, fragment_state(20), kBounds);
  CHECK(stale.refused == UpdateRefusal::stale);
  CHECK(stale.staleness == 2);
  CHECK(stale.work.steps == 10);  // what the refusal wasted
  auto future = admit_update(Mode::decoupled, {10, 1000, 9, 20}, fragment_state(20), kBounds);
  CHECK(future.refused == UpdateRefusal::stale);
  CHECK(future.reason.find("newer") != std::string::npos);
}

// diloco/fragment_slot: the learner's θ_ref algebra of one fragment (start, send, install, recover,
// snapshot/restore) and its bookkeeping (the update in flight, the unsent work). Values are chosen
// so every expected float is exact. Table-driven where it fits.
#include <vector>

#include <doctest/doctest.h>

#include "diloco/fragment_slot.hpp"
#include "diloco/merge_rules.hpp"

using namespace archipelago::diloco;
using Values = std::vector<float>;

namespace {

const Values kInitial = {1, 2, 3};     // θ_G of version 1
const Values kGlobal = {10, 20, 30};   // θ_G of version 2

// A slot started from kInitial at step 0 that trained 2 steps to `local`.
FragmentSlot trained(Values& local) {
  FragmentSlot slot;
  local = slot.start(kInitial, 1, 0);
  local = {1.5f, 2, 2};
  slot.record_step(0.25, 100, 4.0);
  slot.record_step(0.5, 100, 2.0);
  return slot;
}

}  // namespace

TEST_CASE("fragment slot: start sets θ and θ_ref to the global, with nothing unsent or in flight") {
  FragmentSlot slot;
  CHECK(slot.ref().empty());
  const Values local = slot.start(kInitial, 1, 7);
  CHECK(local == kInitial);
  CHECK(slot.ref() == kInitial);
  CHECK(slot.version() == 1);
  CHECK_FALSE(slot.outstanding());
  CHECK_FALSE(slot.holds_work());
  CHECK_FALSE(slot.restored());
  CHECK(slot.work().since_step == 7);
  CHECK(slot.pseudo_gradient(local) == Values{0, 0, 0});
}

TEST_CASE("fragment slot: sending measures Δ = θ_ref − θ_local, then θ_ref ← θ_local, the work starts over") {
  Values local;
  FragmentSlot slot = trained(local);
  CHECK(slot.holds_work());
  CHECK(slot.work().steps == 2);
  CHECK(slot.work().tokens == 200);
  CHECK(slot.work().compute_s == 0.75);
  CHECK(slot.work().mean_loss() == 3.0);

  const Values delta = slot.pseudo_gradient(local);
  CHECK(delta == Values{-0.5f, 0, 1});
  CHECK(slot.ref() == kInitial);  // measuring moves nothing: the update may still fail to leave
  CHECK_FALSE(slot.outstanding());

  slot.sent(local, 10);
  CHECK(slot.ref() == local);
  CHECK(slot.pseudo_gradient(local) == Values{0, 0, 0});  // sent work is never sent twice
  CHECK(slot.outstanding());
  CHECK(slot.version() == 1);  // the base of the update in flight
  CHECK_FALSE(slot.holds_work());
  CHECK(slot.work().since_step == 10);
  CHECK(slot.work().tokens == 0);
  CHECK(slot.work().loss_sum == 0);
  CHECK(slot.work().compute_s == 0);
  CHECK(slot.work().mean_loss() == 0);
}

TEST_CASE("fragment slot: send, more steps, then install in each mode gives the values of install_global") {
  struct Case {
    const char* name;
    InstallMode mode;
    double alpha;
    Values local;  // θ after the install
  };
  // Sent at θ = {1.5, 2, 2}, then trained on to θ = {2, 1, 2}: the unsent work is {0.5, −1, 0}.
  const Case cases[] = {
      {"replace", InstallMode::replace, 0, kGlobal},
      {"mix", InstallMode::mix, 0.5, {6, 10.5f, 16}},   // α·θ + (1−α)·θ_G
      {"mix α=0.25", InstallMode::mix, 0.25, {8, 15.25f, 23}},
      {"carry", InstallMode::carry, 0, {10.5f, 19, 30}},  // θ_G + (θ − θ_ref)
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    Values local;
    FragmentSlot slot = trained(local);
    slot.sent(local, 10);
    local = {2, 1, 2};
    slot.record_step(0.5, 100, 1.0);
    slot.answered(2);
    slot.install(c.mode, c.alpha, local, kGlobal, 2);
    CHECK(local == c.local);
    CHECK(slot.ref() == kGlobal);  // the next update is measured from the new global in every mode
    CHECK(slot.version() == 2);
    CHECK_FALSE(slot.outstanding());
    CHECK(slot.holds_work());      // installing keeps the count of unsent steps
    CHECK(slot.work().since_step == 10);
    Values expected_delta(3);
    for (int i = 0; i < 3; ++i) expected_delta[i] = kGlobal[i] - c.local[i];
    CHECK(slot.pseudo_gradient(local) == expected_delta);
  }
}

TEST_CASE("fragment slot: an update stays in flight until a newer global, a new syncer or the resend period") {
  struct Case {
    const char* name;
    uint64_t arriving;  // version of a global that arrives (0: none)
    int64_t now;        // step at which the resend rule is checked (sent at step 10, period 5)
    bool forget;        // a new syncer welcomed the learner
    bool outstanding;
  };
  const int period = 5;
  const int64_t resend = 10 + kResendAfterPeriods * period;
  const Case cases[] = {
      {"nothing happened", 0, 11, false, true},
      {"the global it was based on", 1, 11, false, true},
      {"a newer global", 2, 11, false, false},
      {"one step before the resend", 0, resend - 1, false, true},
      {"kResendAfterPeriods periods later", 0, resend, false, false},
      {"a new syncer", 0, 11, true, false},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    Values local;
    FragmentSlot slot = trained(local);
    slot.sent(local, 10);
    if (c.arriving > 0) slot.answered(c.arriving);
    if (c.forget) slot.forget_outstanding();
    slot.expire_outstanding(c.now, period);
    CHECK(slot.outstanding() == c.outstanding);
  }
}

TEST_CASE("fragment slot: a reset slot holds nothing unsent, start leaves nothing in flight, recover keeps it") {
  Values local;
  FragmentSlot slot = trained(local);
  slot.sent(local, 10);
  slot.record_step(0.5, 100, 1.0);
  slot.install(InstallMode::replace, 0, local, kGlobal, 2);

  FragmentSlot recovered = slot;
  recovered.sent(Values{7, 7, 7}, 12);  // an update left; then the model went NaN
  recovered.record_step(0.5, 100, 1.0);
  recovered.recover(kGlobal, 13);
  CHECK(recovered.ref() == kGlobal);
  CHECK_FALSE(recovered.holds_work());
  CHECK(recovered.work().since_step == 13);
  CHECK(recovered.work().tokens == 0);
  CHECK(recovered.outstanding());    // it left before the NaN: its answer still comes
  CHECK(recovered.version() == 2);   // the version held is unchanged

  FragmentSlot started = recovered;
  const Values fresh = started.start(kInitial, 1, 20);
  CHECK(fresh == kInitial);
  CHECK(started.ref() == kInitial);
  CHECK(started.version() == 1);
  CHECK_FALSE(started.outstanding());
  CHECK_FALSE(started.holds_work());
  CHECK(started.work().since_step == 20);
}

TEST_CASE("fragment slot: rebase moves θ_ref only (ddp)") {
  Values local;
  FragmentSlot slot = trained(local);
  const Values before = local;
  slot.rebase(kGlobal, 3);
  CHECK(local == before);
  CHECK(slot.ref() == kGlobal);
  CHECK(slot.version() == 3);
  CHECK(slot.holds_work());
}

TEST_CASE("fragment slot: a snapshot restored on a newer global reproduces the unsent work") {
  struct Case {
    const char* name;
    int64_t steps;           // inner steps in the saved work
    int64_t received_until;  // how far the syncer has this learner's work
    bool restores;           // restore() applies it
    bool restored_flag;      // the slot sends it after the first step
  };
  // The saved work began at step 5.
  const Case cases[] = {
      {"the syncer has none of it", 2, 0, true, true},
      {"the syncer has work up to its start", 2, 5, true, true},
      {"an update after the checkpoint carried it", 2, 6, false, false},
      {"no steps: applied, nothing to send early", 0, 6, true, false},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    FragmentSlot before;
    Values local = before.start(kInitial, 1, 5);
    local = {1.5f, 2, 2};
    for (int64_t s = 0; s < c.steps; ++s) before.record_step(0.25, 64, 3.0);
    const SavedWork saved = before.snapshot(local);
    CHECK(saved.unsent == Values{0.5f, 0, -1});  // θ − θ_ref, never θ itself
    CHECK(saved.version == 1);
    CHECK(saved.work.steps == c.steps);
    CHECK(saved.work.since_step == 5);

    FragmentSlot after;
    Values restarted = after.start(kGlobal, 2, 9);
    CHECK(after.restore(saved, c.received_until, restarted) == c.restores);
    CHECK(after.restored() == c.restored_flag);
    CHECK(after.ref() == kGlobal);
    CHECK(after.version() == 2);
    if (c.restores) {
      CHECK(restarted == Values{10.5f, 20, 29});  // θ_G + u
      CHECK(after.pseudo_gradient(restarted) == before.pseudo_gradient(local));  // the same Δ goes out
      CHECK(after.work().steps == c.steps);
      CHECK(after.work().tokens == 64 * c.steps);
      CHECK(after.work().loss_sum == 3.0 * static_cast<double>(c.steps));
      CHECK(after.work().since_step == 5);
    } else {
      CHECK(restarted == kGlobal);
      CHECK_FALSE(after.holds_work());
      CHECK(after.work().since_step == 9);
    }
    if (c.restored_flag) {
      after.sent(restarted, 10);
      CHECK_FALSE(after.restored());  // once sent it is ordinary work gone out
    }
  }
}

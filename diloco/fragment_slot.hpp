// The learner's side of one fragment as a value: θ_ref,p (the point its unsent work is measured
// from), the global version it holds, the update in flight, and the counters of the work not yet
// sent. Every step of the θ_ref algebra is one operation here, over plain float buffers (θ_local,p
// in the fragment's gather order, read from and written back to the model by the caller):
//
//   start     θ_ref ← θ_G, θ ← θ_G                     nothing unsent, nothing in flight
//   send      Δ = θ_ref − θ (pseudo_gradient), then θ_ref ← θ once it left (sent)
//   install   θ ← replace / mix / carry (install_global), θ_ref ← θ_G     (rebase: θ_ref ← θ_G only)
//   recover   θ_ref ← θ_G, θ ← θ_G                     the unsent work is dropped
//   snapshot  u = θ − θ_ref with its counters           (what a learner checkpoint keeps)
//   restore   θ ← θ_G + u                               the next update carries u
//
// Invariant: θ − θ_ref is exactly the work not yet sent (install's mix keeps α of it), so an update
// carries only steps taken since the last one sent; at most one update is in flight, and it stays
// so until a global newer than its base arrives, the syncer changes, or kResendAfterPeriods periods
// pass. A slot holds no θ_ref before start; every other operation on θ needs one of the same size.
// Pure; any thread; one owner (the learner actor).
#pragma once

#include <cstdint>
#include <vector>

#include "diloco/install.hpp"

namespace archipelago::diloco {

// The counters of the work not yet sent, as an update reports them.
struct UnsentWork {
  int64_t since_step = 0;  // the learner's step this work began at (its last update, start or recovery)
  int64_t steps = 0;       // inner steps in it
  int64_t tokens = 0;
  double loss_sum = 0;     // sum of the training losses of those steps
  double compute_s = 0;    // their compute time × the fragment's share (the goodput ledger)
  double mean_loss() const { return loss_sum / static_cast<double>(steps > 0 ? steps : 1); }
};

// What a learner checkpoint keeps of a slot: the unsent work u = θ − θ_ref, never θ itself.
struct SavedWork {
  uint64_t version = 0;        // the global version the work is based on (informational)
  UnsentWork work;
  std::vector<float> unsent;   // θ_local − θ_ref, in the fragment's gather order
};

class FragmentSlot {
 public:
  // ---- Starting and starting over -------------------------------------------------------------------
  // Starts at `step` from the global θ_G of `version`: θ_ref ← θ_G, nothing unsent or in flight.
  // Returns θ_local (= θ_G) for the caller to write into the model.
  std::vector<float> start(const std::vector<float>& global, uint64_t version, int64_t step);
  // The model went NaN/Inf: θ_ref ← θ_G and the work since is dropped (θ_local ← θ_ref(), which the
  // caller writes back). An update in flight stays so: it left before, and its answer still comes.
  // The version held is unchanged.
  void recover(const std::vector<float>& global, int64_t step);
  // After start: θ_local += saved.unsent and the counters continue saved.work, so the next update
  // carries that work (after the first step, not a period later). Returns false, restoring nothing,
  // when the syncer already has the work (`received_until`: the end of the newest work of ours it
  // accepted lies past the start of this work: an update sent after the checkpoint carried it).
  bool restore(const SavedWork& saved, int64_t received_until, std::vector<float>& local);
  // What a checkpoint keeps of this slot: u = θ_local − θ_ref and the counters.
  SavedWork snapshot(std::vector<float> local) const;

  // ---- Training and sending -------------------------------------------------------------------------
  // One inner step was taken (`compute_s`: this fragment's share of its compute time).
  void record_step(double compute_s, int64_t tokens, double loss);
  // Δ = θ_ref − θ_local: the update of this slot. Moves nothing: the update may still fail to leave.
  std::vector<float> pseudo_gradient(const std::vector<float>& local) const;
  // The update measured from `local` left at `step`: θ_ref ← θ_local, it is in flight with the
  // version held as its base, and the unsent work starts over at `step`.
  void sent(std::vector<float> local, int64_t step);

  // ---- Receiving --------------------------------------------------------------------------------------
  // A global of `version` arrived (installed or not): an update based on an older one is answered.
  void answered(uint64_t version);
  // Installs the global θ_G of `version` into `local` (install_global) and sets θ_ref ← θ_G.
  void install(InstallMode mode, double alpha, std::vector<float>& local, const std::vector<float>& global,
               uint64_t version);
  // θ_ref ← θ_G without touching θ_local (ddp: the global is this learner's own model of a moment ago).
  void rebase(const std::vector<float>& global, uint64_t version);
  // The update in flight is given up for lost: a new syncer knows nothing of it.
  void forget_outstanding() { outstanding_ = false; }
  // Gives it up when it was sent kResendAfterPeriods periods (of `period` steps) before `step`.
  void expire_outstanding(int64_t step, int period);

  // ---- Reading ----------------------------------------------------------------------------------------
  const std::vector<float>& ref() const { return ref_; }
  uint64_t version() const { return version_; }         // of the last global installed (0: none)
  bool outstanding() const { return outstanding_; }
  const UnsentWork& work() const { return work_; }
  bool holds_work() const { return work_.steps > 0; }
  bool restored() const { return restored_; }           // holds restored work not yet sent

 private:
  void start_over(int64_t step);  // nothing unsent from `step` on

  std::vector<float> ref_;         // θ_ref,p
  uint64_t version_ = 0;
  bool outstanding_ = false;       // an update is in flight and no newer global arrived since
  uint64_t outstanding_base_ = 0;  // its base version
  int64_t outstanding_step_ = 0;   // the step it left at
  UnsentWork work_;
  bool restored_ = false;
};

}  // namespace archipelago::diloco

#include "actors/learner.hpp"
#include "actors/authorization.hpp"
#include "actors/directory.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <future>
#include <random>
#include <thread>

#include <caf/all.hpp>

#include "messages/broadcast.hpp"
#include "actors/learner_checkpoint.hpp"
#include "actors/learner_pulse.hpp"
#include "diloco/fragment_slot.hpp"
#include "diloco/schedule.hpp"
#include "diloco/slowdown.hpp"
#include "diloco/time_sheet.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "messages/error_feedback.hpp"
#include "messages/receiver.hpp"
#include "training/replica.hpp"

namespace archipelago::actors {

using diloco::Activity;
using diloco::FragmentSchedule;
using diloco::InstallMode;
using diloco::ScheduleEpoch;
using diloco::dynamic_inner_steps;
using diloco::install_mode;
namespace {

// The calling thread's nice value (Linux: PRIO_PROCESS with a thread id names one thread).
int thread_nice() {
  errno = 0;
  const int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  return errno == 0 ? nice : 0;
}

// Lowers the calling thread's priority by `increment` (nice, capped at 19); threads it starts later
// (LibTorch's and OpenBLAS's pools, the codec's) inherit it. Raising a nice value needs no privilege.
void lower_thread_priority(int increment, spdlog::logger& log, const std::string& id) {
  if (increment <= 0) return;
  const int target = std::min(19, thread_nice() + increment);
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), target) != 0) {
    log.warn("{}: cannot lower its thread's priority to nice {}: {}", id, target, std::strerror(errno));
  }
}

using namespace archipelago::messages;
using Clock = std::chrono::steady_clock;

enum class Phase { init, joining, fetching, training, waiting, draining, finished };
const char* phase_name(Phase p) {
  static const char* names[] = {"init", "joining", "fetching", "training", "waiting", "draining", "finished"};
  return names[static_cast<int>(p)];
}

// One fragment as this learner holds it: the θ_ref algebra and its bookkeeping are the slot's
// (diloco/fragment_slot.hpp); the broadcast copy, the codec's residual and the schedule are the actor's.
struct HeldFragment {
  BroadcastCopy global;        // B_p: the broadcast state of the latest global received (messages/broadcast.hpp)
  diloco::FragmentSlot slot;   // θ_ref,p, the version installed, the update in flight, the unsent work
  ErrorFeedback feedback;      // the uplink codec's residual of this fragment
  int64_t next_due = 0;        // async: the step at which this fragment is sent next
  int period = 0;              // async: inner steps of its current period (dynamic local steps)
  double share = 0;            // numel_p / numel: its part of each step's compute time
};

// How updates are made and globals installed: from the configuration, changed by broadcasts.
struct UpdateRules {
  Codec codec = Codec::fp32;
  bool staggered = true;
  FragmentSchedule schedule;       // train.inner_steps, and the operator's changes the broadcasts carry
  bool dynamic = false;            // async mode: periods of round(H · own speed / fastest speed) steps
  double fastest_tokens_per_s = 0; // as the syncer last reported it
  InstallMode install = InstallMode::replace;
};

// The syncer and the store, as this learner sees them.
struct Link {
  Receiver receiver;               // globals reassembled and decoded
  Outbox outbox{""};
  caf::actor syncer;               // the syncer that welcomed us (empty: not joined)
  bool connected = false;
  uint64_t welcome_version = 0;
  std::vector<uint64_t> received_until;  // the syncer's Welcome: per fragment, how far it has our work
  Clock::time_point join_sent{};
  Clock::time_point fetch_sent{};
};

// The learner's own checkpoint (learner_checkpoint.hpp): saving it, and what this incarnation restored.
struct Checkpointing {
  std::string path;                 // empty: no learner checkpoints
  std::future<Status> write;        // the file write in flight (one at a time)
  int64_t written = 0;
  int64_t skipped = 0;              // due while the previous one was still being written
  double seconds = 0;               // time the learner's thread spent on them (the file is written aside)
  std::string error;                // why the last load or save failed (empty: none)
  std::unique_ptr<LearnerCheckpoint> loaded;  // loaded at start, applied once the globals arrived
  int64_t restored_from_step = -1;  // step of the checkpoint this incarnation continued (-1: none)
  int64_t restored_steps = 0;       // unsent inner steps it brought back
  int64_t restored_dropped = 0;     // checkpointed fragments whose work an update had already carried
  int64_t steps_skipped = 0;        // data positions skipped at start: the syncer had work up to there
};

// Where this incarnation's time went, and what became of its compute (heartbeats carry both to the
// goodput ledger, diloco/ledger.hpp). The sheet's clock is seconds since `started`.
struct Times {
  Clock::time_point started = Clock::now();
  diloco::TimeSheet sheet{0.0};     // recovering until the first inner step
  Clock::time_point last_beat{};
  Clock::time_point drain_started{};
  int64_t steps = 0;                // inner steps this incarnation
  int64_t tokens = 0;               // tokens this incarnation
  double tokens_per_s = 0;          // tokens per busy second (compute and throttled), this incarnation
  double train_loss = std::nan("");  // its inner steps' cross-entropy, an exponential mean over ~10 steps
  // compute + restored = sent + unsent (its fragments' work) + dropped
  double sent_compute_s = 0;        // carried by the updates it sent
  double dropped_compute_s = 0;     // unsent work dropped after a non-finite step
  double restored_compute_s = 0;    // an earlier incarnation's work, restored from its checkpoint
};

// What an operator, a drill or fault injection did to this learner.
struct Controls {
  bool paused = false;              // by an operator: no inner steps until resumed
  double throttle = 1;              // by an operator: each inner step takes this many times its compute time
  std::mt19937_64 jitter;           // a straggler's step-time variance (faults.slow_jitter), seeded per learner
  bool corrupt_next = false;        // drill hook: flip a payload bit of the next update (checksum unchanged)
  bool poisoned = false;            // fault injection: the non-finite step was injected already
};

struct LearnerState {
  LearnerSpec spec;
  std::shared_ptr<PulseBoard> pulse;  // its latest heartbeat, which its pulse sends to the monitor
  std::string id;
  Phase phase = Phase::init;
  std::unique_ptr<training::Replica> replica;
  std::vector<training::DataCursor> cursors;
  int64_t step = 0;
  std::vector<HeldFragment> fragments;
  UpdateRules rules;
  Link link;
  Checkpointing checkpoint;
  Times times;
  Controls controls;
  int64_t nonfinite_recoveries = 0; // steps that went NaN/Inf and were undone from the globals
  // The globals' versions at the last recovery and the step it happened at: a step that goes
  // non-finite again right after reinstalling the same versions says the globals themselves are bad.
  std::vector<uint64_t> recovered_from;
  int64_t recovered_at_step = -1;
  bool awaiting_new_globals = false; // no inner steps until a newer global version is installed
  int64_t suspect_globals = 0;       // times the globals were found to make every step non-finite
  int64_t broadcast_gaps = 0;       // deltas that did not apply to the held B_p (a store fetch followed)
  int64_t refused_remote = 0;       // messages from outside this process, refused
  std::shared_ptr<spdlog::logger> log = component_logger("learner");
  const char* name = "learner";
};

using LearnerActor = caf::stateful_actor<LearnerState>;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }
std::chrono::milliseconds millis(double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); }
const RuntimeOptions& opts(LearnerActor* self) { return *self->state.spec.options; }
diloco::Mode mode(LearnerActor* self) { return opts(self).setup.run.mode; }
caf::actor lookup(LearnerActor* self, caf::atom_value name) { return Directory::get(self->system(), name); }

void send_to(LearnerActor* self, const caf::actor& to, Message body) {
  if (!to) return;
  auto bytes = self->state.link.outbox.wrap(std::move(body));
  if (bytes) self->send(to, std::move(*bytes));
}

// This incarnation's clock: seconds since it started.
double clock_s(LearnerActor* self, Clock::time_point at = Clock::now()) {
  return seconds(at - self->state.times.started);
}

// What the learner is doing while no message of its own runs: an interval that goes on between
// messages (paused, recovering before its first step, blocked on the syncer), or nothing it could
// measure (training: the next step is in its mailbox).
Activity between_messages(const LearnerState& st) {
  if (st.controls.paused) return Activity::paused;
  if (st.phase == Phase::waiting || st.phase == Phase::draining) return Activity::waiting;
  if (st.times.steps == 0 && st.phase != Phase::finished) return Activity::recovering;
  return Activity::unseen;
}

// The time sheet around one message: its handler's time is overhead unless it falls inside an
// interval of another activity (or the handler charges a part of it to compute or throttled).
class HandlerClock {
 public:
  explicit HandlerClock(LearnerActor* self) : self_(self) {
    auto& sheet = self_->state.times.sheet;
    if (sheet.current() == Activity::unseen) sheet.switch_to(Activity::overhead, clock_s(self_));
  }
  ~HandlerClock() {
    auto& sheet = self_->state.times.sheet;
    const Activity next = between_messages(self_->state);
    if (sheet.current() != next) sheet.switch_to(next, clock_s(self_));
  }
  HandlerClock(const HandlerClock&) = delete;
  HandlerClock& operator=(const HandlerClock&) = delete;

 private:
  LearnerActor* self_;
};

double unsent_compute_s(const LearnerState& st) {
  double unsent = 0;
  for (const auto& f : st.fragments) unsent += f.slot.work().compute_s;
  return unsent;
}

// A heartbeat to the supervisor, and published for the pulse, which sends the latest to the failure
// monitor on its own clock (learner_pulse.hpp); `supervisor_only`: the times alone, to the
// supervisor (after an update left: the ledger counts its compute as sent before the syncer merges
// it).
Heartbeat current_heartbeat(LearnerActor* self, Clock::time_point at) {
  auto& st = self->state;
  const double now = clock_s(self, at);
  const auto& sheet = st.times.sheet;
  return Heartbeat{st.id, static_cast<uint64_t>(st.step), st.times.tokens_per_s,
                 static_cast<uint64_t>(st.nonfinite_recoveries), static_cast<uint32_t>(st.spec.incarnation), now,
                 sheet.seconds(Activity::recovering, now), sheet.seconds(Activity::computing, now),
                 sheet.seconds(Activity::waiting, now), sheet.seconds(Activity::paused, now), st.controls.paused,
                 sheet.seconds(Activity::throttled, now), sheet.seconds(Activity::overhead, now),
                 st.times.sent_compute_s, unsent_compute_s(st), st.times.dropped_compute_s,
                 st.times.restored_compute_s, st.times.train_loss};
}

void send_heartbeat(LearnerActor* self, bool supervisor_only = false) {
  auto& st = self->state;
  const auto at = Clock::now();
  if (!supervisor_only) st.times.last_beat = at;
  const Heartbeat beat = current_heartbeat(self, at);
  if (!supervisor_only) st.pulse->publish(beat);
  send_to(self, st.spec.supervisor, beat);
}

void send_join(LearnerActor* self) {
  auto& st = self->state;
  auto syncer = lookup(self, syncer_name());
  st.link.join_sent = Clock::now();
  send_to(self, syncer, Join{st.id, "local", "local", opts(self).setup.run.device, st.times.tokens_per_s,
                             opts(self).syncer.auth_token});
}

std::vector<float> read_fragment(LearnerActor* self, int p);

// Asks the store for the latest committed state. It skips every fragment this learner already
// holds: its copy of B_p, or before its first step its own initial weights (the same seed gives the
// same θ0, so a fresh run's learners fetch nothing but the digests' answer).
void send_fetch(LearnerActor* self) {
  auto& st = self->state;
  st.link.fetch_sent = Clock::now();
  Fetch fetch{st.id, {}};
  for (int p = 0; p < static_cast<int>(st.fragments.size()); ++p) {
    const auto& held = st.fragments[p].global;
    if (!held.values.empty()) {
      fetch.held_digests.push_back(broadcast_digest(held.values));
    } else if (st.times.steps == 0 && st.replica) {
      fetch.held_digests.push_back(broadcast_digest(read_fragment(self, p)));
    } else {
      fetch.held_digests.push_back(0);
    }
  }
  send_to(self, lookup(self, store_name()), fetch);
}

std::vector<float> read_fragment(LearnerActor* self, int p) {
  const auto& layout = *self->state.spec.layout;
  std::vector<float> values(layout.plan.fragments[p].numel);
  size_t position = 0;
  for (int index : layout.plan.fragments[p].parameters) {
    const auto& info = layout.parameters[index];
    self->state.replica->read_range(info.offset, info.numel, values.data() + position);
    position += info.numel;
  }
  return values;
}

void write_fragment(LearnerActor* self, int p, const std::vector<float>& values) {
  const auto& layout = *self->state.spec.layout;
  size_t position = 0;
  for (int index : layout.plan.fragments[p].parameters) {
    const auto& info = layout.parameters[index];
    self->state.replica->write_range(info.offset, info.numel, values.data() + position);
    position += info.numel;
  }
}

// Installs the received global of fragment p (replace, mix or carry; θ_ref ← θ_G: FragmentSlot::install).
void install_fragment(LearnerActor* self, int p) {
  auto& held = self->state.fragments[p];
  auto local = read_fragment(self, p);
  held.slot.install(self->state.rules.install, opts(self).syncer.alpha, local, held.global.values,
                    held.global.version);
  write_fragment(self, p, local);
}

void start_training(LearnerActor* self) {
  auto& st = self->state;
  st.phase = Phase::training;
  self->send(self, step_atom::value);
}

// Decoupled: the schedule slot of fragment p at the current step, (step − offset_p) / H; the syncer
// counts an update towards its open round only when it is not behind it.
uint64_t schedule_slot(LearnerActor* self, int p) {
  auto& st = self->state;
  return st.rules.schedule.slot(st.step, p);
}

// The local model went NaN/Inf: every fragment goes back to the latest global received (B_p), the
// unsent work since is dropped, AdamW's moments are reset, and the learner trains on.
void recover_from_nonfinite(LearnerActor* self, const std::string& why) {
  auto& st = self->state;
  st.nonfinite_recoveries += 1;
  std::vector<uint64_t> versions;
  for (const auto& held : st.fragments) versions.push_back(held.global.version);
  if (versions == st.recovered_from && st.step <= st.recovered_at_step + 1) {
    // Reinstalled and at once non-finite again: reinstalling the same globals would loop.
    st.awaiting_new_globals = true;
    st.suspect_globals += 1;
    st.log->error("{}: the step after reinstalling the globals went non-finite again ({}): the globals make every "
                  "step non-finite; no inner steps until a newer version arrives", st.id, why);
  }
  st.recovered_from = std::move(versions);
  st.recovered_at_step = st.step;
  for (int p = 0; p < static_cast<int>(st.fragments.size()); ++p) {
    auto& held = st.fragments[p];
    if (held.global.values.empty()) continue;
    st.times.dropped_compute_s += held.slot.work().compute_s;
    held.slot.recover(held.global.values, st.step);
    write_fragment(self, p, held.slot.ref());
    held.feedback.reset();
  }
  training::OptimizerState fresh;
  fresh.schedule_steps = st.replica->steps_taken();
  Status reset = st.replica->import_optimizer_state(fresh);
  if (!reset) st.log->error("{}: cannot reset AdamW: {}", st.id, reset.error().to_string());
  st.log->warn("{}: non-finite step at step {} ({}): reinstalled the globals, reset AdamW (recovery {})", st.id,
               st.step, why, st.nonfinite_recoveries);
  send_heartbeat(self);
}

void send_update(LearnerActor* self, int p, const std::vector<float>& flat) {
  auto& st = self->state;
  auto& held = st.fragments[p];
  auto& slot = held.slot;
  if (!st.link.connected || !slot.holds_work()) return;
  const auto& layout = *st.spec.layout;
  auto local = training::gather_fragment(layout.plan, layout.parameters, p, flat.data());
  const std::vector<float> delta = slot.pseudo_gradient(local);  // Δ_p = θ_ref − θ_local
  std::vector<uint8_t> encoded;
  Status status = held.feedback.encode(st.rules.codec, delta.data(), delta.size(), encoded);
  if (!status) {
    // A NaN/Inf local model: nothing is sent (the syncer would refuse it); the learner starts again
    // from the globals instead of keeping a slot that sends nothing.
    st.log->error("{}: cannot encode the update of fragment {}: {}", st.id, p, status.error().to_string());
    recover_from_nonfinite(self, status.error().to_string());
    return;
  }
  const auto& work = slot.work();
  const float loss = static_cast<float>(work.mean_loss());
  const uint64_t round = schedule_slot(self, p);
  std::vector<uint8_t> corrupted;  // drill hook: the first chunk's bytes with one bit flipped
  auto messages = st.link.outbox.wrap_tensor(st.rules.codec, delta.size(), encoded, [&](TensorChunk chunk) -> Message {
    if (st.controls.corrupt_next && chunk.chunk_index == 0 && chunk.payload.size > 0) {
      corrupted = chunk.payload.to_vector();
      corrupted[corrupted.size() / 2] ^= 0x10;
      chunk.payload = ByteView{corrupted.data(), corrupted.size(), nullptr};  // the checksum is the original's
      st.controls.corrupt_next = false;
      st.log->warn("{}: update of fragment {} sent with a flipped payload bit (drill hook)", st.id, p);
    }
    return FragmentUpdate{st.id, static_cast<uint32_t>(p), slot.version(), static_cast<uint32_t>(work.steps),
                          static_cast<uint64_t>(work.tokens), std::isfinite(loss) ? loss : 0.0f,
                          std::move(chunk), st.times.tokens_per_s, round, static_cast<uint64_t>(work.since_step),
                          static_cast<uint64_t>(st.step), work.compute_s};
  });
  if (!messages) return;
  for (auto& m : *messages) self->send(st.link.syncer, std::move(m));
  st.times.sent_compute_s += work.compute_s;
  slot.sent(std::move(local), st.step);  // what is sent is no longer unsent work: θ_ref ← θ_local
  send_heartbeat(self, true);
  if (st.rules.dynamic) {
    held.period = dynamic_inner_steps(st.rules.schedule.period_at(st.step), st.times.tokens_per_s,
                                      st.rules.fastest_tokens_per_s);
    held.next_due = st.step + held.period;
  }
}

bool any_outstanding(LearnerActor* self) {
  for (const auto& f : self->state.fragments) {
    if (f.slot.outstanding()) return true;
  }
  return false;
}

// Collects the result of the checkpoint write in flight, if it is done (or `wait`).
void collect_checkpoint_write(LearnerActor* self, bool wait) {
  auto& st = self->state;
  if (!st.checkpoint.write.valid()) return;
  if (!wait && st.checkpoint.write.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  Status saved = st.checkpoint.write.get();
  if (saved) {
    ++st.checkpoint.written;
  } else {
    st.checkpoint.error = saved.error().to_string();
    st.log->warn("{}: cannot save its checkpoint: {}", st.id, st.checkpoint.error);
  }
}

// A slot's unsent work as the learner checkpoint stores it, and back.
LearnerCheckpoint::Fragment to_checkpoint(diloco::SavedWork saved) {
  LearnerCheckpoint::Fragment f;
  f.version = saved.version;
  f.since_step = saved.work.since_step;
  f.steps = saved.work.steps;
  f.tokens = saved.work.tokens;
  f.loss_sum = saved.work.loss_sum;
  f.compute_s = saved.work.compute_s;
  f.unsent = std::move(saved.unsent);
  return f;
}

diloco::SavedWork saved_work(LearnerCheckpoint::Fragment f) {
  diloco::SavedWork saved;
  saved.version = f.version;
  saved.work.since_step = f.since_step;
  saved.work.steps = f.steps;
  saved.work.tokens = f.tokens;
  saved.work.loss_sum = f.loss_sum;
  saved.work.compute_s = f.compute_s;
  saved.unsent = std::move(f.unsent);
  return saved;
}

// Saves the unsent work of every fragment and the AdamW state (learner_checkpoint.hpp). The copy is
// taken between two steps; the file is written by another thread while training goes on.
void save_checkpoint(LearnerActor* self) {
  auto& st = self->state;
  collect_checkpoint_write(self, false);
  if (st.checkpoint.write.valid()) {
    ++st.checkpoint.skipped;  // the disk is slower than two steps: the next one is due soon anyway
    return;
  }
  const auto begin = Clock::now();
  LearnerCheckpoint checkpoint;
  checkpoint.step = st.step;
  checkpoint.incarnation = st.spec.incarnation;
  checkpoint.optimizer = st.replica->export_optimizer_state();
  for (size_t p = 0; p < st.fragments.size(); ++p) {
    checkpoint.fragments.push_back(
        to_checkpoint(st.fragments[p].slot.snapshot(read_fragment(self, static_cast<int>(p)))));
  }
  st.checkpoint.write = std::async(std::launch::async, [path = st.checkpoint.path,
                                                        sync = opts(self).learner_checkpoint_sync,
                                                        checkpoint = std::move(checkpoint)] {
    return save_learner_checkpoint(path, checkpoint, sync);
  });
  st.checkpoint.seconds += seconds(Clock::now() - begin);
}

void finish(LearnerActor* self, const std::string& why) {
  auto& st = self->state;
  st.phase = Phase::finished;
  // Its work went out while draining (or the drain timed out): a later start must not redo it.
  collect_checkpoint_write(self, true);
  if (!st.checkpoint.path.empty()) std::remove(st.checkpoint.path.c_str());
  send_heartbeat(self);
  send_to(self, st.link.syncer, Leave{st.id, "finished", LeaveCode::finished});
  send_to(self, lookup(self, monitor_name()), Leave{st.id, "finished", LeaveCode::finished});
  const double now = clock_s(self);
  st.log->info("{} finished at step {} ({}); compute {:.1f} s, waiting {:.1f} s", st.id, st.step, why,
               st.times.sheet.seconds(Activity::computing, now), st.times.sheet.seconds(Activity::waiting, now));
  self->quit();
}

// Draining: every fragment with unsent steps goes out once its previous update was answered.
void drain(LearnerActor* self) {
  auto& st = self->state;
  std::vector<float> flat;
  for (size_t p = 0; p < st.fragments.size(); ++p) {
    const auto& slot = st.fragments[p].slot;
    if (!slot.holds_work() || slot.outstanding() || !st.link.connected) continue;
    if (flat.empty()) flat = st.replica->read_parameters();
    send_update(self, static_cast<int>(p), flat);
  }
  const bool pending_work = std::any_of(st.fragments.begin(), st.fragments.end(),
                                        [](const auto& f) { return f.slot.holds_work(); });
  // Once every fragment's last work is handed off the learner leaves: the syncer merges updates of
  // learners that left, and a broadcast of those merges to a learner that will not train on it
  // would only cost downlink bytes. A fragment still in flight is waited for (its next update
  // needs the base its merge brings).
  const bool timed_out = seconds(Clock::now() - st.times.drain_started) > opts(self).drain_timeout_s;
  if (!pending_work || timed_out) finish(self, timed_out ? "drain timeout" : "budget spent");
}

void begin_drain(LearnerActor* self) {
  auto& st = self->state;
  st.phase = Phase::draining;
  st.times.drain_started = Clock::now();
  st.times.sheet.switch_to(Activity::waiting, clock_s(self, st.times.drain_started));
  drain(self);
}

bool budget_spent(LearnerActor* self) {
  const auto& spec = self->state.spec;
  const auto now = Clock::now();
  return (spec.step_limit > 0 && self->state.step >= spec.step_limit) || now >= spec.deadline ||
         (spec.run_deadline && now >= spec.run_deadline->at());
}

// The fraction of the run's wall-time budget spent at `now`, for a learning rate that decays over
// time (inner.decay_over_time, a run bounded by time only); -1 otherwise. A deadline moved later
// than the configured budget reads as less spent (the rate climbs back towards the peak).
double budget_fraction_spent(LearnerActor* self, Clock::time_point now) {
  const auto& setup = opts(self).setup;
  const double budget = setup.run.max_seconds;
  if (!training::decays_over_time(setup.inner, setup.run)) return -1;
  auto end = self->state.spec.deadline;
  if (self->state.spec.run_deadline) end = std::min(end, self->state.spec.run_deadline->at());
  if (end == Clock::time_point::max()) return -1;
  return 1.0 - seconds(end - now) / budget;
}

void run_step(LearnerActor* self) {
  auto& st = self->state;
  if (st.phase != Phase::training || st.controls.paused || st.awaiting_new_globals) return;
  if (budget_spent(self)) {
    begin_drain(self);
    return;
  }
  const auto begin = Clock::now();
  st.times.sheet.switch_to(Activity::computing, clock_s(self, begin));
  const auto& faults = opts(self).faults;
  if (faults.nonfinite_learner == st.spec.index && !st.controls.poisoned && st.step >= faults.nonfinite_at_step) {
    // Fault injection: a NaN in the weights, as a bad batch or a hardware fault would leave them.
    st.controls.poisoned = true;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    st.replica->write_range(0, 1, &nan);
  }
  st.replica->set_budget_spent(budget_fraction_spent(self, begin));
  training::StepStats stats;
  if (st.cursors.size() == 1) {
    stats = st.replica->step(st.cursors[0].next());
  } else {
    std::vector<training::Batch> batches;
    for (auto& cursor : st.cursors) batches.push_back(cursor.next());
    stats = st.replica->step_averaged(batches);
  }
  // Slower hardware: the configured straggler (fault injection) and the operator's throttle. The
  // learner's thread is busy for (factor − 1) × its step time more: throttled, not compute.
  const auto computed = Clock::now();
  const double elapsed = seconds(computed - begin);
  const auto slow = faults.slowdowns.find(st.spec.index);
  const bool straggler = slow != faults.slowdowns.end();
  const double slowdown = diloco::step_slowdown(straggler ? slow->second : 1.0, straggler ? faults.slow_jitter : 0.0,
                                                st.controls.throttle, st.controls.jitter);
  st.times.sheet.switch_to(slowdown > 1 ? Activity::throttled : Activity::overhead, clock_s(self, computed));
  if (slowdown > 1) {
    std::this_thread::sleep_for((computed - begin) * (slowdown - 1));
    st.times.sheet.switch_to(Activity::overhead, clock_s(self));
  }
  const auto end = Clock::now();
  st.times.tokens += stats.tokens;
  const double busy_s = st.times.sheet.seconds(Activity::computing, clock_s(self, end)) +
                        st.times.sheet.seconds(Activity::throttled, clock_s(self, end));
  if (busy_s > 0) st.times.tokens_per_s = st.times.tokens / busy_s;  // a throttled learner is a slower one
  st.step += 1;
  st.times.steps += 1;
  for (auto& held : st.fragments) held.slot.record_step(elapsed * held.share, stats.tokens, stats.cross_entropy);
  if (std::isfinite(stats.cross_entropy)) {
    st.times.train_loss = std::isnan(st.times.train_loss) ? stats.cross_entropy
                                                          : 0.9 * st.times.train_loss + 0.1 * stats.cross_entropy;
  }
  if (seconds(Clock::now() - st.times.last_beat) >= opts(self).detector.heartbeat_s) send_heartbeat(self);
  if (!std::isfinite(stats.loss)) {
    recover_from_nonfinite(self, "loss " + std::to_string(stats.loss));
    self->send(self, step_atom::value);
    return;
  }

  const auto& run = opts(self).setup.run;
  const int P = static_cast<int>(st.fragments.size());
  std::vector<float> flat;
  for (int p = 0; p < P; ++p) {
    auto& held = st.fragments[p];
    const bool due = held.slot.restored() ||
                     (st.rules.dynamic ? st.step >= held.next_due : st.rules.schedule.due(st.step, p));
    if (!due) continue;
    // An update unanswered for kResendAfterPeriods periods was lost (e.g. the syncer restarted):
    // send again (the syncer credits an update with at most kMaxPeriodsPerUpdate periods).
    held.slot.expire_outstanding(st.step, st.rules.schedule.period_at(st.step));
    if (held.slot.outstanding() || !st.link.connected) continue;
    if (flat.empty()) flat = st.replica->read_parameters();
    send_update(self, p, flat);
  }
  const int every = opts(self).learner_checkpoint_every;
  if (!st.checkpoint.path.empty() && every > 0 && st.times.steps % every == 0) save_checkpoint(self);
  if (diloco::round_barrier(mode(self)) && st.step % run.inner_steps == 0 && any_outstanding(self)) {
    st.phase = Phase::waiting;
    st.times.sheet.switch_to(Activity::waiting, clock_s(self));
    return;
  }
  self->send(self, step_atom::value);
}

// The data cursors of this learner, at its current step.
Status open_cursors(LearnerActor* self) {
  auto& st = self->state;
  const auto& setup = opts(self).setup;
  auto text = std::shared_ptr<const std::vector<training::Token>>(st.spec.corpus, &st.spec.corpus->tokens);
  st.cursors.clear();
  for (size_t s = 0; s < st.spec.shards.size(); ++s) {
    // ddp: worker s of the data-parallel step reads shard s; otherwise learner `index` reads its own.
    const int stream = st.spec.shards.size() == 1 ? st.spec.index : static_cast<int>(s);
    st.cursors.emplace_back(text, st.spec.shards[s], setup.inner.batch_size, setup.model.seq_len, setup.run.seed,
                            stream, static_cast<uint64_t>(st.step));
    if (st.cursors.back().empty()) return make_error(ErrorCode::invalid_argument, "empty data shard");
  }
  return {};
}

// Every fragment's global arrived: install them (θ ← θ_G, or θ_G + the restored unsent work) and train.
void start_from_globals(LearnerActor* self) {
  auto& st = self->state;
  std::unique_ptr<LearnerCheckpoint> restored = std::move(st.checkpoint.loaded);
  auto received_until = [&](int q) -> int64_t {
    return q < static_cast<int>(st.link.received_until.size()) ? static_cast<int64_t>(st.link.received_until[q]) : 0;
  };
  if (st.rules.staggered) {
    // The syncer already has this learner's work up to some step (a previous incarnation sent it after
    // the position it restarts from): the data moves on past it rather than training on it twice.
    int64_t until = 0;
    for (int q = 0; q < static_cast<int>(st.fragments.size()); ++q) until = std::max(until, received_until(q));
    if (until > st.step) {
      st.log->info("{}: the syncer has its work up to step {}: its data continues there, not at step {}", st.id,
                   until, st.step);
      st.checkpoint.steps_skipped += until - st.step;
      st.step = until;
      Status opened = open_cursors(self);
      if (!opened) {
        st.log->error("{}: {}", st.id, opened.error().to_string());
        self->quit(caf::exit_reason::unhandled_exception);
        return;
      }
    }
  }
  for (int q = 0; q < static_cast<int>(st.fragments.size()); ++q) {
    auto& held = st.fragments[q];
    held.feedback.reset();
    held.next_due = st.rules.schedule.next_due(st.step, q);
    held.period = st.rules.schedule.period_at(st.step);
    // θ_ref = θ_G, and θ = θ_G (+ the restored unsent work u, which the next update of q carries;
    // restored work is already a period old: it goes out after the first step, not a period later).
    std::vector<float> local = held.slot.start(held.global.values, held.global.version, st.step);
    if (restored) {
      const auto saved = saved_work(std::move(restored->fragments[q]));
      if (held.slot.restore(saved, received_until(q), local)) {
        st.times.restored_compute_s += saved.work.compute_s;
      } else {
        // An update of the previous incarnation, sent after this checkpoint, carried this work already.
        st.checkpoint.restored_dropped += 1;
        st.log->info("{}: fragment {}: its checkpointed work since step {} was sent before the restart (the syncer "
                     "has it up to step {}): not sent again", st.id, q, saved.work.since_step, received_until(q));
      }
    }
    write_fragment(self, q, local);
  }
  if (restored) {
    auto optimizer = restored->optimizer;
    optimizer.schedule_steps = st.step;  // the schedule follows the data position
    Status imported = st.replica->import_optimizer_state(optimizer);
    if (!imported) st.log->warn("{}: AdamW state not restored: {}", st.id, imported.error().to_string());
    st.checkpoint.restored_from_step = restored->step;
    for (const auto& f : st.fragments) {
      st.checkpoint.restored_steps = std::max(st.checkpoint.restored_steps, f.slot.work().steps);
    }
    st.log->info("{} (incarnation {}) starts at step {} from version {} with its checkpoint of step {} ({} unsent "
                 "step(s) restored)", st.id, st.spec.incarnation, st.step, st.link.welcome_version, restored->step,
                 st.checkpoint.restored_steps);
  } else {
    st.log->info("{} (incarnation {}) starts at step {} from version {}", st.id, st.spec.incarnation, st.step,
                 st.link.welcome_version);
  }
  start_training(self);
}

// Whether a chunk of a global fragment is taken: a fragment this learner has, once it has joined
// (until then the fetch brings the state).
bool takes_global_chunk(LearnerActor* self, const GlobalFragment& fragment) {
  auto& st = self->state;
  if (fragment.fragment_id >= st.fragments.size()) return false;
  return st.phase != Phase::init && st.phase != Phase::joining;
}

// A whole global fragment: its tensor decoded in `values`.
void on_global(LearnerActor* self, const GlobalFragment& fragment, std::vector<float>&& values) {
  auto& st = self->state;
  const int p = static_cast<int>(fragment.fragment_id);
  if (fragment.uplink_codec && *fragment.uplink_codec != st.rules.codec) {
    // An operator's `set outer.codec`: the next updates go out in it (the residual carries over).
    st.log->info("{}: encoding updates with {} from now on (was {})", st.id, codec_name(*fragment.uplink_codec),
                 codec_name(st.rules.codec));
    st.rules.codec = *fragment.uplink_codec;
  }
  std::vector<ScheduleEpoch> epochs;
  for (const auto& e : fragment.schedule) epochs.push_back({static_cast<int64_t>(e.from_step), static_cast<int>(e.inner_steps)});
  if (!epochs.empty() && epochs != st.rules.schedule.epochs()) {
    // An operator's `set train.inner_steps`: the same schedule as every other learner, from its step on.
    auto schedule =
        FragmentSchedule::from_epochs(std::move(epochs), static_cast<int>(st.fragments.size()), st.rules.staggered);
    if (schedule) {
      st.rules.schedule = std::move(*schedule);
      const auto& last = st.rules.schedule.epochs().back();
      st.log->info("{}: H = {} from step {} on (now at step {})", st.id, last.inner_steps, last.from_step, st.step);
    } else {
      st.log->warn("{}: ignored a broadcast schedule: {}", st.id, schedule.error().reason);
    }
  }
  auto& held = st.fragments[p];
  if (static_cast<int64_t>(values.size()) != st.spec.layout->plan.fragments[p].numel) return;
  const auto applied = apply_broadcast(held.global, fragment.version, fragment.delta_base, std::move(values));
  if (applied == ApplyResult::old) return;
  if (applied == ApplyResult::gap) {
    // A delta against a B_p this learner does not hold (it missed a broadcast): B_p comes from the store.
    st.broadcast_gaps += 1;
    if (st.phase != Phase::fetching && seconds(Clock::now() - st.link.fetch_sent) > 1.0) {
      st.log->info("{}: fragment {} version {} is a delta against version {}, it holds {}: fetching the state", st.id,
                   p, fragment.version, fragment.delta_base, held.global.version);
      send_fetch(self);
    }
    return;
  }
  if (fragment.fastest_tokens_per_sec > 0) st.rules.fastest_tokens_per_s = fragment.fastest_tokens_per_sec;
  held.slot.answered(fragment.version);

  if (st.phase == Phase::fetching) {
    const bool complete = std::all_of(st.fragments.begin(), st.fragments.end(),
                                      [](const auto& f) { return f.global.version > 0; });
    if (!complete) return;
    start_from_globals(self);
    return;
  }
  if (diloco::data_parallel(mode(self))) {
    // ddp: the global model is this learner's own model of a moment ago; installing it would undo
    // the steps taken since, so only the base of the next update moves.
    held.slot.rebase(held.global.values, held.global.version);
  } else {
    install_fragment(self, p);
  }
  if (st.awaiting_new_globals && applied == ApplyResult::applied) {
    st.awaiting_new_globals = false;  // a newer version of a fragment: train on from it
    st.log->info("{}: fragment {} version {} installed: training again", st.id, p, fragment.version);
    if (st.phase == Phase::training) self->send(self, step_atom::value);
  }
  if (st.phase == Phase::waiting && !any_outstanding(self)) {
    start_training(self);
  } else if (st.phase == Phase::draining) {
    drain(self);
  }
}

void on_welcome(LearnerActor* self, const std::string& from, const Welcome& welcome) {
  auto& st = self->state;
  if (from == "store") {
    if (!welcome.accepted) return;  // nothing committed yet: the beat timer fetches again
    // Fragments it already holds are not sent: its copy (or its initial weights) is that version.
    for (uint32_t p : welcome.held_fragments) {
      if (p >= st.fragments.size() || p >= welcome.fragment_versions.size()) continue;
      auto& copy = st.fragments[p].global;
      if (copy.values.empty()) {
        if (st.phase != Phase::fetching) continue;
        copy.values = read_fragment(self, static_cast<int>(p));
      }
      copy.version = std::max(copy.version, welcome.fragment_versions[p]);
    }
    if (st.phase != Phase::fetching) return;
    st.link.welcome_version = std::max(st.link.welcome_version, welcome.version);
    const bool complete = std::all_of(st.fragments.begin(), st.fragments.end(),
                                      [](const auto& f) { return f.global.version > 0; });
    if (complete) start_from_globals(self);
    return;
  }
  if (!welcome.accepted) {
    if (welcome.refusal == JoinRefusal::unauthenticated) {
      st.log->error("{}: refused by the syncer: {}", st.id, welcome.reason);
      self->quit(caf::exit_reason::unhandled_exception);
      return;
    }
    st.link.connected = false;  // rejoin on the next beat
    return;
  }
  auto sender = caf::actor_cast<caf::actor>(self->current_sender());
  if (!sender) return;
  if (st.link.syncer != sender) self->monitor(sender);
  st.link.syncer = sender;
  st.link.connected = true;
  st.link.received_until = welcome.received_until;
  for (auto& f : st.fragments) f.slot.forget_outstanding();  // a new syncer knows nothing in flight
  if (st.phase == Phase::training || st.phase == Phase::waiting) {
    // A rejoin: broadcasts it missed while away would only show at the next delta against a B_p it
    // does not hold (and its updates meanwhile are stale). The syncer's versions tell it now.
    for (size_t p = 0; p < st.fragments.size() && p < welcome.fragment_versions.size(); ++p) {
      if (welcome.fragment_versions[p] <= st.fragments[p].global.version) continue;
      st.log->info("{}: rejoined holding fragment {} at version {}, the syncer's is {}: fetching the state", st.id, p,
                   st.fragments[p].global.version, welcome.fragment_versions[p]);
      send_fetch(self);
      break;
    }
  }
  if (st.phase == Phase::joining) {
    st.link.welcome_version = welcome.version;
    st.phase = Phase::fetching;
    send_fetch(self);
  } else if (st.phase == Phase::waiting) {
    // Sync mode: what we waited for died with the old syncer; train on, the next round resends.
    st.phase = Phase::training;
    self->send(self, step_atom::value);
  }
}

void on_beat(LearnerActor* self) {
  auto& st = self->state;
  const auto now = Clock::now();
  const double retry = std::max(1.0, 5 * opts(self).detector.heartbeat_s);
  if ((st.phase == Phase::joining || !st.link.connected) && st.phase != Phase::init &&
      seconds(now - st.link.join_sent) > retry) {
    send_join(self);
  }
  if (st.phase == Phase::fetching && seconds(now - st.link.fetch_sent) > retry) send_fetch(self);
  if (st.phase == Phase::draining) drain(self);
  if (st.phase == Phase::finished) return;
  if (seconds(now - st.times.last_beat) >= opts(self).detector.heartbeat_s) send_heartbeat(self);
  self->delayed_send(self, millis(opts(self).detector.heartbeat_s), beat_atom::value);
}

Status initialize(LearnerActor* self) {
  auto& st = self->state;
  const auto& setup = opts(self).setup;
  auto codec = parse_codec(setup.outer.codec);
  if (!codec) return codec.error();
  st.rules.codec = *codec;
  st.rules.staggered = diloco::staggered(setup.run.mode);
  st.rules.dynamic = diloco::dynamic_local_steps(setup.run.mode);
  auto replica = training::Replica::create(setup.model, setup.inner, setup.run.device, setup.run.seed);
  if (!replica) return replica.error();
  st.replica = std::move(*replica);
  if (diloco::whole_rounds(setup.run.mode)) {
    // Rounds are aligned across learners: a restarted learner redoes its interrupted round.
    st.spec.start_step -= st.spec.start_step % setup.run.inner_steps;
  }
  st.fragments.resize(st.spec.layout->plan.fragments.size());
  st.rules.schedule =
      FragmentSchedule(setup.run.inner_steps, static_cast<int>(st.fragments.size()), st.rules.staggered);
  for (size_t p = 0; p < st.fragments.size(); ++p) {
    st.fragments[p].share = static_cast<double>(st.spec.layout->plan.fragments[p].numel) /
                            static_cast<double>(std::max<int64_t>(1, st.spec.layout->parameter_count));
  }
  st.step = st.spec.start_step;
  // Sync mode is classic DiLoCo: every learner starts the next round from the global model.
  st.rules.install = st.rules.staggered ? install_mode(opts(self).syncer.carry_unsent, opts(self).syncer.alpha)
                            : InstallMode::replace;
  // Sync and ddp redo an interrupted round from its start, so unsent work is never carried over there.
  if (st.rules.staggered && opts(self).learner_checkpoint_every > 0 && !opts(self).run_dir.empty()) {
    const std::string directory = opts(self).run_dir + "/learners";
    std::error_code ec;
    std::filesystem::create_directories(directory, ec);
    st.checkpoint.path = learner_checkpoint_path(directory, st.id);
    if (std::filesystem::exists(st.checkpoint.path)) {
      std::vector<int64_t> sizes;
      for (const auto& f : st.spec.layout->plan.fragments) sizes.push_back(f.numel);
      auto loaded = load_learner_checkpoint(st.checkpoint.path, st.spec.layout->parameter_count, sizes);
      if (loaded) {
        st.checkpoint.loaded = std::make_unique<LearnerCheckpoint>(std::move(*loaded));
      } else {
        st.checkpoint.error = loaded.error().to_string();
        st.log->warn("{}: ignoring its checkpoint, starting from the global model alone: {}", st.id,
                     st.checkpoint.error);
      }
    }
  }
  if (st.checkpoint.loaded && st.checkpoint.loaded->step > st.step) {
    // Its data position ran ahead of what the supervisor last heard: do not train on those batches again.
    st.step = st.checkpoint.loaded->step;
  }
  return open_cursors(self);
}

// A learner's handle crosses to the coordinator (its downlinks watch it), so a peer could address
// it: it takes messages only from actors of its own process (actors/authorization.hpp).
bool from_this_process(LearnerActor* self) {
  const auto& sender = self->current_sender();
  if (sender && sender->node() == self->node()) return true;
  auto& st = self->state;
  if (st.refused_remote++ == 0) st.log->warn("{}: refused a message from outside its process (counted)", st.id);
  return false;
}

// What a learner does with each message its mailbox brings (messages::Handler): a global
// fragment's chunks are taken only while it can use them, its whole tensor is installed
// (on_global); a Welcome answers its join.
struct LearnerHandler : messages::Handler {
  using messages::Handler::on;
  LearnerActor* self;

  explicit LearnerHandler(LearnerActor* self) : self(self) {}

  bool screen(const DecodedEnvelope& envelope, const TensorChunk&) override {
    const auto* global = std::get_if<GlobalFragment>(&envelope.body);
    return global && takes_global_chunk(self, *global);
  }

  void refused(const DecodedEnvelope* envelope, const Error& error) override {
    auto& st = self->state;
    const auto* global = envelope ? std::get_if<GlobalFragment>(&envelope->body) : nullptr;
    if (!envelope) st.log->warn("{}: dropped a malformed message: {}", st.id, error.to_string());
    else if (global) st.log->warn("{}: dropped a bad global fragment {}: {}", st.id, global->fragment_id, error.to_string());
  }

  void on(const DecodedEnvelope&, const GlobalFragment& global, ReceivedTensor&& tensor) override {
    on_global(self, global, std::move(tensor.values));
  }

  void on(const DecodedEnvelope& envelope, const Welcome& welcome) override {
    on_welcome(self, envelope.sender_id, welcome);
  }
};

caf::behavior learner_behavior(LearnerActor* self, LearnerSpec spec, std::shared_ptr<PulseBoard> pulse) {
  auto& st = self->state;
  st.spec = std::move(spec);
  st.pulse = std::move(pulse);
  st.id = learner_id(st.spec.index);
  st.link.outbox = Outbox(st.id);
  st.controls.jitter.seed(opts(self).faults.seed * 1000003u + static_cast<uint64_t>(st.spec.index) * 7919u +
                          static_cast<uint64_t>(st.spec.incarnation));
  self->set_down_handler([=](caf::down_msg& down) {
    HandlerClock clock{self};
    auto& st = self->state;
    if (st.link.syncer && down.source == st.link.syncer.address()) {
      st.log->warn("{}: the syncer is down; training on, rejoining when a syncer is back", st.id);
      st.link.syncer = caf::actor{};
      st.link.connected = false;
    }
  });
  self->send(self, init_atom::value);
  return {
      [=](init_atom) {
        HandlerClock clock{self};
        auto& st = self->state;
        if (!from_this_process(self)) return;
        lower_thread_priority(st.spec.options->learner_nice, *st.log, st.id);  // its own thread (detached)
        if (st.spec.crash_on_start) {
          st.log->error("{}: injected start-up crash", st.id);
          self->quit(caf::exit_reason::unhandled_exception);
          return;
        }
        st.pulse->publish(current_heartbeat(self, Clock::now()));  // alive while it builds its replica
        Status ready = initialize(self);
        if (!ready) {
          st.log->error("{}: cannot start: {}", st.id, ready.error().to_string());
          self->quit(caf::exit_reason::unhandled_exception);
          return;
        }
        st.phase = Phase::joining;
        send_join(self);
        send_heartbeat(self);
        self->delayed_send(self, millis(opts(self).detector.heartbeat_s), beat_atom::value);
      },
      [=](step_atom) {
        HandlerClock clock{self};
        if (from_this_process(self)) run_step(self);
      },
      [=](stop_atom, const std::string& key) {
        HandlerClock clock{self};
        // Asked to stop (its node is leaving): the budget ends now; in-flight work drains first.
        auto& st = self->state;
        if (!keys_equal(key, process_key())) {
          st.refused_remote += 1;
          return;
        }
        st.spec.deadline = Clock::now();
        if (st.phase == Phase::waiting) {
          begin_drain(self);
        } else if (st.phase == Phase::init || st.phase == Phase::joining || st.phase == Phase::fetching) {
          finish(self, "stopped before training");
        }
      },
      [=](beat_atom) {
        HandlerClock clock{self};
        if (from_this_process(self)) on_beat(self);
      },
      [=](pause_atom, const std::string& key, bool pause) -> bool {
        HandlerClock clock{self};
        // An operator's pause (console): no inner steps until resumed; heartbeats go on, marked paused.
        auto& st = self->state;
        if (!keys_equal(key, process_key())) {
          st.refused_remote += 1;
          return false;
        }
        if (pause == st.controls.paused) return true;
        st.controls.paused = pause;
        if (pause) {
          st.times.sheet.switch_to(Activity::paused, clock_s(self));
          st.log->info("{}: paused at step {}", st.id, st.step);
        } else {
          const Activity resumed = between_messages(st);  // this handler's time is overhead
          st.times.sheet.switch_to(resumed == Activity::unseen ? Activity::overhead : resumed, clock_s(self));
          st.log->info("{}: resumed at step {}", st.id, st.step);
          if (st.phase == Phase::training) self->send(self, step_atom::value);
        }
        send_heartbeat(self);
        return true;
      },
      [=](throttle_atom, const std::string& key, double factor) {
        HandlerClock clock{self};
        auto& st = self->state;
        if (!keys_equal(key, process_key()) || !(factor >= 1 && factor <= kMaxThrottle)) {
          st.refused_remote += 1;
          return;
        }
        st.controls.throttle = factor;
        st.log->info("{}: throttled to {:.3g}x its step time at step {}", st.id, factor, st.step);
      },
      [=](corrupt_atom, const std::string& key) {
        HandlerClock clock{self};
        auto& st = self->state;
        if (!keys_equal(key, process_key()) || !drill_hooks()) {
          st.refused_remote += 1;
          return;
        }
        st.controls.corrupt_next = true;
      },
      [=](restart_atom, const std::string& key) {
        HandlerClock clock{self};
        // An operator's restart: its unsent work is saved first, so the next incarnation continues it.
        auto& st = self->state;
        if (!keys_equal(key, process_key())) {
          st.refused_remote += 1;
          return;
        }
        if (!st.checkpoint.path.empty() && st.replica && st.times.steps > 0) {
          collect_checkpoint_write(self, true);
          save_checkpoint(self);
          collect_checkpoint_write(self, true);
        }
        st.log->info("{}: restarting at step {} (operator)", st.id, st.step);
        send_heartbeat(self);  // its times up to the exit
        self->quit(caf::exit_reason::user_shutdown);  // not normal: its supervisor starts the next incarnation
      },
      [=](WireBytes& bytes) {
        HandlerClock clock{self};
        if (!from_this_process(self)) return;
        LearnerHandler handler{self};
        self->state.link.receiver.dispatch(std::move(bytes), handler);
      },
      [=](admin_atom, WireBytes& bytes) -> caf::result<WireBytes> {
        HandlerClock clock{self};
        auto& st = self->state;
        if (!from_this_process(self)) return caf::sec::request_receiver_down;
        auto request = read_admin_request(std::move(bytes));
        if (request && request->command == "digests") {
          nlohmann::json fragments = nlohmann::json::array();
          for (const auto& f : st.fragments) {
            fragments.push_back({{"version", f.global.version}, {"digest", broadcast_digest(f.global.values)}});
          }
          return admin_reply(st.id, request->request_id, true, "ok", {{"fragments", fragments}});
        }
        std::vector<uint64_t> versions;
        std::vector<int> periods;
        for (const auto& f : st.fragments) {
          versions.push_back(f.slot.version());
          periods.push_back(f.period);
        }
        const double now = clock_s(self);
        nlohmann::json j = {{"id", st.id}, {"incarnation", st.spec.incarnation}, {"phase", phase_name(st.phase)},
                            {"step", st.step}, {"connected", st.link.connected},
                            {"welcome_version", st.link.welcome_version}, {"fragment_versions", versions},
                            {"compute_s", st.times.sheet.seconds(Activity::computing, now)},
                            {"wait_s", st.times.sheet.seconds(Activity::waiting, now)},
                            {"recovery_s", st.times.sheet.seconds(Activity::recovering, now)},
                            {"tokens_per_s", st.times.tokens_per_s},
                            {"restored_from_step", st.checkpoint.restored_from_step},
                            {"restored_steps", st.checkpoint.restored_steps},
                            {"restored_dropped", st.checkpoint.restored_dropped},
                            {"steps_skipped", st.checkpoint.steps_skipped},
                            {"checkpoints_written", st.checkpoint.written},
                            {"checkpoints_skipped", st.checkpoint.skipped}, {"checkpoint_s", st.checkpoint.seconds},
                            {"checkpoint_error", st.checkpoint.error}, {"periods", periods},
                            {"fastest_tokens_per_s", st.rules.fastest_tokens_per_s},
                            {"learner_nonfinite_recoveries", st.nonfinite_recoveries},
                            {"suspect_globals", st.suspect_globals},
                            {"awaiting_new_globals", st.awaiting_new_globals},
                            {"broadcast_gaps", st.broadcast_gaps}, {"refused_remote", st.refused_remote},
                            {"thread_nice", thread_nice()}};
        return admin_reply(st.id, request ? request->request_id : 0, true, "ok", j);
      },
  };
}

}  // namespace

caf::actor spawn_learner(caf::actor_system& system, LearnerSpec spec) {
  // The pulse is spawned from this (the supervisor's) thread: it does not inherit the learner's nice.
  auto board = std::make_shared<PulseBoard>();
  const double interval_s = spec.options->detector.heartbeat_s;
  const std::string id = learner_id(spec.index);
  auto learner = system.spawn<caf::detached>(learner_behavior, std::move(spec), board);
  spawn_learner_pulse(system, learner, id, board, interval_s);
  return learner;
}

}  // namespace archipelago::actors

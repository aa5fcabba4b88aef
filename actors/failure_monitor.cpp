#include "actors/failure_monitor.hpp"
#include "actors/directory.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include <caf/all.hpp>

#include "actors/accounting.hpp"
#include "actors/events.hpp"
#include "diloco/detector.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"

namespace archipelago::actors {

using diloco::HeartbeatHistory;
using diloco::check_liveness;
using diloco::check_progress;
using diloco::observe_heartbeat;
using diloco::suspect_timeout;
namespace {

using namespace archipelago::messages;
using Clock = std::chrono::steady_clock;

enum class Liveness { alive, dead, finished };
const char* liveness_name(Liveness l) { return l == Liveness::alive ? "alive" : l == Liveness::dead ? "dead" : "finished"; }

struct Record {
  caf::actor handle;
  HeartbeatHistory history;
  Liveness state = Liveness::alive;
  uint64_t step = 0;
  double tokens_per_s = 0;
  double train_loss = std::nan("");  // as its last heartbeat with one said
  int64_t nonfinite_recoveries = 0;       // earlier incarnations
  int64_t nonfinite_recoveries_now = 0;   // the current incarnation, as its last heartbeat said
  int64_t deaths_silence = 0;       // deaths declared for silence ...
  int64_t deaths_exit = 0;          // ... and for an exit: one death per incarnation
  int64_t suspicions_withdrawn = 0; // declared dead for silence, then heard again (no death)
  bool stalled = false;             // beating without inner steps (diloco::check_progress)
  std::string last_reason;
  uint32_t incarnation = 0;
  bool paused = false;
  bool stepping = false;  // the current incarnation has taken an inner step
  double dead_s = -1;     // when it was last declared dead
  bool suspected = false; // declared dead for its silence alone (it may be heard again)
};

// A learner slot's times from its supervisor's SlotReports (the goodput ledger). A report from a new
// reporter (a node process started again) starts from zero: what the previous one reported is kept
// in `banked`, its running incarnation counted until the learner was declared dead.
// A reporter that ran before this monitor (a coordinator restarted under running nodes) is counted
// from its first report on: `baseline` is that report, subtracted, so the ledger covers this
// process's time only.
// A restarted coordinator's monitor starts from the resumed version's carry: `banked` is the slot's
// total so far, and the first report of the reporter that sent `carried` counts from it on.
struct Slot {
  SlotReport last;
  double received_s = -1;
  SlotReport banked;
  SlotReport baseline;
  std::optional<SlotReport> carried;
};

void add_times(SlotReport& into, const SlotReport& r, double sign = 1) {
  into.lifetime_seconds += sign * r.lifetime_seconds;
  into.alive_seconds += sign * r.alive_seconds;
  into.recovery_seconds += sign * r.recovery_seconds;
  into.compute_seconds += sign * r.compute_seconds;
  into.wait_seconds += sign * r.wait_seconds;
  into.paused_seconds += sign * r.paused_seconds;
  into.restarting_seconds += sign * r.restarting_seconds;
  into.throttled_seconds += sign * r.throttled_seconds;
  into.overhead_seconds += sign * r.overhead_seconds;
  into.sent_compute_seconds += sign * r.sent_compute_seconds;
  into.held_compute_seconds += sign * r.held_compute_seconds;
  into.left_compute_seconds += sign * r.left_compute_seconds;
  into.idle_seconds += sign * r.idle_seconds;
}

// The last report brought forward to `now`: a running incarnation lives on until now (or until the
// monitor declared the learner dead after the report), a restart in progress goes on, a slot that
// finished or was given up stays idle.
SlotReport extended(const Slot& slot, const Record* record, double now) {
  SlotReport r = slot.last;
  if (slot.received_s < 0) return r;
  if (r.state == SlotState::running) {
    const bool dead_since = record && record->state == Liveness::dead && record->dead_s >= slot.received_s;
    r.lifetime_seconds += (dead_since ? record->dead_s : now) - slot.received_s;
  } else if (r.state == SlotState::restarting) {
    r.restarting_seconds += now - slot.received_s;
  } else {
    r.idle_seconds += now - slot.received_s;
  }
  add_times(r, slot.baseline, -1);
  return r;
}

// What an operator sees (console, status page): the supervisor's view of the slot where it knows
// more (restarting, failed), else the detector's, refined by the last heartbeat.
const char* shown_state(const Record& r, const Slot* slot, double now, const DetectorOptions& detector) {
  if (slot && slot->received_s >= 0 && slot->last.state == SlotState::restarting) return "restarting";
  if (slot && slot->received_s >= 0 && slot->last.state == SlotState::failed) return "failed";
  if (r.state == Liveness::finished) return "finished";
  if (r.state == Liveness::dead) return "dead";
  if (r.paused) return "paused";
  if (r.incarnation > 0 && !r.stepping) return "restarting";  // a new incarnation recovering its state
  if (r.history.last_s >= 0 && now - r.history.last_s > 0.5 * suspect_timeout(r.history, detector)) return "suspect";
  if (r.stalled) return "stalled";
  return "alive";
}

struct MonitorState {
  std::shared_ptr<const RuntimeOptions> options;
  std::map<std::string, Record> learners;
  std::map<std::string, Slot> slots;
  double run_started_unix_s = 0;
  bool carry_changed = false;  // a report since the carry was last sent to the syncer
  double carry_sent_s = -1;
  Outbox outbox{"monitor"};
  int64_t heartbeat_bytes = 0;
  int64_t heartbeats = 0;
  Clock::time_point started = Clock::now();
  std::shared_ptr<spdlog::logger> log = component_logger("monitor");
  const char* name = "failure_monitor";
  double now() const { return monotonic_seconds(); }
};

using MonitorActor = caf::stateful_actor<MonitorState>;

// `kill`: the supervisor should make sure it is dead (a frozen learner); not when the supervisor
// itself reported the exit (its next incarnation may already run).
void declare_dead(MonitorActor* self, const std::string& id, Record& record, const std::string& reason,
                  bool kill = true) {
  auto& st = self->state;
  record.state = Liveness::dead;
  record.suspected = reason.rfind("suspected", 0) == 0;
  (record.suspected ? record.deaths_silence : record.deaths_exit) += 1;
  record.stalled = false;
  record.last_reason = reason;
  record.dead_s = st.now();
  record.stepping = false;
  st.log->warn("{} declared dead: {}", id, reason);
  if (st.options->events) st.options->events->add("death", id, reason);
  for (auto name : {syncer_name(), learner_supervisor_name()}) {
    if (!kill && name == learner_supervisor_name()) continue;
    auto target = Directory::get(self->system(), name);
    auto bytes = st.outbox.wrap(Leave{id, "dead: " + reason, LeaveCode::dead});
    if (target && bytes) self->send(target, std::move(*bytes));
  }
}

// An incarnation already declared dead for its silence is seen to exit (its supervisor's report, a
// down signal): the same death, now known to be an exit. A kill is one death whatever else was seen.
void exit_confirmed(MonitorActor* self, const std::string& id, Record& record, const std::string& reason) {
  if (record.state != Liveness::dead || !record.suspected) return;
  record.suspected = false;
  record.deaths_silence -= 1;
  record.deaths_exit += 1;
  record.last_reason = reason;
  self->state.log->info("{}: the death declared for its silence was an exit: {}", id, reason);
}

// The ledger's carry (accounting.hpp): each slot's total as of its last report, and that report.
LedgerCarry ledger_carry(const MonitorState& st) {
  LedgerCarry carry;
  carry.run_started_unix_s = st.run_started_unix_s;
  for (const auto& [id, slot] : st.slots) {
    SlotCarry c;
    c.total = slot.banked;
    if (slot.received_s >= 0) {
      add_times(c.total, slot.last);
      add_times(c.total, slot.baseline, -1);
      c.raw = slot.last;
    } else if (slot.carried) {
      c.raw = *slot.carried;
    } else {
      continue;
    }
    c.total.learner_id = c.raw.learner_id = id;
    carry.slots[id] = c;
  }
  return carry;
}

// At most every 0.25 s, after a report: what the syncer writes into the next committed version.
void send_carry(MonitorActor* self) {
  auto& st = self->state;
  if (!st.carry_changed || (st.carry_sent_s >= 0 && st.now() - st.carry_sent_s < 0.25)) return;
  auto syncer = Directory::get(self->system(), syncer_name());
  if (!syncer) return;
  self->send(syncer, ledger_atom::value, to_json(ledger_carry(st)).dump());
  st.carry_changed = false;
  st.carry_sent_s = st.now();
}

caf::behavior monitor_behavior(MonitorActor* self, std::shared_ptr<const RuntimeOptions> options) {
  self->state.options = std::move(options);
  {
    auto& st = self->state;
    st.run_started_unix_s = st.options->run_started_unix_s > 0 ? st.options->run_started_unix_s : unix_seconds();
    if (st.options->ledger_at_start) {
      for (const auto& [id, c] : st.options->ledger_at_start->slots) {
        auto& slot = st.slots[id];
        add_times(slot.banked, c.total);
        slot.last.state = c.raw.state;
        slot.last.incarnation = c.raw.incarnation;
        slot.last.restarts = c.raw.restarts;
        slot.carried = c.raw;
      }
    }
  }
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    for (auto& [id, record] : st.learners) {
      if (!record.handle || record.handle.address() != down.source) continue;
      record.handle = caf::actor{};
      if (record.state == Liveness::dead && down.reason && down.reason != caf::exit_reason::normal) {
        exit_confirmed(self, id, record, "actor down (" + self->system().render(down.reason) + ")");
      }
      if (record.state != Liveness::alive) return;
      if (!down.reason || down.reason == caf::exit_reason::normal) {
        record.state = Liveness::finished;
      } else {
        declare_dead(self, id, record, "actor down (" + self->system().render(down.reason) + ")");
      }
      return;
    }
  });
  self->send(self, tick_atom::value);
  return {
      [=](WireBytes& bytes) {
        auto& st = self->state;
        const auto size = static_cast<int64_t>(bytes.size());
        auto envelope = unwrap(std::move(bytes));
        if (!envelope) return;
        if (auto* beat = std::get_if<Heartbeat>(&envelope->body)) {
          st.heartbeat_bytes += size;
          st.heartbeats += 1;
          auto sender = caf::actor_cast<caf::actor>(self->current_sender());
          auto& record = st.learners[beat->learner_id];
          if (sender && sender != record.handle) {
            // A new incarnation: watch it, start its history afresh.
            record.handle = sender;
            self->monitor(sender);
            record.history = HeartbeatHistory{};
            record.state = Liveness::alive;
            record.nonfinite_recoveries += record.nonfinite_recoveries_now;
            record.nonfinite_recoveries_now = 0;
            if (beat->incarnation > 0 && st.options->events) {
              st.options->events->add("rejoin", beat->learner_id, "incarnation " + std::to_string(beat->incarnation));
            }
          }
          if (record.state == Liveness::dead && record.suspected && beat->incarnation == record.incarnation) {
            // Declared dead for its silence only (a frozen process, a cut link) and heard again: the same
            // incarnation lives. It is alive again; the syncer already took it back when it re-joined.
            record.state = Liveness::alive;
            record.suspected = false;
            record.deaths_silence -= 1;
            record.suspicions_withdrawn += 1;
            record.history = HeartbeatHistory{};
            st.log->info("{} is heard again after it was declared dead for its silence: alive", beat->learner_id);
            if (st.options->events) st.options->events->add("revived", beat->learner_id, "heard again");
          }
          if (record.state == Liveness::dead) return;  // a late beat of a dead incarnation
          observe_heartbeat(record.history, st.now(), static_cast<int64_t>(beat->step));
          record.step = beat->step;
          record.incarnation = beat->incarnation;
          record.paused = beat->paused;
          record.stepping = beat->compute_seconds > 0;
          if (beat->tokens_per_sec > 0) record.tokens_per_s = beat->tokens_per_sec;
          if (std::isfinite(beat->train_loss)) record.train_loss = beat->train_loss;
          record.nonfinite_recoveries_now = static_cast<int64_t>(beat->nonfinite_recoveries);
        } else if (auto* leave = std::get_if<Leave>(&envelope->body)) {
          auto it = st.learners.find(leave->learner_id);
          if (it != st.learners.end() && leave->code == LeaveCode::finished) it->second.state = Liveness::finished;
        } else if (auto* report = std::get_if<SlotReport>(&envelope->body)) {
          if (learner_index(report->learner_id) < 0) return;
          auto& slot = st.slots[report->learner_id];
          auto found = st.learners.find(report->learner_id);
          const Record* record = found == st.learners.end() ? nullptr : &found->second;
          if (slot.received_s < 0 || slot.last.reporter != report->reporter) {
            const double uptime = std::chrono::duration<double>(Clock::now() - st.started).count();
            // What the new reporter's clock covered: its supervisor started that long ago.
            const double covered = report->lifetime_seconds + report->restarting_seconds + report->idle_seconds;
            if (slot.received_s >= 0) {
              // The previous reporter (a node process) is gone: the unsent work its learner held is left.
              SlotReport gone = extended(slot, record, st.now());
              gone.left_compute_seconds += gone.held_compute_seconds;
              gone.held_compute_seconds = 0;
              add_times(slot.banked, gone);
              // From its learner's death (declared after its last report) until the new reporter's
              // supervisor started, the slot had no incarnation: idle on this clock. Before the
              // death no clock knows what the gone process did.
              if (record && record->dead_s >= slot.received_s) {
                slot.banked.idle_seconds += std::max(0.0, st.now() - covered - record->dead_s);
              }
            }
            if (slot.received_s < 0 && st.options->ledger_at_start) {
              // A carried ledger covers the run from its start: the carried reporter goes on from its
              // carried report, any other (a node that joined after the carried report, or started while
              // no coordinator ran) counts whole. What the carried one did after it no clock saw.
              slot.baseline = slot.carried && slot.carried->reporter == report->reporter ? *slot.carried : SlotReport{};
            } else {
              slot.baseline = covered > uptime ? *report : SlotReport{};
              // The slot's first reporter started after this monitor (a node that joined later): until
              // its supervisor's clock began, the monitor's clock saw the slot without any incarnation.
              if (slot.received_s < 0 && covered <= uptime) slot.banked.idle_seconds += uptime - covered;
            }
          }
          if (st.options->events && slot.last.state != report->state &&
              (report->state == SlotState::restarting || report->state == SlotState::failed)) {
            st.options->events->add(report->state == SlotState::failed ? "given_up" : "restart", report->learner_id,
                                    report->state == SlotState::failed
                                        ? "restarted too often: the run goes on without it"
                                        : "incarnation " + std::to_string(report->incarnation) + " exited");
          }
          slot.last = *report;
          slot.received_s = st.now();
          st.carry_changed = true;
          send_carry(self);
          // Its supervisor saw the incarnation exit: dead now, not after the heartbeat timeout.
          if (found != st.learners.end() && found->second.incarnation == report->incarnation &&
              (report->state == SlotState::restarting || report->state == SlotState::failed)) {
            if (found->second.state == Liveness::alive) {
              declare_dead(self, report->learner_id, found->second, "exited (its supervisor)", false);
            } else {
              exit_confirmed(self, report->learner_id, found->second, "exited (its supervisor)");
            }
          }
        }
      },
      [=](tick_atom) {
        auto& st = self->state;
        for (auto& [id, record] : st.learners) {
          if (record.state != Liveness::alive) continue;
          auto decision = check_liveness(record.history, st.now(), st.options->detector);
          if (decision.suspected) {
            declare_dead(self, id, record, "suspected: " + decision.reason);
            continue;
          }
          // Slow is not dead: a learner that beats without stepping is reported, never killed. A
          // paused one and a synchronous round's wait are no stall.
          const bool judged = !record.paused && st.options->setup.run.mode != diloco::Mode::sync;
          auto progress = check_progress(record.history, st.now(), st.options->detector);
          const bool stalled = judged && progress.stalled;
          if (stalled && !record.stalled) {
            st.log->warn("{} stalled: {}", id, progress.reason);
            if (st.options->events) st.options->events->add("stalled", id, progress.reason);
          }
          record.stalled = stalled;
        }
        send_carry(self);
        self->delayed_send(self, std::chrono::milliseconds(100), tick_atom::value);
      },
      [=](admin_atom, WireBytes& bytes) -> WireBytes {
        auto& st = self->state;
        auto request = read_admin_request(std::move(bytes));
        MonitorStatus status;
        for (const auto& [id, slot] : st.slots) {
          auto found = st.learners.find(id);
          SlotReport total = slot.banked;
          add_times(total, extended(slot, found == st.learners.end() ? nullptr : &found->second, st.now()));
          status.slots[id] = {slot_state_name(slot.last.state), slot.last.incarnation, slot.last.restarts,
                              st.now() - slot.received_s, slot_times(total)};
        }
        double loss_sum = 0;
        int loss_count = 0;
        for (const auto& [id, r] : st.learners) {
          status.alive += r.state == Liveness::alive ? 1 : 0;
          status.learner_nonfinite_recoveries += r.nonfinite_recoveries + r.nonfinite_recoveries_now;
          auto slot = st.slots.find(id);
          auto& learner = status.learners[id];
          learner.state = shown_state(r, slot == st.slots.end() ? nullptr : &slot->second, st.now(), st.options->detector);
          learner.liveness = liveness_name(r.state);
          learner.incarnation = r.incarnation;
          learner.step = r.step;
          learner.tokens_per_s = r.tokens_per_s;
          if (std::isfinite(r.train_loss)) learner.train_loss = r.train_loss;
          // The run's train loss: the learners' that still train or finished, not the dead's last.
          if (std::isfinite(r.train_loss) && r.state != Liveness::dead) {
            loss_sum += r.train_loss;
            loss_count += 1;
          }
          learner.deaths = r.deaths_silence + r.deaths_exit;
          learner.deaths_silence = r.deaths_silence;
          learner.deaths_exit = r.deaths_exit;
          learner.suspicions_withdrawn = r.suspicions_withdrawn;
          learner.stalled = r.stalled;
          learner.mean_interval_s = r.history.mean_interval_s;
          learner.timeout_s = suspect_timeout(r.history, st.options->detector);
          learner.last_reason = r.last_reason;
          if (r.history.last_s >= 0) learner.heartbeat_age_s = st.now() - r.history.last_s;
          learner.nonfinite_recoveries = r.nonfinite_recoveries + r.nonfinite_recoveries_now;
        }
        if (loss_count > 0) status.train_loss = loss_sum / loss_count;
        status.heartbeats = st.heartbeats;
        status.heartbeat_bytes = st.heartbeat_bytes;
        return admin_reply("monitor", request ? request->request_id : 0, true, "ok", status);
      },
  };
}

}  // namespace

caf::actor spawn_failure_monitor(caf::actor_system& system, std::shared_ptr<const RuntimeOptions> options) {
  return system.spawn(monitor_behavior, std::move(options));
}

}  // namespace archipelago::actors

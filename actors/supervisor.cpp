#include "actors/supervisor.hpp"
#include "actors/directory.hpp"

#include <chrono>
#include <map>

#include <caf/all.hpp>

#include "actors/accounting.hpp"
#include "actors/authorization.hpp"
#include "diloco/supervision.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"

namespace archipelago::actors {

using diloco::decide_restart;
namespace {

using namespace archipelago::messages;
using Clock = std::chrono::steady_clock;

// A child's state is a learner slot's (SlotReport.state): running, restarting, finished, failed.
using ChildState = messages::SlotState;

struct Child {
  ChildSpec spec;
  caf::actor handle;
  ChildState state = ChildState::running;
  int incarnation = 0;
  std::vector<double> restart_times;
  int64_t restarts = 0;
  int64_t start_step = 0;      // data position of the current incarnation
  int64_t last_step = 0;
  int64_t steps_computed = 0;  // over finished incarnations
  double died_s = -1;
  double spawned_s = 0;
  bool awaiting_progress = false;
  double recovery_s = 0;       // respawn -> first new step, summed (restarts only)
  double failed_s = -1;
  std::string last_reason;
  // The goodput ledger's times (SlotReport): the current incarnation's last heartbeat, and the
  // incarnations that ended, summed; lifetime spawn -> exit; idle while it has no incarnation, from
  // `idle_since_s` (the supervisor's start, or the exit that finished the slot) on.
  messages::Heartbeat beat;
  SlotReport ended;
  double idle_since_s = -1;
  double last_report_s = -1;
};

struct SupervisorState {
  SupervisorSpec spec;
  std::vector<Child> children;
  std::shared_ptr<std::vector<caf::actor>> live = std::make_shared<std::vector<caf::actor>>();
  Clock::time_point started = Clock::now();
  std::shared_ptr<spdlog::logger> log;
  const char* name = "supervisor";
  uint64_t reporter = 0;  // SlotReport.reporter: random per supervisor
  Outbox outbox{"supervisor"};
  double now() const { return monotonic_seconds(); }
};

using SupervisorActor = caf::stateful_actor<SupervisorState>;

void refresh_live(SupervisorActor* self) {
  auto& st = self->state;
  st.live->clear();
  for (const auto& c : st.children) {
    if (c.handle) st.live->push_back(c.handle);
  }
}

void start_child(SupervisorActor* self, int index) {
  auto& st = self->state;
  auto& child = st.children[index];
  ChildContext context{index, child.incarnation, child.last_step, caf::actor_cast<caf::actor>(self)};
  if (child.idle_since_s >= 0) {  // its first spawn
    child.ended.idle_seconds += st.now() - child.idle_since_s;
    child.idle_since_s = -1;
  }
  child.handle = child.spec.spawn(self->system(), context);
  child.state = ChildState::running;
  child.start_step = child.last_step;
  child.spawned_s = st.now();
  self->monitor(child.handle);
  // CAF 0.17's registry never overwrites a name (it emplaces): drop the dead incarnation first.
  Directory::erase(self->system(), child.spec.name);
  Directory::put(self->system(), child.spec.name, child.handle);
  refresh_live(self);
}

// An incarnation's times as its last heartbeat gave them, added to a slot's sums. The unsent work
// of one that `ended` is left behind (its successor's restored work is taken back from it); the
// running one holds its own.
void add_incarnation(SlotReport& into, const messages::Heartbeat& beat, bool ended) {
  into.alive_seconds += beat.alive_seconds;
  into.recovery_seconds += beat.recovery_seconds;
  into.compute_seconds += beat.compute_seconds;
  into.wait_seconds += beat.wait_seconds;
  into.paused_seconds += beat.paused_seconds;
  into.throttled_seconds += beat.throttled_seconds;
  into.overhead_seconds += beat.overhead_seconds;
  into.sent_compute_seconds += beat.sent_compute_seconds;
  into.left_compute_seconds += beat.dropped_compute_seconds - beat.restored_compute_seconds;
  if (ended) into.left_compute_seconds += beat.unsent_compute_seconds;
  else into.held_compute_seconds = beat.unsent_compute_seconds;
}

// A learner slot's times so far: the ended incarnations plus the running one as of now.
SlotReport slot_report(const SupervisorState& st, const Child& c) {
  SlotReport r = c.ended;
  r.learner_id = c.spec.id;
  r.state = c.state;
  r.incarnation = static_cast<uint32_t>(c.incarnation);
  r.restarts = static_cast<uint32_t>(c.restarts);
  r.reporter = st.reporter;
  if (c.handle) {
    r.lifetime_seconds += st.now() - c.spawned_s;
    add_incarnation(r, c.beat, false);
  }
  if (c.state == ChildState::restarting && c.died_s >= 0) r.restarting_seconds += st.now() - c.died_s;
  if (c.idle_since_s >= 0) r.idle_seconds += st.now() - c.idle_since_s;
  return r;
}

// Learner supervisors tell the failure monitor (across the session for a node) each slot's times:
// at most every second per slot, and at once when its state changes.
void report_slot(SupervisorActor* self, Child& c, bool now) {
  auto& st = self->state;
  if (!st.spec.report_slots || (!now && st.now() - c.last_report_s < 1.0)) return;
  auto monitor = Directory::get(self->system(), monitor_name());
  if (!monitor) return;
  c.last_report_s = st.now();
  st.outbox = Outbox(c.spec.id);
  auto bytes = st.outbox.wrap(slot_report(st, c));
  if (bytes) self->send(monitor, std::move(*bytes));
}

void on_down(SupervisorActor* self, const caf::down_msg& down) {
  auto& st = self->state;
  for (size_t i = 0; i < st.children.size(); ++i) {
    auto& child = st.children[i];
    if (!child.handle || child.handle.address() != down.source) continue;
    child.handle = caf::actor{};
    child.ended.lifetime_seconds += st.now() - child.spawned_s;
    add_incarnation(child.ended, child.beat, true);
    child.beat = messages::Heartbeat{};
    child.steps_computed += std::max<int64_t>(0, child.last_step - child.start_step);
    child.awaiting_progress = false;
    refresh_live(self);
    if (!down.reason || down.reason == caf::exit_reason::normal) {
      child.state = ChildState::finished;
      child.idle_since_s = st.now();
      st.log->info("{} finished", child.spec.id);
      report_slot(self, child, true);
      return;
    }
    child.last_reason = self->system().render(down.reason);
    child.died_s = st.now();
    auto decision = decide_restart(st.now(), child.restart_times, st.spec.options->restart);
    if (!decision.restart) {
      child.state = ChildState::failed;
      child.failed_s = st.now();
      child.idle_since_s = st.now();
      st.log->error("{} exited ({}); {}: the run continues without it", child.spec.id, child.last_reason,
                    decision.reason);
      report_slot(self, child, true);
      return;
    }
    child.state = ChildState::restarting;
    child.restart_times.push_back(st.now());
    st.log->warn("{} exited ({}); {}", child.spec.id, child.last_reason, decision.reason);
    self->delayed_send(self, std::chrono::milliseconds(static_cast<int64_t>(decision.delay_s * 1000)),
                       restart_atom::value, static_cast<int>(i));
    report_slot(self, child, true);
    return;
  }
}

SupervisorStatus status(SupervisorActor* self) {
  auto& st = self->state;
  SupervisorStatus s;
  s.name = st.spec.name;
  for (const auto& c : st.children) {
    s.restarts += c.restarts;
    s.running += c.state == ChildState::running;
    s.finished += c.state == ChildState::finished;
    s.failed += c.state == ChildState::failed;
    s.restarting += c.state == ChildState::restarting;
    const double down_now = c.state == ChildState::restarting && c.died_s >= 0 ? st.now() - c.died_s : 0;
    s.downtime_s += c.ended.restarting_seconds + down_now;
    s.recovery_s += c.recovery_s;
    if (c.failed_s >= 0) s.failed_idle_s += st.now() - c.died_s;
    const int64_t computed = c.steps_computed + (c.handle ? std::max<int64_t>(0, c.last_step - c.start_step) : 0);
    s.steps_computed += computed;
    auto& child = s.children[c.spec.id];
    child.state = slot_state_name(c.state);
    child.incarnation = static_cast<uint32_t>(c.incarnation);
    child.restarts = c.restarts;
    child.last_step = c.last_step;
    child.steps_computed = computed;
    child.downtime_s = c.ended.restarting_seconds + down_now;
    child.recovery_s = c.recovery_s;
    child.last_reason = c.last_reason;
    if (st.spec.report_slots) child.times = slot_times(slot_report(st, c));
  }
  return s;
}

caf::behavior supervisor_behavior(SupervisorActor* self, SupervisorSpec spec) {
  auto& st = self->state;
  st.log = component_logger(spec.name);
  st.spec = std::move(spec);
  st.reporter = std::stoull(random_key().substr(0, 16), nullptr, 16);
  for (const auto& child_spec : st.spec.children) {
    Child child;
    child.spec = child_spec;
    child.last_step = child_spec.start_step;
    child.idle_since_s = st.now();
    st.children.push_back(std::move(child));
  }
  // Children go down with their supervisor, for the same reason.
  auto live = st.live;
  self->attach_functor([live](const caf::error& reason) {
    for (auto& child : *live) caf::anon_send_exit(child, caf::exit_reason::user_shutdown);
  });
  self->set_down_handler([=](caf::down_msg& down) { on_down(self, down); });
  for (size_t i = 0; i < st.children.size(); ++i) start_child(self, static_cast<int>(i));
  return {
      [=](restart_atom, int index) {
        auto& st = self->state;
        if (index < 0 || index >= static_cast<int>(st.children.size())) return;
        auto& child = st.children[index];
        if (child.state != ChildState::restarting) return;
        child.incarnation += 1;
        child.restarts += 1;
        child.ended.restarting_seconds += st.now() - child.died_s;
        child.awaiting_progress = true;
        start_child(self, index);
        report_slot(self, child, true);
        st.log->info("{} restarted (incarnation {}) at step {}", child.spec.id, child.incarnation, child.last_step);
      },
      [=](WireBytes& bytes) {
        auto& st = self->state;
        auto envelope = unwrap(std::move(bytes));
        if (!envelope) return;
        if (auto* beat = std::get_if<Heartbeat>(&envelope->body)) {
          auto sender = self->current_sender();
          for (auto& c : st.children) {
            if (c.spec.id != beat->learner_id || !c.handle || caf::actor_cast<caf::actor>(sender) != c.handle) continue;
            c.last_step = static_cast<int64_t>(beat->step);
            // An update left: reported at once, so the ledger has its compute as sent before the
            // syncer's merge of it shows (else it would read as merged but never sent).
            const bool update_sent = beat->sent_compute_seconds != c.beat.sent_compute_seconds;
            if (beat->incarnation == static_cast<uint32_t>(c.incarnation)) c.beat = *beat;
            report_slot(self, c, update_sent);
            if (c.awaiting_progress && c.last_step > c.start_step) {
              c.awaiting_progress = false;
              c.recovery_s += st.now() - c.spawned_s;
            }
          }
        } else if (auto* leave = std::get_if<Leave>(&envelope->body)) {
          // The monitor declared a child dead: make sure it is (a frozen learner), the down restarts it.
          for (auto& c : st.children) {
            if (c.spec.id == leave->learner_id && c.handle && leave->code == LeaveCode::dead) {
              self->send_exit(c.handle, caf::exit_reason::kill);
            }
          }
        }
      },
      [=](admin_atom, WireBytes& bytes) -> WireBytes {
        auto request = read_admin_request(std::move(bytes));
        return admin_reply(self->state.spec.name, request ? request->request_id : 0, true, "ok", status(self));
      },
  };
}

}  // namespace

caf::actor spawn_supervisor(caf::actor_system& system, SupervisorSpec spec) {
  return system.spawn(supervisor_behavior, std::move(spec));
}

}  // namespace archipelago::actors

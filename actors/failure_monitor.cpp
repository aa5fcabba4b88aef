#include "actors/failure_monitor.hpp"
#include "actors/directory.hpp"

#include <chrono>
#include <map>

#include <caf/all.hpp>

#include "actors/policy.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"

namespace archipelago::actors {
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
  int64_t nonfinite_recoveries = 0;       // earlier incarnations
  int64_t nonfinite_recoveries_now = 0;   // the current incarnation, as its last heartbeat said
  int64_t deaths = 0;
  std::string last_reason;
};

struct MonitorState {
  std::shared_ptr<const RuntimeOptions> options;
  std::map<std::string, Record> learners;
  Outbox outbox{"monitor"};
  int64_t heartbeat_bytes = 0;
  int64_t heartbeats = 0;
  Clock::time_point started = Clock::now();
  std::shared_ptr<spdlog::logger> log = component_logger("monitor");
  const char* name = "failure_monitor";
  double now() const { return monotonic_seconds(); }
};

using MonitorActor = caf::stateful_actor<MonitorState>;

void declare_dead(MonitorActor* self, const std::string& id, Record& record, const std::string& reason) {
  auto& st = self->state;
  record.state = Liveness::dead;
  record.deaths += 1;
  record.last_reason = reason;
  st.log->warn("{} declared dead: {}", id, reason);
  for (auto name : {syncer_name(), learner_supervisor_name()}) {
    auto target = Directory::get(self->system(), name);
    auto bytes = st.outbox.wrap(Leave{id, "dead: " + reason, LeaveCode::dead});
    if (target && bytes) self->send(target, std::move(*bytes));
  }
}

caf::behavior monitor_behavior(MonitorActor* self, std::shared_ptr<const RuntimeOptions> options) {
  self->state.options = std::move(options);
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    for (auto& [id, record] : st.learners) {
      if (!record.handle || record.handle.address() != down.source) continue;
      record.handle = caf::actor{};
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
          }
          if (record.state == Liveness::dead) return;  // a late beat of a dead incarnation
          observe_heartbeat(record.history, st.now(), static_cast<int64_t>(beat->step));
          record.step = beat->step;
          if (beat->tokens_per_sec > 0) record.tokens_per_s = beat->tokens_per_sec;
          record.nonfinite_recoveries_now = static_cast<int64_t>(beat->nonfinite_recoveries);
        } else if (auto* leave = std::get_if<Leave>(&envelope->body)) {
          auto it = st.learners.find(leave->learner_id);
          if (it != st.learners.end() && leave->code == LeaveCode::finished) it->second.state = Liveness::finished;
        }
      },
      [=](tick_atom) {
        auto& st = self->state;
        for (auto& [id, record] : st.learners) {
          if (record.state != Liveness::alive) continue;
          auto decision = check_liveness(record.history, st.now(), st.options->detector);
          if (decision.suspected) declare_dead(self, id, record, "suspected: " + decision.reason);
        }
        self->delayed_send(self, std::chrono::milliseconds(100), tick_atom::value);
      },
      [=](admin_atom, WireBytes& bytes) -> WireBytes {
        auto& st = self->state;
        auto request = read_admin_request(std::move(bytes));
        nlohmann::json learners = nlohmann::json::object();
        int alive = 0;
        int64_t nonfinite = 0;
        for (const auto& [id, r] : st.learners) {
          alive += r.state == Liveness::alive ? 1 : 0;
          nonfinite += r.nonfinite_recoveries + r.nonfinite_recoveries_now;
          learners[id] = {{"state", liveness_name(r.state)}, {"step", r.step}, {"tokens_per_s", r.tokens_per_s},
                          {"deaths", r.deaths}, {"mean_interval_s", r.history.mean_interval_s},
                          {"timeout_s", suspect_timeout(r.history, st.options->detector)},
                          {"last_reason", r.last_reason},
                          {"heartbeat_age_s", r.history.last_s < 0 ? nlohmann::json(nullptr)
                                                                   : nlohmann::json(st.now() - r.history.last_s)},
                          {"nonfinite_recoveries", r.nonfinite_recoveries + r.nonfinite_recoveries_now}};
        }
        nlohmann::json j = {{"alive", alive}, {"learners", learners}, {"heartbeats", st.heartbeats},
                            {"learner_nonfinite_recoveries", nonfinite},
                            {"heartbeat_bytes", st.heartbeat_bytes}};
        return admin_reply("monitor", request ? request->request_id : 0, true, "ok", j);
      },
  };
}

}  // namespace

caf::actor spawn_failure_monitor(caf::actor_system& system, std::shared_ptr<const RuntimeOptions> options) {
  return system.spawn(monitor_behavior, std::move(options));
}

}  // namespace archipelago::actors

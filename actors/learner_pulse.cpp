#include "actors/learner_pulse.hpp"

#include <chrono>

#include <caf/all.hpp>

#include "actors/directory.hpp"
#include "actors/wire.hpp"

namespace archipelago::actors {
namespace {

struct PulseState {
  caf::actor learner;
  std::shared_ptr<const PulseBoard> board;
  std::chrono::milliseconds interval{200};
  std::optional<messages::Outbox> outbox;  // the learner's id, its own sequence numbers (heartbeats are not screened by them)
  const char* name = "learner_pulse";
};

using PulseActor = caf::stateful_actor<PulseState>;

void beat(PulseActor* self) {
  auto& st = self->state;
  auto latest = st.board->latest();
  if (!latest) return;
  auto monitor = Directory::get(self->system(), monitor_name());
  if (!monitor) return;
  auto bytes = st.outbox->wrap(*latest);
  if (bytes) caf::send_as<caf::message_priority::high>(st.learner, monitor, std::move(*bytes));
}

caf::behavior pulse_behavior(PulseActor* self, caf::actor learner, const std::string& learner_id,
                             std::shared_ptr<const PulseBoard> board, double interval_s) {
  auto& st = self->state;
  st.outbox.emplace(learner_id);
  st.learner = std::move(learner);
  st.board = std::move(board);
  st.interval = std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(interval_s * 1000)));
  self->monitor(st.learner);
  self->set_down_handler([=](caf::down_msg&) {
    self->state.learner = caf::actor{};
    self->quit();
  });
  self->send(self, beat_atom::value);
  return {
      [=](beat_atom) {
        beat(self);
        self->delayed_send(self, self->state.interval, beat_atom::value);
      },
  };
}

}  // namespace

caf::actor spawn_learner_pulse(caf::actor_system& system, caf::actor learner, const std::string& learner_id,
                               std::shared_ptr<const PulseBoard> board, double interval_s) {
  return system.spawn<caf::detached>(pulse_behavior, std::move(learner), learner_id, std::move(board), interval_s);
}

}  // namespace archipelago::actors

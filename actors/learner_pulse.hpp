// A learner's pulse: its liveness, apart from its work.
//
// A learner runs one inner step per message on its own (niced) thread, so anything it sends itself
// waits for the step in progress: a slow step, a throttled one, a long state fetch or a busy machine
// would silence it. The pulse is a second detached actor per learner incarnation, on a thread that
// is not niced, that sends the learner's latest heartbeat to the failure monitor every
// detector.heartbeat_s, whatever the learner is doing, under the learner's own identity
// (caf::send_as), so the monitor watches the learner actor and a new incarnation is still a new
// sender. A frozen process (SIGSTOP) freezes its pulses too: silence still means dead.
//
// Liveness and progress are apart: the heartbeat carries the inner step the learner last
// published, and the monitor judges a stall from the steps (`stalled`), never from the silence.
//
// Contract:
//   the learner  publishes each heartbeat it builds (PulseBoard::publish, its thread)
//   the pulse    sends the latest one, if any, every heartbeat_s, at high priority; it quits when
//                the learner is down (it monitors it)
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "messages/message_types.hpp"

namespace archipelago::actors {

// The latest heartbeat of one learner incarnation, written by the learner, read by its pulse.
class PulseBoard {
 public:
  void publish(const messages::Heartbeat& beat) {
    std::lock_guard lock(mutex_);
    latest_ = beat;
  }
  std::optional<messages::Heartbeat> latest() const {
    std::lock_guard lock(mutex_);
    return latest_;
  }

 private:
  mutable std::mutex mutex_;
  std::optional<messages::Heartbeat> latest_;
};

// Starts the pulse of `learner`: every `interval_s`, the board's latest heartbeat to the monitor
// that the actor directory names (in a node process: the facade that forwards it to the coordinator).
caf::actor spawn_learner_pulse(caf::actor_system& system, caf::actor learner, const std::string& learner_id,
                               std::shared_ptr<const PulseBoard> board, double interval_s);

}  // namespace archipelago::actors

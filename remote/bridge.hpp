// From the plane's loop thread to CAF actors and back (internal to remote/).
//
// `ask` lets loop code wait for an actor's answer without blocking the loop: it spawns a one-shot
// actor that makes the request, and the answer comes back by EventLoop::post to fulfil a kj
// promise on the loop thread. `request(self, done)` runs on a CAF thread; it must call `done`
// exactly once (with the reply or with a failure value).
#pragma once

#include <functional>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <kj/async.h>
#include <kj/time.h>

#include "remote/event_loop.hpp"

namespace archipelago::remote {

// Seconds (from configuration) as a kj duration, to the millisecond.
inline kj::Duration kj_duration(double seconds) { return static_cast<int64_t>(seconds * 1000) * kj::MILLISECONDS; }

template <typename Result>
kj::Promise<Result> ask(EventLoop& loop, caf::actor_system& system,
                        std::function<void(caf::event_based_actor*, std::function<void(Result)>)> request) {
  auto pair = kj::newPromiseAndFulfiller<Result>();
  auto fulfiller = std::make_shared<kj::Own<kj::PromiseFulfiller<Result>>>(kj::mv(pair.fulfiller));
  EventLoop* on = &loop;
  system.spawn([on, fulfiller, request](caf::event_based_actor* self) {
    request(self, [on, fulfiller, self](Result result) {
      on->post([fulfiller, result](EventLoop::Context&) mutable { (*fulfiller)->fulfill(kj::mv(result)); });
      self->quit();
    });
  });
  return kj::mv(pair.promise);
}

}  // namespace archipelago::remote

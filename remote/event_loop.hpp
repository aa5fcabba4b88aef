// The kj event loop of one process's cross-site plane, on a thread of its own.
//
// Cap'n Proto RPC and kj-tls run on a single-threaded kj event loop; CAF actors run on CAF's
// scheduler. `EventLoop` owns the loop's thread and is the only way across: `post` queues a
// function to run on the loop thread (any thread may call it; it never blocks on the network),
// and code on the loop reaches actors with caf::anon_send, which is thread-safe. Functions posted
// after `stop` (or from a destructor racing it) are dropped.
//
// Invariant: every kj object of the plane is created, used and destroyed on the loop thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "common/error.hpp"

namespace kj {
struct AsyncIoContext;
class TaskSet;
}  // namespace kj

namespace archipelago::remote {

class EventLoop {
 public:
  // What posted functions get: the loop's I/O context and a task set for fire-and-forget promises
  // (a failed task is logged under component "remote").
  struct Context {
    kj::AsyncIoContext& io;
    kj::TaskSet& tasks;
  };

  // Starts the thread and its loop; the error says why the loop could not start.
  static Expected<std::unique_ptr<EventLoop>> start(std::string name);
  // Stops the loop (running `at_stop` on it first, to drop the plane's objects) and joins the thread.
  ~EventLoop();
  EventLoop(const EventLoop&) = delete;
  EventLoop& operator=(const EventLoop&) = delete;

  // Runs `work` on the loop thread, soon. False when the loop has stopped (`work` is dropped).
  bool post(std::function<void(Context&)> work);

  // Runs `work` on the loop thread and waits for it (never call from the loop thread).
  template <typename T>
  T call(std::function<T(Context&)> work);

  // Runs once on the loop thread when it stops, before the context goes away.
  void at_stop(std::function<void()> done);

  bool on_loop_thread() const;

  struct Impl;

 private:
  explicit EventLoop(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace archipelago::remote

#include <future>

namespace archipelago::remote {
template <typename T>
T EventLoop::call(std::function<T(Context&)> work) {
  auto promise = std::make_shared<std::promise<T>>();
  auto future = promise->get_future();
  const bool posted = post([promise, work = std::move(work)](Context& context) mutable {
    try {
      if constexpr (std::is_void_v<T>) {
        work(context);
        promise->set_value();
      } else {
        promise->set_value(work(context));
      }
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  if (!posted) throw std::runtime_error("the plane's event loop has stopped");
  return future.get();
}
}  // namespace archipelago::remote

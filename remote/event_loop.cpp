#include "remote/event_loop.hpp"

#include <atomic>
#include <deque>
#include <mutex>
#include <thread>

#include <kj/async-io.h>
#include <kj/debug.h>

#include "common/log.hpp"

namespace archipelago::remote {
namespace {

class LogErrors final : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& exception) override {
    // A peer that went away mid-call is routine on a WAN; anything else is worth a line.
    if (exception.getType() == kj::Exception::Type::DISCONNECTED) return;
    component_logger("remote")->warn("plane task failed: {}", exception.getDescription().cStr());
  }
};

}  // namespace

struct EventLoop::Impl {
  std::string name;
  std::thread thread;
  std::thread::id thread_id;
  std::mutex mutex;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> wake_up;  // guarded by mutex; the loop's current wait
  std::deque<std::function<void(Context&)>> queue;  // guarded by mutex
  std::vector<std::function<void()>> stoppers;      // guarded by mutex
  bool stopping = false;                            // guarded by mutex
  std::promise<Status> started;

  // Under `mutex`: ends the loop's current wait (if it waits).
  void wake() {
    if (wake_up && wake_up->isWaiting()) wake_up->fulfill();
  }

  void run() {
    thread_id = std::this_thread::get_id();
    try {
      auto io = kj::setupAsyncIo();
      LogErrors errors;
      kj::TaskSet tasks(errors);
      Context context{io, tasks};
      started.set_value(Status::success());
      while (true) {
        std::deque<std::function<void(Context&)>> batch;
        bool stop = false;
        kj::Maybe<kj::Promise<void>> waiting;
        {
          std::lock_guard lock(mutex);
          batch.swap(queue);
          stop = stopping;
          if (batch.empty() && !stop) {
            // Armed under the lock that post() takes: no wake-up can fall between the check and the wait.
            auto pair = kj::newPromiseAndCrossThreadFulfiller<void>();
            wake_up = kj::mv(pair.fulfiller);
            waiting = kj::mv(pair.promise);
          }
        }
        KJ_IF_MAYBE(promise, waiting) {
          promise->wait(io.waitScope);
          continue;
        }
        for (auto& work : batch) {
          try {
            work(context);
          } catch (const std::exception& e) {
            component_logger("remote")->warn("{}: {}", name, e.what());
          } catch (kj::Exception& e) {
            component_logger("remote")->warn("{}: {}", name, e.getDescription().cStr());
          }
        }
        // Let the work's promises run before the next wait for work.
        io.waitScope.poll();
        if (stop) break;
      }
      std::vector<std::function<void()>> done;
      {
        std::lock_guard lock(mutex);
        done.swap(stoppers);
        wake_up = nullptr;
      }
      for (auto& d : done) d();
      io.waitScope.poll();
    } catch (kj::Exception& e) {
      component_logger("remote")->error("{}: the event loop failed: {}", name, e.getDescription().cStr());
      try {
        started.set_value(make_error(ErrorCode::unavailable, e.getDescription().cStr()));
      } catch (...) {
      }
    }
  }
};

Expected<std::unique_ptr<EventLoop>> EventLoop::start(std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  auto started = impl->started.get_future();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  auto status = started.get();
  if (!status) {
    raw->thread.join();
    return status.error();
  }
  return std::unique_ptr<EventLoop>(new EventLoop(std::move(impl)));
}

EventLoop::EventLoop(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

EventLoop::~EventLoop() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
    impl_->wake();
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

bool EventLoop::post(std::function<void(Context&)> work) {
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->stopping) return false;
    impl_->queue.push_back(std::move(work));
    impl_->wake();
  }
  return true;
}

void EventLoop::at_stop(std::function<void()> done) {
  std::lock_guard lock(impl_->mutex);
  impl_->stoppers.push_back(std::move(done));
}

bool EventLoop::on_loop_thread() const { return std::this_thread::get_id() == impl_->thread_id; }

}  // namespace archipelago::remote

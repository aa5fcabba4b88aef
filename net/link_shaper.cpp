// The FIFO link schedule and its real-time sender. See link_shaper.hpp for the contract.
#include "net/link_shaper.hpp"

#include <cmath>

namespace archipelago::net {

namespace {

Clock::duration seconds_to_duration(double seconds) {
  // Rounded to the nearest tick so exact inputs (1 ms, 25 ms) give exact schedules.
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::nanoseconds(std::llround(seconds * 1e9)));
}

}  // namespace

Status validate(const LinkSpec& spec) {
  if (!std::isfinite(spec.bandwidth_bits_per_s) || spec.bandwidth_bits_per_s < 0)
    return make_error(ErrorCode::invalid_argument, "bandwidth must be finite and >= 0 (0 = unlimited), got " +
                                                       std::to_string(spec.bandwidth_bits_per_s));
  if (!std::isfinite(spec.latency_s) || spec.latency_s < 0)
    return make_error(ErrorCode::invalid_argument,
                      "latency must be finite and >= 0, got " + std::to_string(spec.latency_s));
  return Status::success();
}

Clock::duration LinkShaper::serialization_delay(std::size_t bytes) const {
  if (spec_.bandwidth_bits_per_s <= 0) return Clock::duration::zero();
  return seconds_to_duration(double(bytes) * 8.0 / spec_.bandwidth_bits_per_s);
}

TimePoint LinkShaper::release_time(TimePoint now, std::size_t bytes) {
  const TimePoint start = now > link_free_at_ ? now : link_free_at_;
  link_free_at_ = start + serialization_delay(bytes);
  return link_free_at_ + seconds_to_duration(spec_.latency_s);
}

ShapedSender::ShapedSender(LinkSpec spec, Deliver deliver)
    : deliver_(std::move(deliver)), shaper_(spec), worker_([this] { run(); }) {}

ShapedSender::~ShapedSender() { stop(Shutdown::discard); }

Status ShapedSender::send(Message message) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return make_error(ErrorCode::unavailable, "shaped sender is stopped");
    const TimePoint release = shaper_.release_time(Clock::now(), message.size());
    queue_.push(Scheduled{release, next_sequence_++, std::move(message)});
  }
  wake_.notify_one();
  return Status::success();
}

void ShapedSender::stop(Shutdown mode) {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (mode == Shutdown::discard) discard_ = true;
  }
  wake_.notify_one();
  if (worker_.joinable()) worker_.join();
}

std::size_t ShapedSender::pending() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

void ShapedSender::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    if (discard_) {
      queue_ = {};
      return;
    }
    if (queue_.empty()) {
      if (stopping_) return;
      wake_.wait(lock);
      continue;
    }
    const TimePoint release = queue_.top().release;
    if (Clock::now() < release) {
      // Woken early by a new message or stop(); re-evaluate either way.
      wake_.wait_until(lock, release);
      continue;
    }
    // top() is const; the element is popped right after, so moving its payload out is safe.
    Message message = std::move(const_cast<Scheduled&>(queue_.top()).message);
    queue_.pop();
    lock.unlock();
    deliver_(std::move(message));
    lock.lock();
  }
}

}  // namespace archipelago::net

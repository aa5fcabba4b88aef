// Link emulation: a FIFO link of given bandwidth and latency, applied on the sending side.
//
// `LinkShaper` is the pure schedule. A chunk handed over at `now` starts transmitting when the link
// is free — max(now, when the previous chunk finished) — takes bytes·8/bandwidth to serialize, and
// is delivered `latency` after its last bit left. So a 25 ms, 100 Mbit/s WAN can be reproduced on
// loopback. Bandwidth 0 means unlimited (no serialization delay); latency 0 adds nothing.
// `ShapedSender` applies that schedule in real time: one worker thread hands each message to a
// delivery callback at its release time.
//
// Invariants: release times of successive chunks never decrease (FIFO); a shaper with an unlimited,
// zero-latency spec releases every chunk at `now` (pass-through).
// Thread-safety: `LinkShaper` is a plain value, not synchronized; one owner calls it. `ShapedSender`
// may be called from any thread; its callback runs on its own worker thread, one message at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "common/error.hpp"

namespace archipelago::net {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

struct LinkSpec {
  double bandwidth_bits_per_s = 0;  // 0: unlimited
  double latency_s = 0;             // one-way propagation delay

  bool pass_through() const { return bandwidth_bits_per_s == 0 && latency_s == 0; }
};

// Both numbers finite and non-negative; the error names the bad field.
Status validate(const LinkSpec& spec);

class LinkShaper {
 public:
  explicit LinkShaper(LinkSpec spec) : spec_(spec) {}

  // When a chunk of `bytes` handed to the link at `now` reaches the far end. Advances the link's
  // busy-until time, so call it exactly once per chunk, in sending order.
  TimePoint release_time(TimePoint now, std::size_t bytes);

  // Time the link needs to put `bytes` on the wire (0 when unlimited).
  Clock::duration serialization_delay(std::size_t bytes) const;

  const LinkSpec& spec() const { return spec_; }

 private:
  LinkSpec spec_;
  TimePoint link_free_at_{};  // when the last scheduled chunk's last bit leaves
};

// Delivers byte messages through `deliver` at the release times of a LinkShaper.
class ShapedSender {
 public:
  using Message = std::vector<char>;
  using Deliver = std::function<void(Message&&)>;

  enum class Shutdown { drain, discard };

  ShapedSender(LinkSpec spec, Deliver deliver);
  ~ShapedSender();  // stop(Shutdown::discard)
  ShapedSender(const ShapedSender&) = delete;
  ShapedSender& operator=(const ShapedSender&) = delete;

  // Schedules `message` at the link's next release time; fails once the sender is stopping.
  Status send(Message message);

  // Stops the worker. `drain` delivers everything already queued at its release time first;
  // `discard` drops it and returns at once. Idempotent. Must not be called from the callback.
  void stop(Shutdown mode);

  std::size_t pending() const;

 private:
  struct Scheduled {
    TimePoint release;
    std::uint64_t sequence;  // breaks ties so equal release times keep sending order
    Message message;
    bool operator>(const Scheduled& other) const {
      return release != other.release ? release > other.release : sequence > other.sequence;
    }
  };

  void run();

  Deliver deliver_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  LinkShaper shaper_;
  std::priority_queue<Scheduled, std::vector<Scheduled>, std::greater<>> queue_;
  std::uint64_t next_sequence_ = 0;
  bool stopping_ = false;
  bool discard_ = false;
  std::thread worker_;  // last: started after every other member exists
};

}  // namespace archipelago::net

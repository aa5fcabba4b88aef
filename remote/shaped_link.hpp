// One direction of an emulated WAN link between two processes, for actor messages.
//
// The remote layer (remote/remote_protocol.hpp) sends every cross-process payload through the
// sending side's ShapedLink: a net::ShapedSender (bandwidth + latency schedule, one worker thread)
// whose deliveries are paired, in order, with the closure that puts the bytes on the CAF
// transport. Messages are delivered strictly in the order they were sent (the shaper is FIFO), so
// chunks of one tensor stay in order. A pass-through link (no bandwidth limit, no latency) delivers
// on the caller's thread, without a hop.
//
// Thread-safety: send() may be called from any thread (actors of one node share the link); the
// closures run on the shaper's worker thread, one at a time. stop() drops what is still queued.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "actors/wire.hpp"
#include "net/link_shaper.hpp"

namespace archipelago::remote {

class ShapedLink {
 public:
  using Deliver = std::function<void(actors::WireBytes&&)>;

  explicit ShapedLink(net::LinkSpec spec);
  ~ShapedLink();
  ShapedLink(const ShapedLink&) = delete;
  ShapedLink& operator=(const ShapedLink&) = delete;

  // Hands `bytes` to `deliver` at the link's release time for them.
  void send(actors::WireBytes bytes, Deliver deliver);
  // Drops queued messages and stops the worker; later sends are dropped. Idempotent.
  void stop();

  const net::LinkSpec& spec() const { return spec_; }
  // Messages sent but not yet delivered.
  size_t pending();

 private:
  net::LinkSpec spec_;
  std::mutex mutex_;              // orders (closure, bytes) pairs identically in both queues
  std::deque<Deliver> closures_;  // one per message queued in sender_, same order
  std::atomic<bool> stopped_{false};
  std::unique_ptr<net::ShapedSender> sender_;  // null on a pass-through link
};

}  // namespace archipelago::remote

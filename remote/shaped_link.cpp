#include "remote/shaped_link.hpp"

namespace archipelago::remote {

using namespace archipelago::actors;  // wire bytes, atoms, registry names and refusals of the actors (actors/)


ShapedLink::ShapedLink(net::LinkSpec spec) : spec_(spec) {
  if (spec_.pass_through()) return;
  sender_ = std::make_unique<net::ShapedSender>(spec_, [this](net::ShapedSender::Message&& bytes) {
    Deliver deliver;
    {
      std::lock_guard lock(mutex_);
      if (closures_.empty()) return;  // stop() raced with this delivery
      deliver = std::move(closures_.front());
      closures_.pop_front();
    }
    deliver(std::move(bytes));
  });
}

ShapedLink::~ShapedLink() { stop(); }

void ShapedLink::send(WireBytes bytes, Deliver deliver) {
  if (!sender_) {
    if (!stopped_) deliver(std::move(bytes));
    return;
  }
  std::lock_guard lock(mutex_);
  if (stopped_) return;
  closures_.push_back(std::move(deliver));
  if (!sender_->send(std::move(bytes))) closures_.pop_back();
}

size_t ShapedLink::pending() {
  std::lock_guard lock(mutex_);
  return closures_.size();
}

void ShapedLink::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (sender_) sender_->stop(net::ShapedSender::Shutdown::discard);
  std::lock_guard lock(mutex_);
  closures_.clear();
}

}  // namespace archipelago::remote

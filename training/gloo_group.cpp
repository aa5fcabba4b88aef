#include "training/gloo_group.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

namespace archipelago::training {
namespace {

// c10d reports every failure (a peer gone, a timeout) as an exception: here it becomes an error value.
template <typename Body>
Status guarded(const char* what, Body&& body) {
  try {
    body();
    return {};
  } catch (const std::exception& e) {
    return make_error(ErrorCode::unavailable, std::string(what) + ": " + e.what());
  }
}

}  // namespace

struct RendezvousHost::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

RendezvousHost::RendezvousHost(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RendezvousHost::~RendezvousHost() = default;
int RendezvousHost::port() const { return impl_->store->getPort(); }

Expected<std::unique_ptr<RendezvousHost>> RendezvousHost::start(const std::string& host, int port) {
  auto impl = std::make_unique<Impl>();
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = true;
  options.waitWorkers = false;  // the workers are started after the store, by whoever started it
  if (Status started = guarded("rendezvous store", [&] { impl->store = c10::make_intrusive<c10d::TCPStore>(host, options); });
      !started) {
    return started.error();
  }
  return std::unique_ptr<RendezvousHost>(new RendezvousHost(std::move(impl)));
}

struct GlooGroup::Impl {
  GroupPlace place;
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

GlooGroup::GlooGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooGroup::~GlooGroup() = default;
int GlooGroup::rank() const { return impl_->place.rank; }
int GlooGroup::world() const { return impl_->place.world; }
int GlooGroup::store_port() const { return impl_->place.store_port; }

Expected<std::unique_ptr<GlooGroup>> GlooGroup::join(const GroupPlace& place) {
  if (place.world < 1 || place.rank < 0 || place.rank >= place.world) {
    return make_error(ErrorCode::invalid_argument, "rank " + std::to_string(place.rank) + " is not in a world of " +
                                                       std::to_string(place.world));
  }
  auto impl = std::make_unique<Impl>();
  impl->place = place;
  Status joined = guarded("gloo rendezvous", [&] {
    c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(place.store_port);
    options.isServer = false;
    options.timeout = place.timeout;
    impl->store = c10::make_intrusive<c10d::TCPStore>(place.store_host, options);
    auto group_options = c10d::ProcessGroupGloo::Options::create(place.timeout);
    group_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(place.bind_host));
    group_options->threads = 1;
    impl->group = c10::make_intrusive<c10d::ProcessGroupGloo>(impl->store, place.rank, place.world, group_options);
  });
  if (!joined) return joined.error();
  return std::unique_ptr<GlooGroup>(new GlooGroup(std::move(impl)));
}

Status GlooGroup::all_reduce_mean(float* values, int64_t count) {
  return guarded("gloo all-reduce", [&] {
    std::vector<at::Tensor> tensors{torch::from_blob(values, {count}, torch::kFloat)};
    impl_->group->allreduce(tensors)->wait();
    tensors[0].div_(static_cast<double>(impl_->place.world));
  });
}

Status GlooGroup::all_reduce_sum(int64_t* values, int64_t count) {
  return guarded("gloo all-reduce", [&] {
    std::vector<at::Tensor> tensors{torch::from_blob(values, {count}, torch::kLong)};
    impl_->group->allreduce(tensors)->wait();
  });
}

Status GlooGroup::broadcast(float* values, int64_t count, int root) {
  return guarded("gloo broadcast", [&] {
    std::vector<at::Tensor> tensors{torch::from_blob(values, {count}, torch::kFloat)};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    impl_->group->broadcast(tensors, options)->wait();
  });
}

Status GlooGroup::barrier() {
  return guarded("gloo barrier", [&] { impl_->group->barrier()->wait(); });
}

}  // namespace archipelago::training

// A data-parallel process group on gloo, the ring all-reduce a CPU PyTorch data-parallel job uses
// (LibTorch's c10d ProcessGroupGloo over TCP), with its rendezvous on a c10d TCPStore. No torch
// in this header.
//
// One process hosts the store (RendezvousHost: `archipelago train` in ddp mode, or whoever starts a
// job across machines); each of the `world` workers joins it with its rank and talks to the others
// directly. A GlooGroup is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/error.hpp"

namespace archipelago::training {

// The store every worker of one job meets at: a TCPStore server on `host`, port 0 picks a free one.
class RendezvousHost {
 public:
  static Expected<std::unique_ptr<RendezvousHost>> start(const std::string& host, int port);
  ~RendezvousHost();
  int port() const;

 private:
  struct Impl;
  explicit RendezvousHost(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct GroupPlace {
  std::string store_host = "127.0.0.1";  // where the RendezvousHost listens
  int store_port = 0;
  std::string bind_host = "127.0.0.1";   // the address this worker's gloo pairs listen on
  int rank = 0;
  int world = 1;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};  // rendezvous and every collective
};

class GlooGroup {
 public:
  // Meets the other world − 1 workers (blocks until all have joined or the timeout passes).
  static Expected<std::unique_ptr<GlooGroup>> join(const GroupPlace& place);
  ~GlooGroup();
  GlooGroup(const GlooGroup&) = delete;
  GlooGroup& operator=(const GlooGroup&) = delete;

  // values ← the mean of every worker's values (ring all-reduce of the sum, then ÷ world).
  Status all_reduce_mean(float* values, int64_t count);
  // values ← the sum of every worker's values (counters).
  Status all_reduce_sum(int64_t* values, int64_t count);
  // values ← rank `root`'s values.
  Status broadcast(float* values, int64_t count, int root);
  // Waits until every worker has reached it.
  Status barrier();

  int rank() const;
  int world() const;
  // The port of the store this worker's store client is connected to (its socket is not a gloo pair).
  int store_port() const;

 private:
  struct Impl;
  explicit GlooGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace archipelago::training

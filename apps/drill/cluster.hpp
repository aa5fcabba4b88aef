// The processes of one drill run: a coordinator (or syncer shards 0..K-1, one coordinator process
// each), and the node processes, all children of this binary in the run's directory, with the
// join and admin tokens they share and the ports they listen on.
//
// Each process's output is in DIR/NAME.INCARNATION.out and .err; a restart is a new incarnation on
// the same port and run directory. With sites in network namespaces (SiteNetwork) node-i runs in
// site (i % sites)'s. Every process is killed when the cluster is dropped (common/child_process.hpp).
// Owned by the runner (apps/drill/runner.hpp); its fault injector kills and restarts processes
// through it, all from the drill's one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/drill/random.hpp"
#include "apps/drill/schedule.hpp"
#include "common/child_process.hpp"

namespace archipelago::apps::drill {

class SiteNetwork;

// A run's clock: seconds since the run started.
struct RunClock {
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  double now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); }
};

void sleep_s(double s);

// `binary ARGUMENTS...` as a child, its output in DIR/NAME.INCARNATION.out and .err.
std::unique_ptr<ChildProcess> spawn(const std::string& binary, const std::string& name,
                                    const std::vector<std::string>& arguments, const std::filesystem::path& dir,
                                    int incarnation);
// The last line of a process's stdout as JSON: its summary (null when there is none, discarded
// when it is not JSON).
nlohmann::json summary_of(const ChildProcess& process);

class DrillCluster {
 public:
  // Nothing starts yet. `binary`: this program, exec'd for every child; `net`: the sites'
  // namespaces, or null (loopback); `seed`: draws the tokens' secrets.
  DrillCluster(const DrillConfig& c, std::filesystem::path dir, std::string binary, const SiteNetwork* net,
               uint64_t seed, const RunClock& clock);

  // A fresh run directory with the join and admin token files; the ports of every shard picked.
  void prepare();

  void start_coordinator();
  void start_shard(int k);  // k >= 1
  void start_node(int i);
  void start_nodes();
  // Waits for "listening on" in `process`'s stdout; the run-clock time it was seen, or -1 (it
  // exited, or `timeout_s` passed).
  double await_listening(ChildProcess& process, double timeout_s) const;
  // After the last fault: every node continued, every site's link up, every node process running
  // (one whose restart failed is started again).
  void undo_faults();
  // SIGKILLs every process (a run that could not be driven).
  void stop_all();

  ChildProcess& coordinator() { return *coordinator_; }
  // The coordinator processes started so far; incarnation i's log is DIR/coordinator.i.err.
  int coordinator_incarnations() const { return coordinator_incarnation_; }
  ChildProcess& shard(int k) { return *shards_[k]; }  // k >= 1
  bool shard_started(int k) const { return shards_[k] != nullptr; }
  ChildProcess& node(int i) { return *nodes_[i]; }
  bool node_started(int i) const { return i >= 0 && i < static_cast<int>(nodes_.size()) && nodes_[i]; }

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& binary() const { return binary_; }
  const SiteNetwork* network() const { return net_; }
  const std::string& host() const { return host_; }  // where the coordinator listens: loopback, or the hub's address
  int port() const { return port_; }                 // the coordinator's (shard 0's)
  int shard_port(int k) const { return shard_ports_[k]; }
  std::filesystem::path admin_token() const { return dir_ / "admin-token"; }
  // The run-clock time the first coordinator started (-1: not yet).
  double first_coordinator_s() const { return first_coordinator_s_; }

 private:
  std::vector<std::string> coordinator_args(int shard) const;
  std::vector<std::string> node_args(int i) const;

  const DrillConfig& c_;
  std::filesystem::path dir_;
  std::string binary_;
  const SiteNetwork* net_;
  Random random_;
  const RunClock& clock_;
  std::string host_;
  std::filesystem::path token_;
  int port_ = 0;
  std::vector<int> shard_ports_;  // [0]: port_
  std::unique_ptr<ChildProcess> coordinator_;
  int coordinator_incarnation_ = 0;
  std::vector<std::unique_ptr<ChildProcess>> shards_;  // [0] unused: shard 0 is coordinator_
  std::vector<int> shard_incarnations_;
  std::vector<std::unique_ptr<ChildProcess>> nodes_;
  std::vector<int> node_incarnations_;
  double first_coordinator_s_ = -1;
};

}  // namespace archipelago::apps::drill

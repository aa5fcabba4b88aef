#include "apps/drill/cluster.hpp"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <thread>

#include "apps/drill/site_network.hpp"
#include "remote/edge.hpp"

namespace archipelago::apps::drill {

namespace fs = std::filesystem;

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(s * 1e6))); }

std::unique_ptr<ChildProcess> spawn(const std::string& binary, const std::string& name,
                                    const std::vector<std::string>& arguments, const fs::path& dir, int incarnation) {
  const std::string stem = name + "." + std::to_string(incarnation);
  return std::make_unique<ChildProcess>(ChildOptions{binary, arguments, dir / (stem + ".out"), dir / (stem + ".err")});
}

nlohmann::json summary_of(const ChildProcess& process) {
  const std::string line = process.last_out_line();
  if (line.empty()) return nullptr;
  return nlohmann::json::parse(line, nullptr, false);
}

DrillCluster::DrillCluster(const DrillConfig& c, fs::path dir, std::string binary, const SiteNetwork* net, uint64_t seed,
                           const RunClock& clock)
    : c_(c), dir_(std::move(dir)), binary_(std::move(binary)), net_(net), random_(seed ^ 0xd7111ULL), clock_(clock),
      host_(net ? net->hub_address() : "127.0.0.1") {}

void DrillCluster::prepare() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_);
  token_ = dir_ / "token";
  const fs::path admin_token_file = admin_token();
  std::ofstream(token_) << "drill-join-secret-" << random_.next() << "-" << random_.next() << "\n";
  const std::string admin_secret = "drill-admin-secret-" + std::to_string(random_.next()) + "-" + std::to_string(random_.next());
  std::ofstream(admin_token_file) << admin_secret << "\n";
  chmod(token_.c_str(), 0600);
  chmod(admin_token_file.c_str(), 0600);
  port_ = free_port(host_);
  shard_ports_.assign(c_.shards, port_);
  for (int k = 1; k < c_.shards; ++k) {
    do shard_ports_[k] = free_port(host_);
    while (std::count(shard_ports_.begin(), shard_ports_.begin() + k, shard_ports_[k]) > 0);
  }
  shards_.resize(c_.shards);
  shard_incarnations_.assign(c_.shards, 0);
}

// Shard 0 (or the only coordinator) in dir/run; shard k >= 1 of a sharded drill in dir/run-shard-k.
std::vector<std::string> DrillCluster::coordinator_args(int shard) const {
  const int port = shard == 0 ? port_ : shard_ports_[shard];
  const fs::path run = dir_ / (shard == 0 ? std::string("run") : "run-shard-" + std::to_string(shard));
  std::vector<std::string> a{"coordinator", "--json", "--listen", host_ + ":" + std::to_string(port), "--run-dir",
                             run.string(), "--token-file", token_.string(), "--admin-token-file",
                             admin_token().string()};
  if (c_.shards > 1) {
    for (const std::string& s : {std::string("--shard"), std::to_string(shard), std::string("--shards"),
                                 std::to_string(c_.shards)}) {
      a.push_back(s);
    }
  }
  // The drill's own network namespaces are not loopback, and the drill tests recovery, not the
  // edge: plaintext there is allowed explicitly (the multisite and sites tests cover TLS).
  if (!remote::is_loopback(host_)) a.push_back("--insecure-plaintext");
  // Run until the drill stops it (a restarted coordinator would count train.max_seconds again);
  // every version kept for the checks afterwards; progress often enough to see each commit.
  std::vector<std::string> sets{"train.max_seconds=0", "train.max_tokens=0", "runtime.keep_versions=0",
                                "runtime.progress_interval_s=0.2",
                                "train.learners=" + std::to_string(c_.nodes * c_.learners_per_node)};
  sets.insert(sets.end(), c_.sets.begin(), c_.sets.end());
  for (const auto& s : sets) {
    a.push_back("--set");
    a.push_back(s);
  }
  return a;
}

// Every node obeys the drill's corrupt_update (--drill-hooks): these nodes exist for the drill.
std::vector<std::string> DrillCluster::node_args(int i) const {
  std::string coordinators = host_ + ":" + std::to_string(port_);
  for (int k = 1; k < c_.shards; ++k) coordinators += "," + host_ + ":" + std::to_string(shard_ports_[k]);
  std::vector<std::string> a{"node", "--json", "--drill-hooks", "--coordinator", coordinators,
                             "--learners", std::to_string(c_.learners_per_node), "--name", "node-" + std::to_string(i),
                             "--token-file", token_.string(), "--state-dir",
                             (dir_ / ("node-" + std::to_string(i) + "-state")).string(), "--set", "train.threads=1"};
  if (!remote::is_loopback(host_)) a.push_back("--insecure-plaintext");
  // A node keeps its own data.cache_dir (never the coordinator's paths): give it the drill's.
  for (const auto& set : c_.sets) {
    if (set.rfind("data.cache_dir=", 0) == 0) {
      a.push_back("--set");
      a.push_back(set);
    }
  }
  return a;
}

void DrillCluster::start_coordinator() {
  coordinator_ = spawn(binary_, "coordinator", coordinator_args(0), dir_, coordinator_incarnation_++);
  if (first_coordinator_s_ < 0) first_coordinator_s_ = clock_.now();
}

void DrillCluster::start_shard(int k) {
  shards_[k] = spawn(binary_, "shard-" + std::to_string(k), coordinator_args(k), dir_, shard_incarnations_[k]++);
}

// With sites in namespaces, node-i runs in site (i % sites)'s, through `ip netns exec`, which execs
// this binary by its path (not /proc/self/exe: that would be `ip` itself there).
void DrillCluster::start_node(int i) {
  const std::string name = "node-" + std::to_string(i);
  if (!net_) {
    nodes_[i] = spawn(binary_, name, node_args(i), dir_, node_incarnations_[i]++);
    return;
  }
  std::vector<std::string> command{fs::read_symlink("/proc/self/exe").string()};
  auto args = node_args(i);
  command.insert(command.end(), args.begin(), args.end());
  auto line = net_->in_site(i % c_.sites, command);
  nodes_[i] = spawn(line.front(), name, std::vector<std::string>(line.begin() + 1, line.end()), dir_,
                    node_incarnations_[i]++);
}

void DrillCluster::start_nodes() {
  nodes_.resize(c_.nodes);
  node_incarnations_.assign(c_.nodes, 0);
  for (int i = 0; i < c_.nodes; ++i) start_node(i);
}

double DrillCluster::await_listening(ChildProcess& process, double timeout_s) const {
  const auto deadline = clock_.now() + timeout_s;
  while (clock_.now() < deadline) {
    if (!process.running()) return -1;
    if (process.out().find("listening on") != std::string::npos) return clock_.now();
    sleep_s(0.01);
  }
  return -1;
}

void DrillCluster::undo_faults() {
  for (auto& n : nodes_) {
    if (n) n->signal(SIGCONT);
  }
  for (int s = 0; net_ && s < c_.sites; ++s) (void)net_->restore(s);  // a cut the run outlasted
  for (int i = 0; i < c_.nodes; ++i) {
    if (!nodes_[i]->running()) start_node(i);  // never happens unless a restart failed
  }
}

void DrillCluster::stop_all() {
  if (coordinator_) coordinator_->signal(SIGKILL);
  for (auto& shard : shards_) {
    if (shard) shard->signal(SIGKILL);
  }
  for (auto& n : nodes_) {
    if (n) {
      n->signal(SIGCONT);
      n->signal(SIGKILL);
    }
  }
}

}  // namespace archipelago::apps::drill

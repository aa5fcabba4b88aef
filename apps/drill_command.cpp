#include "apps/drill_command.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "remote/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "apps/config.hpp"
#include "apps/coordinator_command.hpp"
#include "messages/envelope.hpp"
#include "net/auth.hpp"
#include "remote/client.hpp"
#include "storage/checkpoint_store.hpp"

namespace archipelago::apps {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

// ledger_covers_the_run: the cluster's time the ledger may not count, at most: the first coordinator's
// start-up before its clock runs (data, model, held-out score) and the last one's final evaluation.
constexpr double kLedgerStartupS = 10;

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(s * 1e6))); }

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Children exec /proc/self/exe, the very file this process runs, even if a rebuild replaced the path.
std::string self_binary() { return "/proc/self/exe"; }

// ---- configuration ---------------------------------------------------------------------------------

const std::vector<std::string> kFaultKinds = {"kill_learner", "kill_node", "kill_coordinator", "freeze_node",
                                              "slow_node", "kill_site", "slow_learner", "corrupt_update", "cut_site",
                                              "kill_shard"};

std::string fault_kind_list() {
  std::string out;
  for (const auto& k : kFaultKinds) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// The faults aimed at one learner, and at one site.
bool learner_fault(const std::string& kind) {
  return kind == "kill_learner" || kind == "slow_learner" || kind == "corrupt_update";
}
bool site_fault(const std::string& kind) { return kind == "kill_site" || kind == "cut_site"; }

struct Fault {
  double at_s = 0;
  std::string kind;    // one of kFaultKinds
  std::string target;  // learner-N / node-N; empty: chosen by the seed when applied
};

struct DrillConfig {
  std::string name, description;
  double duration_s = 60;      // per run, from the first commit
  double warmup_s = 6;         // no fault earlier (from the first commit)
  double quiet_tail_s = 8;     // no fault later than duration - this
  int nodes = 2, learners_per_node = 2;
  int sites = 1;               // node-i is in site-(i % sites); kill_site SIGKILLs all of a site's nodes
  int shards = 1;              // syncer shards, one coordinator process each; kill_shard SIGKILLs shard 1.. (not 0)
  bool netns = false;          // each site in its own network namespace (root); needed by cut_site
  std::vector<std::string> sets;  // the coordinator's --set overrides
  bool baseline = true;        // run the ddp-like stall baseline under the same schedule
  bool reference = true;       // run a fault-free run of the same length
  bool allow_skipped = false;  // a scheduled fault that could not be carried out fails the drill unless true
  double loss_margin = 0.10;   // final loss <= fault-free final loss x (1 + margin)
  double learner_bound_s = 20, node_bound_s = 30, coordinator_bound_s = 2.0, freeze_bound_s = 30;
  double node_restart_after_s = 1.0, coordinator_restart_after_s = 1.0;
  double freeze_s = 3.0, slow_s = 8.0, slow_duty = 0.5;
  double slow_factor = 4.0;    // slow_learner: each inner step takes this many times its compute time
  double cut_s = 5.0;          // cut_site: how long the site's link stays down
  std::map<std::string, double> mtbf_s;  // kind -> mean time between faults per target (0: none)
  std::vector<Fault> timeline;
};

Expected<DrillConfig> load_drill(const std::string& path) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return make_error(ErrorCode::invalid_argument, path + ": " + std::string(e.description()));
  }
  DrillConfig c;
  c.name = fs::path(path).stem().string();
  auto bad = [&](const std::string& key, const std::string& why) {
    return make_error(ErrorCode::invalid_argument, path + ": " + key + ": " + why);
  };
  static const std::set<std::string> kDrillKeys = {
      "name", "description", "duration_s", "warmup_s", "quiet_tail_s", "nodes", "learners_per_node", "sites", "sets",
      "baseline", "reference", "loss_margin", "learner_bound_s", "node_bound_s", "coordinator_bound_s",
      "freeze_bound_s", "node_restart_after_s", "coordinator_restart_after_s", "freeze_s", "slow_s", "slow_duty",
      "slow_factor", "cut_s", "netns", "allow_skipped", "shards"};
  for (const auto& [key, value] : table) {
    if (key != "drill" && key != "mtbf_s" && key != "timeline") return bad(std::string(key.str()), "unknown table");
  }
  if (auto* drill = table["drill"].as_table()) {
    for (const auto& [key, value] : *drill) {
      if (!kDrillKeys.count(std::string(key.str()))) return bad("drill." + std::string(key.str()), "unknown key");
    }
    auto number = [&](const char* key, double& out, double min) -> Status {
      auto node = (*drill)[key];
      if (!node) return Status::success();
      auto v = node.value<double>();
      if (!v || !(*v >= min)) return bad(std::string("drill.") + key, "a number >= " + std::to_string(min));
      out = *v;
      return Status::success();
    };
    for (auto [key, out, min] : std::vector<std::tuple<const char*, double*, double>>{
             {"duration_s", &c.duration_s, 1}, {"warmup_s", &c.warmup_s, 0}, {"quiet_tail_s", &c.quiet_tail_s, 0},
             {"loss_margin", &c.loss_margin, 0}, {"learner_bound_s", &c.learner_bound_s, 0.1},
             {"node_bound_s", &c.node_bound_s, 0.1}, {"coordinator_bound_s", &c.coordinator_bound_s, 0.1},
             {"freeze_bound_s", &c.freeze_bound_s, 0.1}, {"node_restart_after_s", &c.node_restart_after_s, 0},
             {"coordinator_restart_after_s", &c.coordinator_restart_after_s, 0}, {"freeze_s", &c.freeze_s, 0.1},
             {"slow_s", &c.slow_s, 0.1}, {"slow_duty", &c.slow_duty, 0.05}, {"slow_factor", &c.slow_factor, 1},
             {"cut_s", &c.cut_s, 0.1}}) {
      if (auto s = number(key, *out, min); !s) return s.error();
    }
    if (c.slow_duty > 0.95) return bad("drill.slow_duty", "at most 0.95 (the share of time a slowed node is stopped)");
    if (c.slow_factor > messages::kMaxThrottle) return bad("drill.slow_factor", "at most 100 (the console's throttle)");
    if (auto node = (*drill)["netns"]) {
      auto v = node.value<bool>();
      if (!v) return bad("drill.netns", "true or false");
      c.netns = *v;
    }
    if (auto v = (*drill)["name"].value<std::string>()) c.name = *v;
    if (auto v = (*drill)["description"].value<std::string>()) c.description = *v;
    if (auto v = (*drill)["nodes"].value<int64_t>()) c.nodes = static_cast<int>(*v);
    if (auto v = (*drill)["learners_per_node"].value<int64_t>()) c.learners_per_node = static_cast<int>(*v);
    if (c.nodes < 1 || c.nodes > 16) return bad("drill.nodes", "1..16");
    if (c.learners_per_node < 1 || c.learners_per_node > 8) return bad("drill.learners_per_node", "1..8");
    if (auto v = (*drill)["sites"].value<int64_t>()) c.sites = static_cast<int>(*v);
    if (c.sites < 1 || c.sites > c.nodes) return bad("drill.sites", "1..nodes");
    if (auto v = (*drill)["shards"].value<int64_t>()) c.shards = static_cast<int>(*v);
    if (c.shards < 1 || c.shards > 4) return bad("drill.shards", "1..4");
    if (auto v = (*drill)["baseline"].value<bool>()) c.baseline = *v;
    if (auto v = (*drill)["reference"].value<bool>()) c.reference = *v;
    if (auto v = (*drill)["allow_skipped"].value<bool>()) c.allow_skipped = *v;
    if (auto* sets = (*drill)["sets"].as_array()) {
      for (const auto& s : *sets) {
        auto v = s.value<std::string>();
        if (!v || v->find('=') == std::string::npos) return bad("drill.sets", "strings of the form section.key=value");
        c.sets.push_back(*v);
      }
    }
  }
  if (auto* rates = table["mtbf_s"].as_table()) {
    for (const auto& [key, value] : *rates) {
      const std::string kind(key.str());
      if (std::find(kFaultKinds.begin(), kFaultKinds.end(), kind) == kFaultKinds.end()) return bad("mtbf_s." + kind, "unknown fault");
      auto v = value.value<double>();
      if (!v || *v < 0) return bad("mtbf_s." + kind, "a number >= 0 (0: none)");
      c.mtbf_s[kind] = *v;
    }
  }
  if (auto* timeline = table["timeline"].as_array()) {
    for (const auto& entry : *timeline) {
      auto* t = entry.as_table();
      if (!t) return bad("timeline", "an array of tables [[timeline]]");
      Fault f;
      auto at = (*t)["at_s"].value<double>();
      auto kind = (*t)["fault"].value<std::string>();
      if (!at || *at < 0) return bad("timeline.at_s", "a number >= 0 (seconds after the first commit)");
      if (!kind || std::find(kFaultKinds.begin(), kFaultKinds.end(), *kind) == kFaultKinds.end()) {
        return bad("timeline.fault", "one of " + fault_kind_list());
      }
      f.at_s = *at;
      f.kind = *kind;
      f.target = (*t)["target"].value_or(std::string{});
      c.timeline.push_back(f);
    }
  }
  auto cuts = [&] {
    if (c.mtbf_s.count("cut_site") && c.mtbf_s.at("cut_site") > 0) return true;
    for (const auto& f : c.timeline) {
      if (f.kind == "cut_site") return true;
    }
    return false;
  };
  if (cuts() && !c.netns) return bad("drill.netns", "cut_site needs netns = true (a site's link is a veth between namespaces)");
  auto kills_shards = [&] {
    if (c.mtbf_s.count("kill_shard") && c.mtbf_s.at("kill_shard") > 0) return true;
    for (const auto& f : c.timeline) {
      if (f.kind == "kill_shard") return true;
    }
    return false;
  };
  if (kills_shards() && c.shards < 2) return bad("drill.shards", "kill_shard needs shards >= 2 (shard 0 is the coordinator)");
  if (c.shards > 1 && (c.baseline || c.reference)) {
    return bad("drill.shards", "a sharded drill runs no baseline or reference run: set baseline = false and reference = false");
  }
  return c;
}

// splitmix64: the same stream on every platform.
struct Random {
  uint64_t state;
  explicit Random(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double unit() { return double(next() >> 11) * 0x1.0p-53; }
  size_t below(size_t n) { return static_cast<size_t>(next() % n); }
};

// The seeded schedule: Poisson arrivals per kind (rate = targets / MTBF) in [warmup, duration - tail],
// plus the explicit timeline; targets drawn now, so every run of the drill gets the same ones.
std::vector<Fault> make_schedule(const DrillConfig& c, uint64_t seed, double duration_s) {
  std::vector<Fault> out;
  const int learners = c.nodes * c.learners_per_node;
  auto target_of = [&](const std::string& kind, Random& r) -> std::string {
    if (kind == "kill_coordinator") return "coordinator";
    if (kind == "kill_shard") return "shard-" + std::to_string(1 + r.below(static_cast<size_t>(c.shards - 1)));
    if (learner_fault(kind)) return "learner-" + std::to_string(r.below(learners));
    if (site_fault(kind)) return "site-" + std::to_string(r.below(c.sites));
    return "node-" + std::to_string(r.below(c.nodes));
  };
  for (size_t k = 0; k < kFaultKinds.size(); ++k) {
    const auto& kind = kFaultKinds[k];
    auto it = c.mtbf_s.find(kind);
    if (it == c.mtbf_s.end() || it->second <= 0) continue;
    const int targets = kind == "kill_coordinator" ? 1
                        : kind == "kill_shard"     ? c.shards - 1
                        : learner_fault(kind)      ? learners
                        : site_fault(kind)         ? c.sites
                                                   : c.nodes;
    const double rate = targets / it->second;
    Random r(seed * 0x100000001b3ULL + k + 1);
    for (double t = c.warmup_s;;) {
      t += -std::log(1.0 - r.unit()) / rate;
      if (t > duration_s - c.quiet_tail_s) break;
      out.push_back({t, kind, target_of(kind, r)});
    }
  }
  Random r(seed ^ 0x5eedULL);
  for (auto f : c.timeline) {
    if (f.at_s > duration_s) continue;
    if (f.target.empty()) f.target = target_of(f.kind, r);
    out.push_back(f);
  }
  std::stable_sort(out.begin(), out.end(), [](const Fault& a, const Fault& b) { return a.at_s < b.at_s; });
  return out;
}

// ---- child processes -------------------------------------------------------------------------------

// A child process of this binary, stdout and stderr in files; killed (SIGKILL) when dropped, and by
// the kernel when the drill itself dies (PR_SET_PDEATHSIG).
class Child {
 public:
  Child(const std::string& binary, const std::string& name, const std::vector<std::string>& arguments, const fs::path& dir,
        int incarnation)
      : name_(name),
        out_(dir / (name + "." + std::to_string(incarnation) + ".out")),
        err_(dir / (name + "." + std::to_string(incarnation) + ".err")) {
    std::vector<std::string> args{binary};
    args.insert(args.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string out = out_.string(), err = err_.string();
    pid_ = fork();
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(o, 1);
      dup2(e, 2);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Child() {
    if (running()) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, SIGKILL);
      wait(10);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int s) {
    if (running()) ::kill(pid_, s);
  }
  bool running() {
    if (pid_ <= 0 || exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    return !exited_;
  }
  // The exit code, or -1 after `timeout_s` (then it is SIGKILLed).
  int wait(double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    while (running()) {
      if (Clock::now() >= deadline) {
        ::kill(pid_, SIGCONT);
        ::kill(pid_, SIGKILL);
        while (running()) sleep_s(0.01);
        return -1;
      }
      sleep_s(0.01);
    }
    return exit_code_;
  }
  std::string out() const { return read_text(out_); }
  std::string err() const { return read_text(err_); }
  const fs::path& out_path() const { return out_; }
  json summary() const {
    auto text = out();
    auto end = text.find_last_not_of('\n');
    if (end == std::string::npos) return nullptr;
    auto begin = text.rfind('\n', end);
    begin = begin == std::string::npos ? 0 : begin + 1;
    return json::parse(text.substr(begin, end - begin + 1), nullptr, false);
  }

 private:
  std::string name_;
  fs::path out_, err_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_code_ = -1;
};

// ---- sites in network namespaces ---------------------------------------------------------------------

// The drill's own network: a hub namespace (the drill and its coordinator) joined to one namespace
// per site by a veth pair, addresses on each namespace's loopback (hub 10.79.0.1, site s
// 10.79.1.<s + 1>, /32) and a host route each way, as tests/sites/netns.sh builds them. Cutting a
// site's link sets the hub's end of its veth down (the kernel drops its route); restoring sets it
// up and puts both routes back. Nothing outside these namespaces is touched; they are deleted,
// and whatever still runs in them killed, when this is destroyed.
class SiteNetwork {
 public:
  static Expected<std::unique_ptr<SiteNetwork>> create(int sites) {
    if (geteuid() != 0) return make_error(ErrorCode::unavailable, "network namespaces need root (CAP_NET_ADMIN)");
    std::string ip;
    for (const char* candidate : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (access(candidate, X_OK) == 0) {
        ip = candidate;
        break;
      }
    }
    if (ip.empty()) return make_error(ErrorCode::unavailable, "'ip' (iproute2) is not installed");
    std::unique_ptr<SiteNetwork> net(new SiteNetwork(ip, "adrill" + std::to_string(getpid()), sites));
    if (auto s = net->build(); !s) return s.error();
    return net;
  }
  ~SiteNetwork() {
    for (const auto& name : created_) {
      // A namespace outlives `ip netns del` while a process remains in it.
      std::istringstream pids(capture("netns pids " + name));
      for (pid_t pid; pids >> pid;) {
        if (pid != getpid()) ::kill(pid, SIGKILL);
      }
      (void)ip("netns del " + name);
    }
  }
  SiteNetwork(const SiteNetwork&) = delete;
  SiteNetwork& operator=(const SiteNetwork&) = delete;

  // Moves this process into the hub namespace: call before any thread that opens sockets starts
  // (new threads and children inherit the namespace of the thread that made them).
  Status enter_hub() const {
    const std::string path = "/run/netns/" + ns("hub");
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return make_error(ErrorCode::io, "open " + path + ": " + std::strerror(errno));
    const int rc = setns(fd, CLONE_NEWNET);
    const int error = errno;
    close(fd);
    if (rc != 0) return make_error(ErrorCode::io, "setns " + path + ": " + std::strerror(error));
    return Status::success();
  }
  std::string hub_address() const { return "10.79.0.1"; }
  const std::string& prefix() const { return prefix_; }  // of every namespace's name
  // The command line that runs `command` in site `s`'s namespace (`ip netns exec` execs it: same pid).
  std::vector<std::string> in_site(int s, std::vector<std::string> command) const {
    std::vector<std::string> out{ip_, "netns", "exec", ns("s" + std::to_string(s))};
    out.insert(out.end(), command.begin(), command.end());
    return out;
  }
  Status cut(int s) const { return ip("-n " + ns("hub") + " link set s" + std::to_string(s) + " down"); }
  Status restore(int s) const {
    if (auto st = ip("-n " + ns("hub") + " link set s" + std::to_string(s) + " up"); !st) return st;
    return routes(s);
  }

 private:
  SiteNetwork(std::string ip, std::string prefix, int sites) : ip_(std::move(ip)), prefix_(std::move(prefix)), sites_(sites) {}
  std::string ns(const std::string& name) const { return prefix_ + "-" + name; }
  std::string site_address(int s) const { return "10.79.1." + std::to_string(s + 1); }

  std::string capture(const std::string& args, int* status = nullptr) const {
    std::string out;
    FILE* pipe = popen((ip_ + " " + args + " 2>&1").c_str(), "r");
    if (!pipe) return "popen failed";
    char buffer[512];
    while (std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
    const int rc = pclose(pipe);
    if (status) *status = rc;
    return out;
  }
  Status ip(const std::string& args) const {
    int status = 0;
    auto out = capture(args, &status);
    if (status != 0) return make_error(ErrorCode::io, "ip " + args + ": " + out);
    return Status::success();
  }
  Status routes(int s) const {
    const std::string i = std::to_string(s);
    if (auto st = ip("-n " + ns("hub") + " route replace " + site_address(s) + "/32 dev s" + i + " src " + hub_address()); !st) {
      return st;
    }
    return ip("-n " + ns("s" + i) + " route replace " + hub_address() + "/32 dev hub src " + site_address(s));
  }
  Status build() {
    std::vector<std::string> names{"hub"};
    for (int s = 0; s < sites_; ++s) names.push_back("s" + std::to_string(s));
    for (const auto& name : names) {
      if (auto st = ip("netns add " + ns(name)); !st) return st;
      created_.push_back(ns(name));
      if (auto st = ip("-n " + ns(name) + " link set lo up"); !st) return st;
    }
    if (auto st = ip("-n " + ns("hub") + " addr add " + hub_address() + "/32 dev lo"); !st) return st;
    for (int s = 0; s < sites_; ++s) {
      const std::string i = std::to_string(s), site = ns("s" + i);
      for (const std::string& args : {"-n " + site + " addr add " + site_address(s) + "/32 dev lo",
                                      "-n " + ns("hub") + " link add s" + i + " type veth peer name hub netns " + site,
                                      "-n " + ns("hub") + " link set s" + i + " up", "-n " + site + " link set hub up"}) {
        if (auto st = ip(args); !st) return st;
      }
      if (auto st = routes(s); !st) return st;
    }
    return Status::success();
  }

  std::string ip_, prefix_;
  int sites_;
  std::vector<std::string> created_;
};

// Reads what a file grew by since the last call, line by line.
class LineTail {
 public:
  explicit LineTail(fs::path path) : path_(std::move(path)) {}
  void reset(fs::path path) {
    path_ = std::move(path);
    offset_ = 0;
    partial_.clear();
  }
  std::vector<std::string> lines() {
    std::vector<std::string> out;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return out;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    offset_ += chunk.size();
    partial_ += chunk;
    for (size_t at; (at = partial_.find('\n')) != std::string::npos;) {
      out.push_back(partial_.substr(0, at));
      partial_.erase(0, at + 1);
    }
    return out;
  }

 private:
  fs::path path_;
  size_t offset_ = 0;
  std::string partial_;
};

// `key=value` of a progress line, or nullopt.
std::optional<double> field(const std::string& line, const std::string& key) {
  auto at = line.find(" " + key + "=");
  if (at == std::string::npos) return std::nullopt;
  const char* begin = line.c_str() + at + key.size() + 2;
  char* end = nullptr;
  double v = std::strtod(begin, &end);
  if (end == begin) return std::nullopt;
  return v;
}

// ---- the admin console's client, in process ------------------------------------------------------

// One admin session to the coordinator (remote::AdminClient: the console's session, proved with
// the admin token of `token_file`); reopened after the coordinator restarts.
class AdminClient {
 public:
  AdminClient(std::string host, std::string token_file) : host_(std::move(host)), token_file_(std::move(token_file)) {}

  void forget() { session_.reset(); }

  Expected<json> call(int port, messages::AdminVerb verb, const std::string& target = {}, double timeout_s = 5,
                      const std::string& value = {}) {
    if (!session_) {
      if (auto s = open(port); !s) return s.error();
    }
    messages::AdminCommand command{++request_id_, verb, 0, 0};
    command.target = target;
    command.value = value;
    auto bytes = outbox_.wrap(command);
    if (!bytes) return bytes.error();
    auto answer = session_->request(*bytes, timeout_s);
    if (!answer) {
      forget();
      return answer.error();
    }
    auto envelope = actors::unwrap(std::move(*answer));
    const auto* reply = envelope ? std::get_if<messages::AdminReply>(&envelope->body) : nullptr;
    if (!reply) return make_error(ErrorCode::io, "malformed answer");
    if (!reply->ok) return make_error(ErrorCode::unavailable, reply->text);
    auto parsed = json::parse(reply->json, nullptr, false);
    if (parsed.is_discarded()) return make_error(ErrorCode::io, "answer is not JSON");
    return parsed;
  }

 private:
  Status open(int port) {
    auto secret = net::load_token_file(token_file_);
    if (!secret) return secret.error();
    remote::Endpoint endpoint{host_, static_cast<uint16_t>(port), std::nullopt, !remote::is_loopback(host_), {}};
    auto session = remote::AdminClient::open(std::move(endpoint), *secret, 5);
    if (!session) return session.error();
    session_ = std::move(*session);
    return Status::success();
  }

  std::string host_;
  std::string token_file_;
  std::unique_ptr<remote::AdminClient> session_;
  actors::Outbox outbox_{"drill"};
  uint64_t request_id_ = 0;
};

// ---- one run of the cluster ---------------------------------------------------------------------------

struct Recovery {
  std::string kind;        // learner | node | coordinator | shard | freeze | slow
  std::string fault;       // the fault's kind
  std::string target;
  double at_s = 0;         // when the fault was applied (run clock)
  double from_s = 0;       // where recovery_s is measured from: the kill (learner), the restart (node,
                           // coordinator: its listening), the SIGCONT (freeze, slow)
  double recovered_s = -1;
  double bound_s = 0;
  std::string evidence;
  json detail = json::object();
  bool recovered() const { return recovered_s >= 0; }
  double recovery_s() const { return recovered() ? recovered_s - from_s : -1; }
};

// An invariant: whether it held, over how many observations (versions read back, comparisons,
// contributions, faults...), and the evidence in words. One that observed nothing fails: it proved
// nothing.
struct Check {
  std::string name;
  bool passed = false;
  int64_t observations = 0;
  std::string evidence;

  Check(std::string name_, bool holds, int64_t observed, std::string evidence_)
      : name(std::move(name_)), passed(holds && observed > 0), observations(observed),
        evidence(observed > 0 ? std::move(evidence_) : "no observation: " + evidence_) {}
};

struct LossPoint {
  double t_s;
  double version;
  double loss;
};

struct RunResult {
  std::string mode;  // diloco | ddp | fault_free
  bool driven = false;
  std::string error;
  std::vector<LossPoint> loss;
  std::vector<Recovery> recoveries;
  json final_summary;
  double initial_loss = NAN, final_loss = NAN;
  double wall_s = 0;
  int kills = 0;
  double coordinator_down_s = 0;
  std::vector<Check> checks;
  std::vector<json> skipped;  // scheduled faults not carried out: at_s, fault, target, why
  double goodput = NAN;
  std::map<std::string, double> parts;  // seconds: the last coordinator's ledger, which covers the whole run
  double allocated_s = 0;
  double ledger_wall_s = 0;   // allocated ÷ slots: the run's time as the ledger counts it
  double cluster_wall_s = 0;  // the first coordinator's start → the last one's summary, on the drill's clock
};

using Hashes = std::map<uint64_t, std::vector<std::string>>;  // version -> role/fragment/hash entries

Expected<Hashes> stored_hashes(storage::CheckpointStore& store) {
  auto list = store.list();
  if (!list) return list.error();
  Hashes out;
  for (const auto& info : *list) {
    for (const auto& e : info.entries) {
      out[info.version].push_back(std::to_string(static_cast<int>(e.role)) + "/" + std::to_string(e.fragment) + "/" +
                                  e.hash.to_hex());
    }
  }
  return out;
}

// Digests of versions read at a kill, compared with the store at the next kill or after the run.
struct DigestComparisons {
  int same = 0, changed = 0, lost = 0, dropped = 0;
  int compared() const { return same + changed + lost + dropped; }
};

class Runner {
 public:
  Runner(const DrillConfig& c, std::string mode, std::vector<Fault> schedule, fs::path dir, std::string binary,
         double duration_s, std::optional<int> kill_limit, uint64_t seed, const SiteNetwork* net)
      : c_(c), schedule_(std::move(schedule)), dir_(std::move(dir)), binary_(std::move(binary)),
        duration_s_(duration_s), kill_limit_(kill_limit), random_(seed ^ 0xd7111ULL), tail_(""), net_(net),
        host_(net ? net->hub_address() : "127.0.0.1") {
    result_.mode = std::move(mode);
  }

  void run() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    fs::create_directories(dir_);
    token_ = dir_ / "token";
    admin_token_ = dir_ / "admin-token";
    std::ofstream(token_) << "drill-join-secret-" << random_.next() << "-" << random_.next() << "\n";
    const std::string admin_secret = "drill-admin-secret-" + std::to_string(random_.next()) + "-" + std::to_string(random_.next());
    std::ofstream(admin_token_) << admin_secret << "\n";
    chmod(token_.c_str(), 0600);
    chmod(admin_token_.c_str(), 0600);
    admin_ = std::make_unique<AdminClient>(host_, admin_token_.string());
    port_ = free_port();
    shard_ports_.assign(c_.shards, port_);
    for (int k = 1; k < c_.shards; ++k) {
      do shard_ports_[k] = free_port();
      while (std::count(shard_ports_.begin(), shard_ports_.begin() + k, shard_ports_[k]) > 0);
    }
    shards_.resize(c_.shards);
    shard_incarnations_.assign(c_.shards, 0);
    shard_summaries_.assign(c_.shards, json::object());
    shard_snapshots_.resize(c_.shards);
    shard_digests_.resize(c_.shards);
    started_ = Clock::now();
    if (!drive()) {
      stop_all();
      return;
    }
    result_.driven = true;
    finish();
  }

 private:
  double now() const { return std::chrono::duration<double>(Clock::now() - started_).count(); }

  int free_port() const {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    inet_pton(AF_INET, host_.c_str(), &address.sin_addr);
    bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
    socklen_t length = sizeof address;
    getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
    close(fd);
    return ntohs(address.sin_port);
  }

  // Shard 0 (or the only coordinator) in dir/run; shard k >= 1 of a sharded drill in dir/run-shard-k.
  std::vector<std::string> coordinator_args(int shard = 0) const {
    const int port = shard == 0 ? port_ : shard_ports_[shard];
    const fs::path run = dir_ / (shard == 0 ? std::string("run") : "run-shard-" + std::to_string(shard));
    std::vector<std::string> a{"coordinator", "--json", "--listen", host_ + ":" + std::to_string(port), "--run-dir",
                               run.string(), "--token-file", token_.string(), "--admin-token-file",
                               admin_token_.string()};
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
  std::vector<std::string> node_args(int i) const {
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

  void start_shard(int k) {
    shards_[k] = std::make_unique<Child>(binary_, "shard-" + std::to_string(k), coordinator_args(k), dir_,
                                         shard_incarnations_[k]++);
  }

  // Waits for shard k's "listening on"; the run-clock time it was seen, or -1.
  double await_shard_listening(int k, double timeout_s) {
    const auto deadline = now() + timeout_s;
    while (now() < deadline) {
      if (!shards_[k]->running()) return -1;
      if (shards_[k]->out().find("listening on") != std::string::npos) return now();
      sleep_s(0.01);
    }
    return -1;
  }

  void start_coordinator() {
    coordinator_ = std::make_unique<Child>(binary_, "coordinator", coordinator_args(), dir_, coordinator_incarnation_++);
    tail_.reset(coordinator_->out_path());
    admin_->forget();
    if (first_coordinator_s_ < 0) first_coordinator_s_ = now();
  }

  // With sites in namespaces, node-i runs in site (i % sites)'s, through `ip netns exec`, which execs
  // this binary by its path (not /proc/self/exe: that would be `ip` itself there).
  void start_node(int i) {
    const std::string name = "node-" + std::to_string(i);
    if (!net_) {
      nodes_[i] = std::make_unique<Child>(binary_, name, node_args(i), dir_, node_incarnations_[i]++);
      return;
    }
    std::vector<std::string> command{fs::read_symlink("/proc/self/exe").string()};
    auto args = node_args(i);
    command.insert(command.end(), args.begin(), args.end());
    auto line = net_->in_site(i % c_.sites, command);
    nodes_[i] = std::make_unique<Child>(line.front(), name, std::vector<std::string>(line.begin() + 1, line.end()), dir_,
                                        node_incarnations_[i]++);
  }

  // Waits for "listening on" in the coordinator's stdout; the run-clock time it was seen, or -1.
  double await_listening(double timeout_s) {
    const auto deadline = now() + timeout_s;
    while (now() < deadline) {
      if (!coordinator_->running()) return -1;
      if (coordinator_->out().find("listening on") != std::string::npos) return now();
      sleep_s(0.01);
    }
    return -1;
  }

  // Progress lines of the coordinator: committed version and held-out loss against the run clock.
  void read_progress() {
    for (const auto& line : tail_.lines()) {
      if (line.rfind("progress ", 0) != 0) continue;
      auto version = field(line, "version");
      if (!version) continue;
      last_version_ = std::max<int64_t>(last_version_, static_cast<int64_t>(*version));
      auto loss = field(line, "heldout_loss");
      if (loss && std::isfinite(*loss) &&
          (result_.loss.empty() || result_.loss.back().loss != *loss || result_.loss.back().version != *version)) {
        result_.loss.push_back({now(), *version, *loss});
      }
    }
  }

  void poll_learners() {
    auto rows = admin_->call(port_, messages::AdminVerb::learners);
    if (!rows) return;
    for (const auto& row : (*rows)["learners"]) learners_[row.value("id", "")] = row;
  }

  void poll_status() {
    auto status = admin_->call(port_, messages::AdminVerb::status);
    if (!status) return;
    if (status->contains("committed_version") && (*status)["committed_version"].is_number()) {
      last_version_ = std::max<int64_t>(last_version_, (*status)["committed_version"].get<int64_t>());
    }
  }

  json learner(const std::string& id) const {
    auto it = learners_.find(id);
    return it == learners_.end() ? json::object() : it->second;
  }
  std::vector<std::string> learners_on(const std::string& node) const {
    std::vector<std::string> out;
    for (const auto& [id, row] : learners_) {
      if (row.value("node", "") == node) out.push_back(id);
    }
    return out;
  }
  std::vector<std::string> all_learners() const {
    std::vector<std::string> out;
    for (const auto& [id, row] : learners_) out.push_back(id);
    return out;
  }

  // ddp-like stall: every learner but the fault's victims takes no steps until they are back.
  void stall_others(const std::vector<std::string>& victims) {
    if (result_.mode != "ddp") return;
    for (const auto& id : all_learners()) {
      if (std::find(victims.begin(), victims.end(), id) != victims.end()) continue;
      if (admin_->call(port_, messages::AdminVerb::pause, id)) stalled_.push_back(id);
    }
  }
  // After a coordinator restart a paused learner can be resumed only once it rejoined: retried.
  void release_stall(double patience_s = 0) {
    if (result_.mode != "ddp") return;
    const double deadline = now() + patience_s;
    std::vector<std::string> left = stalled_;
    while (!left.empty()) {
      std::vector<std::string> again;
      for (const auto& id : left) {
        if (!admin_->call(port_, messages::AdminVerb::resume, id)) again.push_back(id);
      }
      left = again;
      if (left.empty() || now() >= deadline) break;
      sleep_s(0.05);
    }
    stalled_.clear();
  }

  // ---- faults ----

  struct Tracking {
    Recovery r;
    std::map<std::string, int64_t> merged_at;  // learner -> contributions_merged when the phase began
    std::map<std::string, int> joins_at, restarts_at;
    std::set<std::string> restarted;           // learners whose new incarnation was seen
    std::set<std::string> done;
    std::vector<int> nodes;  // the fault's node processes
    double restart_at_s = -1;  // node: when to start it again; freeze/slow: when to SIGCONT; slow learner:
                               // when to end its throttle; cut: when to restore the link
    bool stopped = false;      // slow: currently SIGSTOPped
    double toggle_at_s = 0;
    std::vector<std::string> throttled;  // slow learner: the learners the console throttled
    int64_t malformed_at = -1;           // corrupt: the syncer's malformed refusals before it; -1 once seen
    int site = -1;                       // cut
    double rejoined_s = -1;              // learner, node, site: when every victim was seen back
  };

  // The syncer's refusals of `reason` so far (status), or -1 when the coordinator did not answer.
  int64_t refused(const std::string& reason) {
    auto status = admin_->call(port_, messages::AdminVerb::status, {}, 2);
    if (!status) return -1;
    const json rejected = status->value("rejected", json::object());
    return rejected.is_object() ? rejected.value(reason, int64_t{0}) : int64_t{0};
  }

  // A console command aimed at one learner, the others stalled first in the ddp-like run (and
  // released again when the command fails).
  Expected<json> stall_and_command(messages::AdminVerb verb, const std::string& victim) {
    stall_others({victim});
    auto answer = admin_->call(port_, verb, victim);
    if (!answer) release_stall();
    return answer;
  }

  // Throttles `ids` to `factor` through the console; the ones it reached.
  std::vector<std::string> throttle(const std::vector<std::string>& ids, double factor, std::string& answers) {
    std::vector<std::string> done;
    for (const auto& id : ids) {
      auto answer = admin_->call(port_, messages::AdminVerb::throttle, id, 5, fmt(factor, 3));
      if (answer) done.push_back(id);
      answers += (answers.empty() ? "" : "; ") + id + ": " + (answer ? answer->dump() : answer.error().reason);
    }
    return done;
  }

  bool apply(const Fault& f) {
    Tracking t;
    t.r.fault = f.kind;
    t.r.target = f.target;
    t.r.at_s = now();
    poll_learners();
    auto node_index = [&](const std::string& target) { return std::atoi(target.c_str() + 5); };
    // A fault aimed at one learner: it must be alive; its merges so far are the baseline of its recovery.
    auto aim_at_learner = [&](const char* kind, double bound_s) {
      auto row = learner(f.target);
      if (row.empty() || row.value("state", "") != "alive") return json();
      t.r.kind = kind;
      t.r.bound_s = bound_s;
      t.merged_at[f.target] = row.value("contributions_merged", int64_t{0});
      return row;
    };
    if (f.kind == "kill_learner") {
      auto row = aim_at_learner("learner", c_.learner_bound_s);
      if (row.empty()) return skip(f, "not alive");
      t.restarts_at[f.target] = row.value("restarts", 0);
      auto answer = stall_and_command(messages::AdminVerb::kill_learner, f.target);
      if (!answer) return skip(f, "console: " + answer.error().reason);
      t.r.at_s = t.r.from_s = now();
      t.r.evidence = "console 'kill learner " + f.target + "': " + answer->dump();
      result_.kills += 1;
    } else if (f.kind == "slow_learner") {
      if (aim_at_learner("slow_learner", c_.freeze_bound_s).empty()) return skip(f, "not alive");
      // A synchronous job runs at its slowest member's pace: the ddp-like run slows every learner.
      std::string answers;
      t.throttled = throttle(result_.mode == "ddp" ? all_learners() : std::vector<std::string>{f.target}, c_.slow_factor,
                             answers);
      if (t.throttled.empty()) return skip(f, "console: " + answers);
      t.r.at_s = now();
      t.restart_at_s = t.r.at_s + c_.slow_s;
      t.r.evidence = "console 'throttle " + f.target + " " + fmt(c_.slow_factor, 1) + "' for " + fmt(c_.slow_s, 1) + " s: " + answers;
    } else if (f.kind == "corrupt_update") {
      if (aim_at_learner("corrupt", c_.learner_bound_s).empty()) return skip(f, "not alive");
      t.malformed_at = refused("malformed");
      if (t.malformed_at < 0) return skip(f, "no status from the coordinator");
      auto answer = stall_and_command(messages::AdminVerb::corrupt_update, f.target);
      if (!answer) return skip(f, "console: " + answer.error().reason);
      t.r.at_s = t.r.from_s = now();
      t.r.detail["malformed_before"] = t.malformed_at;
      t.r.evidence = "console 'corrupt " + f.target + "': " + answer->dump();
    } else if (f.kind == "cut_site") {
      if (!net_) return skip(f, "no network namespaces");
      t.site = std::atoi(f.target.c_str() + 5);
      std::vector<std::string> ids;
      for (int n = t.site; n < c_.nodes; n += c_.sites) {
        auto on = learners_on("node-" + std::to_string(n));
        ids.insert(ids.end(), on.begin(), on.end());
      }
      if (ids.empty()) return skip(f, "no learners known on " + f.target);
      for (const auto& id : ids) t.merged_at[id] = learner(id).value("contributions_merged", int64_t{0});
      stall_others(ids);
      if (auto st = net_->cut(t.site); !st) {
        release_stall();
        return skip(f, st.error().reason);
      }
      t.r.kind = "cut";
      t.r.bound_s = c_.node_bound_s;
      t.r.at_s = now();
      t.restart_at_s = t.r.at_s + c_.cut_s;
      t.r.evidence = "ip link set s" + std::to_string(t.site) + " down (the hub's end of " + f.target + "'s veth) for " +
                     fmt(c_.cut_s, 1) + " s";
    } else if (f.kind == "kill_node" || f.kind == "freeze_node" || f.kind == "slow_node" || f.kind == "kill_site") {
      if (f.kind == "kill_site") {
        const int site = std::atoi(f.target.c_str() + 5);
        for (int i = site; i < c_.nodes; i += c_.sites) t.nodes.push_back(i);
      } else {
        t.nodes.push_back(node_index(f.target));
      }
      std::vector<std::string> ids;
      for (int n : t.nodes) {
        if (n < 0 || n >= c_.nodes || !nodes_[n] || !nodes_[n]->running()) return skip(f, "node not running");
        auto on = learners_on("node-" + std::to_string(n));
        if (on.empty()) return skip(f, "no learners known on node-" + std::to_string(n));
        ids.insert(ids.end(), on.begin(), on.end());
      }
      for (const auto& id : ids) {
        auto row = learner(id);
        t.merged_at[id] = row.value("contributions_merged", int64_t{0});
        t.joins_at[id] = row.value("joins", 0);
      }
      stall_others(ids);
      auto each = [&](int s) {
        for (int n : t.nodes) nodes_[n]->signal(s);
      };
      std::string pids;
      for (int n : t.nodes) pids += (pids.empty() ? "" : ", ") + std::to_string(nodes_[n]->pid());
      if (f.kind == "kill_node" || f.kind == "kill_site") {
        t.r.kind = f.kind == "kill_site" ? "site" : "node";
        t.r.bound_s = c_.node_bound_s;
        each(SIGKILL);
        for (int n : t.nodes) nodes_[n]->wait(10);
        t.r.at_s = now();
        t.restart_at_s = t.r.at_s + c_.node_restart_after_s;
        t.r.evidence = "SIGKILL pid " + pids;
        result_.kills += static_cast<int>(t.nodes.size());
      } else if (f.kind == "freeze_node") {
        t.r.kind = "freeze";
        t.r.bound_s = c_.freeze_bound_s;
        each(SIGSTOP);
        t.r.at_s = now();
        t.restart_at_s = t.r.at_s + c_.freeze_s;
        t.r.evidence = "SIGSTOP pid " + pids + " for " + fmt(c_.freeze_s, 1) + " s";
      } else {
        t.r.kind = "slow";
        t.r.bound_s = c_.freeze_bound_s;
        t.r.at_s = now();
        t.restart_at_s = t.r.at_s + c_.slow_s;
        t.toggle_at_s = t.r.at_s;
        t.r.evidence = "SIGSTOP/SIGCONT, stopped " + fmt(100 * c_.slow_duty, 0) + " % of every 0.5 s, for " +
                       fmt(c_.slow_s, 1) + " s";
      }
    } else if (f.kind == "kill_shard") {
      return kill_shard(f, t);
    } else if (f.kind == "kill_coordinator") {
      t.r.kind = "coordinator";
      t.r.bound_s = c_.coordinator_bound_s;
      poll_status();
      if (result_.mode == "ddp") {
        stall_others({});
      }
      coordinator_->signal(SIGKILL);
      coordinator_->wait(10);
      t.r.at_s = now();
      result_.kills += 1;
      auto latest = read_store_after_kill(dir_ / "run" / "store", snapshots_, digests_);
      if (!latest) {
        result_.error = "cannot open the store after the coordinator kill: " + latest.error().reason;
        return false;
      }
      const uint64_t before = *latest;
      t.r.detail["store_latest_at_kill"] = before;
      sleep_s(std::max(0.0, t.r.at_s + c_.coordinator_restart_after_s - now()));
      const double restarted_at = now();
      start_coordinator();
      const double listening = await_listening(60);
      if (listening < 0) {
        result_.error = "the restarted coordinator did not listen:\n" + coordinator_->err();
        return false;
      }
      t.r.from_s = listening;
      t.r.detail["process_start_to_listening_s"] = listening - restarted_at;
      t.r.detail["down_s"] = listening - t.r.at_s;
      result_.coordinator_down_s += listening - t.r.at_s;
      const int64_t resumed = resumed_version(*coordinator_);
      t.r.detail["resumed_from_version"] = resumed;
      resumed_ok_ = resumed_ok_ && resumed == static_cast<int64_t>(before);
      resumed_evidence_ += (resumed_evidence_.empty() ? "" : "; ") + std::string("store latest ") + std::to_string(before) +
                           " -> resumed from " + std::to_string(resumed);
      release_stall(30);
      await_next_commit(*admin_, port_, *coordinator_, before, listening, t.r);
      t.r.evidence = "SIGKILL; restart listening " + fmt(listening - t.r.at_s) + " s after the kill; resumed from " +
                     std::to_string(resumed) + " (store latest " + std::to_string(before) + ")";
      result_.recoveries.push_back(t.r);
      write_progress();
      return true;
    }
    pending_ = t;
    return true;
  }

  // The store as a killed process left it: its latest committed version (0: none). Every version's
  // digests are compared with what earlier kills of that process read, and kept for the next one.
  static Expected<uint64_t> read_store_after_kill(const fs::path& store_dir,
                                                  std::map<uint64_t, std::vector<std::string>>& snapshots,
                                                  DigestComparisons& digests) {
    auto store = storage::CheckpointStore::open(store_dir.string());
    if (!store) return store.error();
    auto latest = (*store)->latest_committed_version();
    auto hashes = stored_hashes(**store);
    store->reset();
    if (hashes) {
      compare_snapshots(*hashes, snapshots, digests);
      for (const auto& [v, e] : *hashes) snapshots[v] = e;
    }
    return latest ? *latest : uint64_t{0};
  }

  // The version a restarted coordinator or shard says it resumed from (-1: it did not say).
  static int64_t resumed_version(const Child& process) {
    const std::string err = process.err();
    const std::string needle = "resuming from committed version ";
    auto at = err.find(needle);
    return at == std::string::npos ? -1 : std::atoll(err.c_str() + at + needle.size());
  }

  // A restarted process's next committed version after `before`, polled at 50 ms through `admin`:
  // sets r.recovered_s and r.detail["next_version"] when seen (for at most max(30 s, 5 bounds)).
  void await_next_commit(AdminClient& admin, int port, Child& process, uint64_t before, double listening, Recovery& r) {
    const double deadline = listening + std::max(30.0, 5 * c_.coordinator_bound_s);
    while (now() < deadline) {
      auto status = admin.call(port, messages::AdminVerb::status, {}, 2);
      if (status && (*status).value("committed_version", uint64_t{0}) > before) {
        r.recovered_s = now();
        r.detail["next_version"] = (*status)["committed_version"];
        return;
      }
      if (!process.running()) return;
      sleep_s(0.05);
    }
  }

  // SIGKILL of syncer shard k >= 1: its store is read as the kill left it, it restarts on its run
  // directory after coordinator_restart_after_s, must resume from that latest version and commit a
  // new one within coordinator_bound_s of listening, and shard 0 must have committed meanwhile (the
  // other shards' fragments never wait for a dead one). Recorded as a recovery of kind "shard".
  bool kill_shard(const Fault& f, Tracking& t) {
    const int k = std::atoi(f.target.c_str() + 6);  // "shard-K"
    if (f.target.rfind("shard-", 0) != 0 || k < 1 || k >= c_.shards) return skip(f, "no such shard");
    if (!shards_[k] || !shards_[k]->running()) return skip(f, "not running");
    t.r.kind = "shard";
    t.r.bound_s = c_.coordinator_bound_s;
    read_progress();
    const int64_t others_at_kill = last_version_;
    shards_[k]->signal(SIGKILL);
    shards_[k]->wait(10);
    t.r.at_s = now();
    result_.kills += 1;
    auto latest = read_store_after_kill(dir_ / ("run-shard-" + std::to_string(k)) / "store", shard_snapshots_[k],
                                        shard_digests_[k]);
    if (!latest) {
      result_.error = "cannot open shard " + std::to_string(k) + "'s store after its kill: " + latest.error().reason;
      return false;
    }
    const uint64_t before = *latest;
    t.r.detail["store_latest_at_kill"] = before;
    sleep_s(std::max(0.0, t.r.at_s + c_.coordinator_restart_after_s - now()));
    const double restarted_at = now();
    start_shard(k);
    const double listening = await_shard_listening(k, 60);
    if (listening < 0) {
      result_.error = "restarted syncer shard " + std::to_string(k) + " did not listen:\n" + shards_[k]->err();
      return false;
    }
    t.r.from_s = listening;
    t.r.detail["process_start_to_listening_s"] = listening - restarted_at;
    t.r.detail["down_s"] = listening - t.r.at_s;
    const int64_t resumed = resumed_version(*shards_[k]);
    t.r.detail["resumed_from_version"] = resumed;
    shard_resumed_ok_ = shard_resumed_ok_ && resumed == static_cast<int64_t>(before);
    shard_resumed_evidence_ += (shard_resumed_evidence_.empty() ? "" : "; ") + f.target + ": store latest " +
                               std::to_string(before) + " -> resumed from " + std::to_string(resumed);
    // Shard 0 went on while shard k was down.
    read_progress();
    const int64_t others_now = last_version_;
    t.r.detail["shard_0_versions_while_down"] = others_now - others_at_kill;
    others_kept_committing_ += others_now > others_at_kill ? 1 : 0;
    others_evidence_ += (others_evidence_.empty() ? "" : "; ") + f.target + " down " + fmt(listening - t.r.at_s) +
                        " s: shard 0 " + std::to_string(others_at_kill) + " -> " + std::to_string(others_now);
    AdminClient shard_admin(host_, admin_token_.string());  // the drill's own session is to shard 0
    await_next_commit(shard_admin, shard_ports_[k], *shards_[k], before, listening, t.r);
    t.r.evidence = "SIGKILL; restart listening " + fmt(listening - t.r.at_s) + " s after the kill; resumed from " +
                   std::to_string(resumed) + " (store latest " + std::to_string(before) + ")";
    result_.recoveries.push_back(t.r);
    write_progress();
    return true;
  }

  bool skip(const Fault& f, const std::string& why) {
    skipped_.push_back({{"at_s", now()}, {"fault", f.kind}, {"target", f.target}, {"why", why}});
    return true;
  }

  static std::string fmt(double v, int digits = 2) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
    return buffer;
  }

  // Advances the fault in progress; true when it is over (recovered or out of time).
  bool advance(Tracking& t) {
    auto each = [&](int signal) {
      for (int n : t.nodes) nodes_[n]->signal(signal);
    };
    if ((t.r.kind == "node" || t.r.kind == "site") && t.restart_at_s >= 0 && now() >= t.restart_at_s) {
      for (int n : t.nodes) start_node(n);
      t.r.from_s = now();
      t.restart_at_s = -1;
    }
    if (t.r.kind == "freeze" && t.restart_at_s >= 0 && now() >= t.restart_at_s) {
      each(SIGCONT);
      t.r.from_s = now();
      t.restart_at_s = -1;
    }
    if (t.r.kind == "slow" && t.restart_at_s >= 0) {
      if (now() >= t.restart_at_s) {
        each(SIGCONT);
        t.r.from_s = now();
        t.restart_at_s = -1;
      } else if (now() >= t.toggle_at_s) {
        t.stopped = !t.stopped;
        each(t.stopped ? SIGSTOP : SIGCONT);
        t.toggle_at_s = now() + 0.5 * (t.stopped ? c_.slow_duty : 1 - c_.slow_duty);
      }
      return false;
    }
    if (t.r.kind == "slow_learner" && t.restart_at_s >= 0 && now() >= t.restart_at_s) {
      std::string answers;
      throttle(t.throttled, 1, answers);  // one restarted meanwhile is at full speed already
      t.r.from_s = now();
      t.restart_at_s = -1;
    }
    if (t.r.kind == "cut" && t.restart_at_s >= 0 && now() >= t.restart_at_s) {
      if (auto st = net_->restore(t.site); !st) {
        t.r.evidence += "; restore failed: " + st.error().reason;
        return true;  // never recovered
      }
      t.r.from_s = now();
      t.restart_at_s = -1;
    }
    if (t.restart_at_s >= 0) return false;
    if (t.r.kind == "corrupt" && t.malformed_at >= 0) {
      // First the syncer's refusal of the corrupted update; then the victim's next merged contribution.
      const int64_t n = refused("malformed");
      if (n > t.malformed_at) {
        t.r.detail["malformed_after"] = n;
        t.r.detail["refused_after_s"] = now() - t.r.at_s;
        t.malformed_at = -1;
        poll_learners();
        for (auto& [id, merged] : t.merged_at) merged = learner(id).value("contributions_merged", merged);
      }
      return now() > t.r.from_s + std::max(60.0, 3 * t.r.bound_s);
    }
    poll_learners();
    // Phase 1: the victim's new incarnation (learner: its supervisor's restart; node: a rejoin after
    // the restart); freeze/slow: the same process goes on. Phase 2: its next merged contribution.
    for (const auto& [id, merged] : t.merged_at) {
      if (t.done.count(id)) continue;
      auto row = learner(id);
      if (row.empty()) continue;
      const bool alive = row.value("state", "") == "alive";
      if (!t.restarted.count(id)) {
        bool back = alive;
        if (t.r.kind == "learner") back = back && row.value("restarts", 0) > t.restarts_at[id];
        if (t.r.kind == "node" || t.r.kind == "site") back = back && row.value("joins", 0) > t.joins_at[id];
        if (back) {
          t.restarted.insert(id);
          t.merged_at[id] = row.value("contributions_merged", int64_t{0});
        }
        continue;
      }
      if (row.value("contributions_merged", int64_t{0}) > t.merged_at[id]) t.done.insert(id);
    }
    if (!t.r.detail.contains("down_s") && t.restarted.size() == t.merged_at.size() &&
        (t.r.kind == "learner" || t.r.kind == "node" || t.r.kind == "site")) {
      t.r.detail["down_s"] = now() - t.r.at_s;  // the fault -> every victim alive again (the rejoin seen)
      t.rejoined_s = now();
    }
    if (t.done.size() == t.merged_at.size()) {
      t.r.recovered_s = now();
      // A node's learners: their rejoin seen -> each merged again (the target: one fragment round).
      if (t.rejoined_s >= 0 && (t.r.kind == "node" || t.r.kind == "site")) {
        t.r.detail["rejoin_to_merged_s"] = t.r.recovered_s - t.rejoined_s;
      }
      return true;
    }
    return now() > t.r.from_s + std::max(60.0, 3 * t.r.bound_s);
  }

  bool drive() {
    start_coordinator();
    if (await_listening(120) < 0) {
      result_.error = "the coordinator did not start listening:\n" + coordinator_->err();
      return false;
    }
    for (int k = 1; k < c_.shards; ++k) {
      start_shard(k);
      if (await_shard_listening(k, 120) < 0) {
        result_.error = "syncer shard " + std::to_string(k) + " did not start listening:\n" + shards_[k]->err();
        return false;
      }
    }
    nodes_.resize(c_.nodes);
    node_incarnations_.assign(c_.nodes, 0);
    for (int i = 0; i < c_.nodes; ++i) start_node(i);
    // Every learner joined and merged once: the drill's clock for faults starts at that commit.
    const int total = c_.nodes * c_.learners_per_node;
    const double deadline = now() + 180;
    while (true) {
      read_progress();
      poll_learners();
      int contributing = 0;
      for (const auto& [id, row] : learners_) contributing += row.value("contributions_merged", 0) > 0;
      if (contributing == total) break;
      if (now() > deadline || !coordinator_->running()) {
        result_.error = "the cluster did not come up (" + std::to_string(contributing) + " of " +
                        std::to_string(total) + " learners merged):\n" + coordinator_->err();
        return false;
      }
      sleep_s(0.2);
    }
    origin_s_ = now();
    size_t next = 0;
    double next_learners = 0, next_status = 0;
    while (true) {
      const double t = now() - origin_s_;
      read_progress();
      if (!coordinator_->running()) {
        result_.error = "the coordinator exited unexpectedly:\n" + coordinator_->err();
        return false;
      }
      for (int k = 1; k < c_.shards; ++k) {
        if (!shards_[k]->running() && !(pending_ && pending_->r.kind == "shard")) {
          result_.error = "syncer shard " + std::to_string(k) + " exited unexpectedly:\n" + shards_[k]->err();
          return false;
        }
      }
      if (now() >= next_status) {
        poll_status();
        next_status = now() + 0.5;
      }
      if (pending_) {
        if (advance(*pending_)) {
          release_stall();
          result_.recoveries.push_back(pending_->r);
          pending_.reset();
          write_progress();
        }
      } else if (next < schedule_.size() && t >= schedule_[next].at_s && !(kill_limit_ && result_.kills >= *kill_limit_)) {
        Fault f = schedule_[next++];
        if (!apply(f)) return false;
      } else if (now() >= next_learners) {
        poll_learners();
        next_learners = now() + 1.0;
      }
      const bool out_of_time = t >= duration_s_;
      const bool kills_done = kill_limit_ && result_.kills >= *kill_limit_;
      if ((out_of_time || kills_done) && !pending_) break;
      // Out of time with a fault in progress: the run goes on at most until that fault's bound, so the
      // loss comparison stays between runs of about the same length; past it, the recovery failed.
      if ((out_of_time || kills_done) && pending_ && pending_->restart_at_s < 0 &&
          now() > pending_->r.from_s + pending_->r.bound_s) {
        pending_->r.evidence += "; not back within its bound when the run ended";
        result_.recoveries.push_back(pending_->r);
        pending_.reset();
        break;
      }
      if (t >= duration_s_ + 120) {  // a fault that would not end: stop anyway, its recovery failed
        if (pending_) result_.recoveries.push_back(pending_->r);
        pending_.reset();
        break;
      }
      sleep_s(pending_ ? 0.1 : 0.05);
    }
    for (auto& n : nodes_) {
      if (n) n->signal(SIGCONT);
    }
    for (int s = 0; net_ && s < c_.sites; ++s) (void)net_->restore(s);  // a cut the run outlasted
    for (int i = 0; i < c_.nodes; ++i) {
      if (!nodes_[i]->running()) start_node(i);  // never happens unless a restart failed
    }
    return true;
  }

  // What a long run has done so far (a soak stopped early still leaves its count behind).
  void write_progress() {
    std::map<std::string, std::pair<int, int>> counts;  // kind -> (faults, recovered)
    for (const auto& r : result_.recoveries) {
      counts[r.kind].first += 1;
      counts[r.kind].second += r.recovered() ? 1 : 0;
    }
    json recovered = json::object();
    for (const auto& [kind, n] : counts) recovered[kind] = {{"n", n.first}, {"recovered", n.second}};
    std::ofstream(dir_ / "progress.json") << json{{"t_s", now() - origin_s_}, {"kills", result_.kills},
                                                  {"faults", result_.recoveries.size()}, {"by_kind", recovered},
                                                  {"version", last_version_}}.dump() << "\n";
  }

  void stop_all() {
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

  void finish() {
    poll_status();
    result_.wall_s = now() - origin_s_;
    admin_.reset();
    coordinator_->signal(SIGTERM);
    for (int k = 1; k < c_.shards; ++k) shards_[k]->signal(SIGTERM);
    const int code = coordinator_->wait(120);
    for (int k = 1; k < c_.shards; ++k) {
      const int shard_code = shards_[k]->wait(120);
      shard_summaries_[k] = shards_[k]->summary();
      if (shard_code != 0 || !shard_summaries_[k].is_object()) {
        result_.error = "syncer shard " + std::to_string(k) + " did not stop cleanly (exit " + std::to_string(shard_code) +
                        "):\n" + shards_[k]->err();
        result_.driven = false;
        return;
      }
    }
    for (auto& n : nodes_) n->wait(30);
    read_progress();
    result_.final_summary = coordinator_->summary();
    const json& s = result_.final_summary;
    if (code != 0 || !s.is_object()) {
      result_.error = "the coordinator did not stop cleanly (exit " + std::to_string(code) + "):\n" + coordinator_->err();
      result_.driven = false;
      return;
    }
    // The last coordinator's ledger goes on from the carry of the version it resumed: it covers the
    // whole run, every earlier incarnation and the time no coordinator ran (actors/accounting.hpp).
    // A sharded run's is the sum of its shards' ledgers, each its share of the slots' time.
    result_.cluster_wall_s = now() - first_coordinator_s_;
    for (int k = 0; k < c_.shards; ++k) {
      const json& summary = k == 0 ? s : shard_summaries_[k];
      if (!summary.contains("goodput_seconds") || !summary["goodput_seconds"].is_object()) continue;
      for (const auto& [part, v] : summary["goodput_seconds"].items()) {
        if (!v.is_number()) continue;
        result_.parts[part] += v.get<double>();
        result_.allocated_s += v.get<double>();
      }
    }
    result_.ledger_wall_s = result_.allocated_s / (c_.nodes * c_.learners_per_node);
    result_.goodput = result_.allocated_s > 0 ? result_.parts["merged"] / result_.allocated_s : NAN;
    if (s["heldout_loss"].is_number()) result_.final_loss = s["heldout_loss"].get<double>();
    if (s["resumed_from_version"].is_null() && s["initial_heldout_loss"].is_number()) {
      result_.initial_loss = s["initial_heldout_loss"].get<double>();
    }
    if (c_.shards > 1) score_assembled_model();
    check_store();
    check_recoveries();
    check_ledger();
  }

  // A sharded run's shards score nothing (each holds only its fragments): the model assembled from
  // every shard's latest version and the initial one (version 1 everywhere) are scored by `eval` on
  // the first 20 000 bytes of the corpus text.
  void score_assembled_model() {
    auto config = load_config(std::nullopt, "drill.sets", c_.sets);  // validated before the drill started
    if (!config) return;
    const auto& data = config->data;  // "kjv" is cached as <cache_dir>/kjv.txt (training/corpus.hpp)
    const std::string text = data.corpus == "kjv" ? (fs::path(data.cache_dir) / "kjv.txt").string() : data.corpus;
    auto score = [&](const std::string& name, bool initial) -> double {
      std::vector<std::string> a{"eval", "--json", "--text", text, "--max-bytes", "20000"};
      for (int k = 0; k < c_.shards; ++k) {
        a.push_back("--run-dir");
        a.push_back((dir_ / (k == 0 ? std::string("run") : "run-shard-" + std::to_string(k))).string());
        if (initial) {
          a.push_back("--version");
          a.push_back("1");
        }
      }
      Child eval(binary_, name, a, dir_, 0);
      if (eval.wait(300) != 0) return NAN;
      const json j = eval.summary();
      return j.is_object() && j["loss"].is_number() ? j["loss"].get<double>() : NAN;
    };
    result_.final_loss = score("eval-assembled", false);
    result_.initial_loss = score("eval-initial", true);
  }

  void add(const std::string& name, bool passed, int64_t observations, const std::string& evidence) {
    result_.checks.emplace_back(name, passed, observations, evidence);
  }

  void check_store() {
    check_store_of(dir_ / "run" / "store", result_.final_summary, snapshots_, digests_, "");
    for (size_t k = 1; k < shards_.size(); ++k) {
      check_store_of(dir_ / ("run-shard-" + std::to_string(k)) / "store", shard_summaries_[k], shard_snapshots_[k],
                     shard_digests_[k], "shard_" + std::to_string(k) + "_");
    }
  }

  // One store's versions (shard 0's or the only coordinator's: no prefix; shard k's: "shard_k_").
  void check_store_of(const fs::path& dir, const json& summary, std::map<uint64_t, std::vector<std::string>>& snapshots,
                      DigestComparisons& digests, const std::string& prefix) {
    const uint64_t final_version = summary.value("final_version", uint64_t{0});
    auto store = storage::CheckpointStore::open(dir.string());
    if (!store) {
      add(prefix + "versions_strictly_increasing_and_verified", false, 0, "cannot open the store: " + store.error().reason);
      return;
    }
    auto list = (*store)->list();
    if (!list) {
      add(prefix + "versions_strictly_increasing_and_verified", false, 0, "list: " + list.error().reason);
      return;
    }
    // 1. Versions strictly increasing, each one read back and verified (every blob re-hashed).
    bool increasing = true;
    int verified = 0;
    std::string failures;
    uint64_t previous = 0;
    for (const auto& info : *list) {
      if (info.version <= previous) increasing = false;
      previous = info.version;
      auto v = (*store)->get(info.version);
      if (v) {
        verified += 1;
      } else if (failures.size() < 200) {
        failures += " v" + std::to_string(info.version) + ": " + v.error().reason;
      }
    }
    const bool complete = !list->empty() && list->back().version == final_version;
    add(prefix + "versions_strictly_increasing_and_verified",
        increasing && verified == static_cast<int>(list->size()) && complete, static_cast<int64_t>(list->size()),
        std::to_string(list->size()) + " versions " + (list->empty() ? "" : std::to_string(list->front().version) + ".." +
        std::to_string(list->back().version)) + ", strictly increasing: " + (increasing ? "yes" : "no") + ", " +
            std::to_string(verified) + " read back with every blob verified; newest = the final summary's final_version " +
            std::to_string(final_version) + ": " + (complete ? "yes" : "no") + failures);
    // 2. Digests of the versions seen at each kill of this store's process never changed.
    auto after = stored_hashes(**store);
    if (after && (!snapshots.empty() || digests.compared() > 0)) {
      compare_snapshots(*after, snapshots, digests);
      const auto& d = digests;
      add(prefix + "digests_never_change", d.changed == 0 && d.lost == 0, d.same + d.changed + d.lost,
          std::to_string(d.same) + " comparisons of a version read at a coordinator kill with the store at the next "
              "kill or after the run held the same digests, " + std::to_string(d.changed) + " changed, " +
              std::to_string(d.lost) + " lost" +
              (d.dropped ? ", " + std::to_string(d.dropped) + " dropped by retention before a comparison" : std::string()));
    }
    // 3. No update applied twice: per learner and fragment, the steps of every merged contribution
    // (the manifests' contributors) add up to no more than the data positions its accepted work spans
    // (received_until in the newest version's accounting); received_until never goes back.
    std::map<std::pair<std::string, int>, int64_t> steps, until;
    bool monotone = true;
    int contributions = 0;
    for (const auto& info : *list) {
      auto m = json::parse(info.manifest_json, nullptr, false);
      if (!m.is_object()) continue;
      for (const auto& c : m.value("contributors", json::array())) {
        steps[{c.value("learner", ""), c.value("fragment", 0)}] += c.value("steps", int64_t{0});
        contributions += 1;
      }
      if (m.contains("accounting") && m["accounting"].contains("learners")) {
        for (const auto& [id, r] : m["accounting"]["learners"].items()) {
          const auto ru = r.value("received_until", std::vector<int64_t>{});
          for (size_t p = 0; p < ru.size(); ++p) {
            auto& u = until[{id, static_cast<int>(p)}];
            if (ru[p] < u) monotone = false;
            u = std::max(u, ru[p]);
          }
        }
      }
    }
    int over = 0;
    std::string worst;
    for (const auto& [key, n] : steps) {
      const int64_t span = until.count(key) ? until[key] : 0;
      if (n > span) {
        over += 1;
        if (worst.empty()) worst = "; " + key.first + " fragment " + std::to_string(key.second) + ": " + std::to_string(n) +
                                   " steps merged > " + std::to_string(span);
      }
    }
    const json by_reason = summary.value("rejected_by_reason", json::object());
    const int64_t duplicates = by_reason.is_object() && by_reason.contains("duplicate") && by_reason["duplicate"].is_number()
                                   ? by_reason["duplicate"].get<int64_t>()
                                   : 0;
    add(prefix + "no_update_applied_twice", over == 0 && monotone && !until.empty(), contributions,
        std::to_string(contributions) + " merged contributions over " + std::to_string(steps.size()) +
            " learner-fragment pairs: merged steps <= their data span in " + std::to_string(steps.size() - over) +
            "; received_until never decreased: " + (monotone ? "yes" : "no") + "; duplicates refused by the syncer: " +
            std::to_string(duplicates) + worst);
  }

  // The goodput ledger is honest across coordinator kills: the last coordinator's ledger covers the
  // run from the first one's start (the carry), and no part is negative (merged work never outruns the
  // compute the learners measured). A sharded run's is the sum of its shards' (each its share).
  void check_ledger() {
    if (result_.allocated_s <= 0) {
      add("ledger_covers_the_run", false, 0, "the last coordinator's summary has no ledger");
      return;
    }
    std::string worst = "merged";
    for (const auto& [part, v] : result_.parts) {
      if (v < result_.parts[worst]) worst = part;
    }
    const double floor = -0.01 * result_.allocated_s;
    const double gap = result_.cluster_wall_s - result_.ledger_wall_s;
    const bool covers = gap >= -1 && gap <= kLedgerStartupS;
    add("ledger_covers_the_run", covers && result_.parts[worst] >= floor, static_cast<int64_t>(result_.parts.size()),
        "allocated " + fmt(result_.allocated_s, 1) + " s = " + fmt(result_.ledger_wall_s, 1) + " s per slot; the cluster ran " +
            fmt(result_.cluster_wall_s, 1) + " s from the first coordinator's start (difference " + fmt(gap, 1) +
            " s, at most " + fmt(kLedgerStartupS, 0) + " s: the first start's model build and the last one's final "
            "evaluation); " + std::to_string(result_.kills) + " kills; smallest part " + worst + " " +
            fmt(result_.parts[worst], 2) + " s (floor " + fmt(floor, 2) + " s)");
  }

  // Every version read at an earlier kill against the store now: the same digests, or dropped by
  // retention (older than the oldest kept), never changed or lost. A dropped one is compared no more.
  static void compare_snapshots(const Hashes& now_stored, std::map<uint64_t, std::vector<std::string>>& snapshots,
                                DigestComparisons& digests) {
    const uint64_t oldest = now_stored.empty() ? 0 : now_stored.begin()->first;
    for (auto it = snapshots.begin(); it != snapshots.end();) {
      auto found = now_stored.find(it->first);
      if (found == now_stored.end()) {
        (it->first < oldest ? digests.dropped : digests.lost) += 1;
        it = snapshots.erase(it);
        continue;
      }
      (found->second == it->second ? digests.same : digests.changed) += 1;
      ++it;
    }
  }

  void check_recoveries() {
    int coordinator_kills = 0, learners_ok = 0, learners_total = 0, coord_ok = 0, corrupt = 0, refused = 0;
    int shard_kills = 0, shard_ok = 0;
    std::string late, coordinator_late, corrupt_evidence, shard_late;
    for (const auto& r : result_.recoveries) {
      if (r.kind == "corrupt") {
        corrupt += 1;
        const bool seen = r.detail.contains("malformed_after");
        refused += seen;
        corrupt_evidence += " " + r.target + " at " + fmt(r.at_s - origin_s_, 1) + " s: " +
                            (seen ? "malformed " + r.detail["malformed_before"].dump() + " -> " +
                                        r.detail["malformed_after"].dump() + " after " +
                                        fmt(r.detail["refused_after_s"].get<double>()) + " s"
                                  : "no refusal seen");
      }
      if (r.kind == "shard") {
        shard_kills += 1;
        if (r.recovered() && r.recovery_s() < r.bound_s) shard_ok += 1;
        else shard_late += " " + r.target + " at " + fmt(r.at_s - origin_s_, 1) + " s: " + (r.recovered() ? fmt(r.recovery_s()) + " s" : "never");
        continue;
      }
      if (r.kind == "coordinator") {
        coordinator_kills += 1;
        if (r.recovered() && r.recovery_s() < r.bound_s) coord_ok += 1;
        else coordinator_late += " coordinator at " + fmt(r.at_s - origin_s_, 1) + " s: " + (r.recovered() ? fmt(r.recovery_s()) + " s" : "never");
        continue;
      }
      learners_total += 1;
      if (r.recovered() && r.recovery_s() <= r.bound_s) learners_ok += 1;
      else late += " " + r.kind + " " + r.target + " at " + fmt(r.at_s - origin_s_, 1) + " s: " +
                   (r.recovered() ? fmt(r.recovery_s()) + " s > " + fmt(r.bound_s, 0) + " s" : "never");
    }
    if (learners_total > 0) {
      add("killed_learners_back_within_bound", learners_ok == learners_total, learners_total,
          std::to_string(learners_ok) + " of " + std::to_string(learners_total) +
              " faults on learners (kill, node SIGKILL, site loss, freeze, slowdown, link cut, corrupted update): every "
              "victim restarted (or resumed) and merged a contribution again within its bound" + late);
    }
    if (corrupt > 0) {
      add("corrupted_updates_refused", refused == corrupt, corrupt,
          std::to_string(refused) + " of " + std::to_string(corrupt) +
              " updates sent with a flipped payload bit were refused by the syncer (reason malformed: the chunk's "
              "checksum);" + corrupt_evidence);
    }
    if (shard_kills > 0) {
      add("shard_resumed_from_last_committed", shard_resumed_ok_, shard_kills, shard_resumed_evidence_);
      add("shard_next_commit_within_bound", shard_ok == shard_kills, shard_kills,
          std::to_string(shard_ok) + " of " + std::to_string(shard_kills) + " restarted shards committed a new version < " +
              fmt(c_.coordinator_bound_s, 1) + " s after listening" + shard_late);
      add("other_shards_committed_while_one_was_down", others_kept_committing_ == shard_kills, shard_kills,
          std::to_string(others_kept_committing_) + " of " + std::to_string(shard_kills) +
              " shard outages saw shard 0 commit new versions meanwhile: " + others_evidence_);
    }
    if (coordinator_kills > 0) {
      add("coordinator_resumed_from_last_committed", resumed_ok_, coordinator_kills, resumed_evidence_);
      add("coordinator_next_commit_within_bound", coord_ok == coordinator_kills, coordinator_kills,
          std::to_string(coord_ok) + " of " + std::to_string(coordinator_kills) + " restarts committed a new version < " +
              fmt(c_.coordinator_bound_s, 1) + " s after listening" + coordinator_late);
    }
  }

 public:
  // The start of the loss comparison: θ0's loss from this run's first summary, else (its first
  // coordinator was killed) `theta0_loss` scored by another run of the same seed, else the first
  // version this run scored.
  void check_loss(double theta0_loss) {
    if (!result_.driven || !result_.final_summary.is_object()) return;
    std::string source = "θ0 scored by this run's coordinator";
    if (c_.shards > 1) {
      source = "`eval` of version 1 of every shard (θ0), against the model assembled from every shard's latest, on "
               "the corpus's first 20 000 bytes";
    } else if (!result_.final_summary.value("resumed_from_version", json()).is_null() || !std::isfinite(result_.initial_loss)) {
      if (std::isfinite(theta0_loss)) {
        result_.initial_loss = theta0_loss;
        source = "θ0 (same seed) scored by the fault-free run";
      } else if (!result_.loss.empty()) {
        result_.initial_loss = result_.loss.front().loss;
        source = "the first version this run scored (v" + fmt(result_.loss.front().version, 0) + ")";
      }
    }
    add("loss_below_start", std::isfinite(result_.final_loss) && result_.final_loss < result_.initial_loss,
        std::isfinite(result_.initial_loss) && std::isfinite(result_.final_loss) ? 2 : 0,
        "held-out loss " + fmt(result_.initial_loss, 4) + " (" + source + ") -> " + fmt(result_.final_loss, 4));
  }
  RunResult take() {
    result_.skipped = skipped_;
    return std::move(result_);
  }

 private:

  const DrillConfig& c_;
  std::vector<Fault> schedule_;
  fs::path dir_;
  std::string binary_;
  double duration_s_;
  std::optional<int> kill_limit_;
  Random random_;
  LineTail tail_;
  const SiteNetwork* net_;
  std::string host_;  // where the coordinator listens: loopback, or the hub's address
  fs::path token_, admin_token_;
  std::unique_ptr<AdminClient> admin_;
  int port_ = 0;
  Clock::time_point started_;
  double origin_s_ = 0;
  std::unique_ptr<Child> coordinator_;
  int coordinator_incarnation_ = 0;
  std::vector<std::unique_ptr<Child>> nodes_;
  std::vector<int> node_incarnations_;
  std::map<std::string, json> learners_;
  double first_coordinator_s_ = -1;
  int64_t last_version_ = 0;
  std::optional<Tracking> pending_;
  std::vector<std::string> stalled_;
  std::vector<json> skipped_;
  std::map<uint64_t, std::vector<std::string>> snapshots_;
  DigestComparisons digests_;
  bool resumed_ok_ = true;
  std::string resumed_evidence_;
  // A sharded drill: shard k >= 1's process, port, incarnations, final summary, and what its kills read.
  std::vector<std::unique_ptr<Child>> shards_;
  std::vector<int> shard_ports_, shard_incarnations_;
  std::vector<json> shard_summaries_;
  std::vector<std::map<uint64_t, std::vector<std::string>>> shard_snapshots_;
  std::vector<DigestComparisons> shard_digests_;
  bool shard_resumed_ok_ = true;
  std::string shard_resumed_evidence_, others_evidence_;
  int others_kept_committing_ = 0;
  RunResult result_;

 public:
  const std::vector<json>& skipped() const { return skipped_; }
  double origin_s() const { return origin_s_; }
};

// ---- statistics, plots, report ----------------------------------------------------------------------

json stats_of(std::vector<double> v) {
  if (v.empty()) return {{"n", 0}, {"median", nullptr}, {"max", nullptr}};
  std::sort(v.begin(), v.end());
  const double median = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  double sum = 0;
  for (double x : v) sum += x;
  return {{"n", v.size()}, {"median", median}, {"mean", sum / v.size()}, {"max", v.back()}, {"min", v.front()}};
}

std::string esc(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else out += ch;
  }
  return out;
}

std::string num(double v, int digits = 2) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, v);
  return buffer;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Series {
  std::string label;
  std::vector<std::pair<double, double>> points;
};
struct Marker {
  double x;
  std::string label;
  int color;
};

// A line plot (x: seconds, y: held-out loss) with vertical fault markers.
std::string line_svg(const std::string& title, const std::string& ylabel, const std::vector<Series>& series,
                     const std::vector<Marker>& markers) {
  const double W = 760, H = 380, L = 60, R = 150, T = 30, B = 45;
  double x0 = 0, x1 = 1, y0 = 1e300, y1 = -1e300;
  for (const auto& s : series) {
    for (auto [x, y] : s.points) {
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  for (const auto& m : markers) x1 = std::max(x1, m.x);
  if (y0 > y1) y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-9) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad;
  y1 += pad;
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">" << esc(title) << "</text>\n";
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R << "\" height=\"" << H - T - B
    << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (int i = 0; i <= 5; ++i) {
    const double y = y0 + (y1 - y0) * i / 5, x = x0 + (x1 - x0) * i / 5;
    o << "<text x=\"" << L - 5 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">" << num(y) << "</text>\n";
    o << "<text x=\"" << X(x) << "\" y=\"" << H - B + 15 << "\" text-anchor=\"middle\">" << num(x, 0) << "</text>\n";
  }
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\">wall time since the first commit (s)</text>\n";
  o << "<text x=\"14\" y=\"" << (T + H - B) / 2 << "\" transform=\"rotate(-90 14 " << (T + H - B) / 2
    << ")\" text-anchor=\"middle\">" << esc(ylabel) << "</text>\n";
  for (const auto& m : markers) {
    o << "<line x1=\"" << X(m.x) << "\" x2=\"" << X(m.x) << "\" y1=\"" << T << "\" y2=\"" << H - B << "\" stroke=\""
      << kColors[m.color % 9] << "\" stroke-dasharray=\"3,3\" opacity=\"0.7\"><title>" << esc(m.label) << "</title></line>\n";
  }
  for (size_t i = 0; i < series.size(); ++i) {
    o << "<polyline fill=\"none\" stroke-width=\"1.8\" stroke=\"" << kColors[i % 9] << "\" points=\"";
    for (auto [x, y] : series[i].points) o << X(x) << "," << Y(y) << " ";
    o << "\"/>\n";
    o << "<line x1=\"" << W - R + 10 << "\" x2=\"" << W - R + 30 << "\" y1=\"" << T + 10 + 16 * i << "\" y2=\"" << T + 10 + 16 * i
      << "\" stroke=\"" << kColors[i % 9] << "\" stroke-width=\"2\"/><text x=\"" << W - R + 35 << "\" y=\"" << T + 14 + 16 * i
      << "\">" << esc(series[i].label) << "</text>\n";
  }
  std::set<std::string> kinds;
  int row = static_cast<int>(series.size()) + 1;
  for (const auto& m : markers) {
    const std::string kind = m.label.substr(0, m.label.find(' '));
    if (!kinds.insert(kind).second) continue;
    o << "<line x1=\"" << W - R + 10 << "\" x2=\"" << W - R + 30 << "\" y1=\"" << T + 10 + 16 * row << "\" y2=\"" << T + 10 + 16 * row
      << "\" stroke=\"" << kColors[m.color % 9] << "\" stroke-dasharray=\"3,3\"/><text x=\"" << W - R + 35 << "\" y=\""
      << T + 14 + 16 * row << "\">" << esc(kind) << "</text>\n";
    row += 1;
  }
  o << "</svg>\n";
  return o.str();
}

// Stacked horizontal bars: each run's ledger parts as shares of its allocated time.
std::string ledger_svg(const std::vector<std::pair<std::string, std::map<std::string, double>>>& runs) {
  const std::vector<std::string> parts = {"merged", "rejected", "unmerged", "recovering", "waiting",
                                          "paused", "overhead", "restarting", "idle"};
  const double W = 760, L = 90, R = 20, T = 40, bar = 34, gap = 18;
  const double H = T + runs.size() * (bar + gap) + 70;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">goodput ledger under the same fault "
       "schedule (share of allocated slot time)</text>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& [name, seconds] = runs[i];
    double total = 0;
    for (const auto& [p, v] : seconds) total += v;
    const double y = T + i * (bar + gap);
    o << "<text x=\"" << L - 6 << "\" y=\"" << y + bar / 2 + 4 << "\" text-anchor=\"end\">" << esc(name) << "</text>\n";
    double x = L;
    for (size_t p = 0; p < parts.size(); ++p) {
      auto it = seconds.find(parts[p]);
      const double share = total > 0 && it != seconds.end() ? std::max(0.0, it->second) / total : 0;
      const double w = share * (W - L - R);
      if (w <= 0) continue;
      o << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << bar << "\" fill=\"" << kColors[p % 10]
        << "\"><title>" << parts[p] << " " << num(100 * share, 1) << " %</title></rect>\n";
      if (w > 34) {
        o << "<text x=\"" << x + w / 2 << "\" y=\"" << y + bar / 2 + 4 << "\" text-anchor=\"middle\" fill=\"white\">"
          << num(100 * share, 1) << "%</text>\n";
      }
      x += w;
    }
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    const double x = L + (p % 5) * 130, y = H - 50 + (p / 5) * 18;  // two rows of five
    o << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"12\" height=\"12\" fill=\"" << kColors[p % 10] << "\"/><text x=\""
      << x + 16 << "\" y=\"" << y + 10 << "\">" << parts[p] << (p == 0 ? " (goodput)" : "") << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

// Recovery times per kind: one dot per fault, the median as a bar.
std::string recovery_svg(const std::map<std::string, std::vector<double>>& kinds, const std::map<std::string, double>& bounds) {
  const double W = 760, L = 100, R = 30, T = 40, row = 44;
  const double H = T + std::max<size_t>(1, kinds.size()) * row + 45;
  double x1 = 0.5;
  for (const auto& [k, v] : kinds) {
    for (double x : v) x1 = std::max(x1, x);
    if (bounds.count(k)) x1 = std::max(x1, bounds.at(k));
  }
  x1 *= 1.08;
  auto X = [&](double x) { return L + x / x1 * (W - L - R); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">recovery times (DiLoCo run; dashed: "
       "bound, bar: median)</text>\n";
  int i = 0;
  for (const auto& [k, v] : kinds) {
    const double y = T + i * row + row / 2;
    o << "<text x=\"" << L - 8 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << esc(k) << " (" << v.size() << ")</text>\n";
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << y << "\" y2=\"" << y << "\" stroke=\"#ddd\"/>\n";
    Random jitter(i + 7);
    for (double x : v) {
      o << "<circle cx=\"" << X(x) << "\" cy=\"" << y + (jitter.unit() - 0.5) * 16 << "\" r=\"3.5\" fill=\"" << kColors[i % 9]
        << "\" opacity=\"0.75\"><title>" << num(x) << " s</title></circle>\n";
    }
    auto st = stats_of(v);
    if (st["median"].is_number()) {
      const double m = st["median"].get<double>();
      o << "<line x1=\"" << X(m) << "\" x2=\"" << X(m) << "\" y1=\"" << y - 14 << "\" y2=\"" << y + 14 << "\" stroke=\"black\" stroke-width=\"2\"/>\n";
    }
    if (bounds.count(k)) {
      o << "<line x1=\"" << X(bounds.at(k)) << "\" x2=\"" << X(bounds.at(k)) << "\" y1=\"" << y - 18 << "\" y2=\"" << y + 18
        << "\" stroke=\"#d62728\" stroke-dasharray=\"4,3\"/>\n";
    }
    i += 1;
  }
  const double yb = T + std::max<size_t>(1, kinds.size()) * row;
  o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << yb << "\" y2=\"" << yb << "\" stroke=\"#444\"/>\n";
  for (int k = 0; k <= 6; ++k) {
    const double x = x1 * k / 6;
    o << "<text x=\"" << X(x) << "\" y=\"" << yb + 15 << "\" text-anchor=\"middle\">" << num(x, 1) << "</text>\n";
  }
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\">seconds</text>\n</svg>\n";
  return o.str();
}

std::map<std::string, double> bounds_of(const DrillConfig& c) {
  return {{"learner", c.learner_bound_s}, {"node", c.node_bound_s}, {"site", c.node_bound_s}, {"coordinator", c.coordinator_bound_s},
          {"freeze", c.freeze_bound_s}, {"slow", c.freeze_bound_s}, {"slow_learner", c.freeze_bound_s},
          {"corrupt", c.learner_bound_s}, {"cut", c.node_bound_s}, {"shard", c.coordinator_bound_s}};
}

}  // namespace

int run_drill(const DrillArguments& arguments) {
  auto fail = [](int code, const std::string& message) {
    std::fprintf(stderr, "archipelago drill: %s\n", message.c_str());
    return code;
  };
  auto loaded = load_drill(arguments.config_file);
  if (!loaded) return fail(2, loaded.error().reason);
  const DrillConfig c = *loaded;
  if (arguments.duration_s && *arguments.duration_s < 1) return fail(2, "--duration must be at least 1 s");
  if (arguments.kills && *arguments.kills < 1) return fail(2, "--kills must be at least 1");
  const bool soak = arguments.kills.has_value();
  const double duration_s = arguments.duration_s.value_or(soak ? 1e9 : c.duration_s);
  const std::vector<Fault> schedule = make_schedule(c, arguments.seed, soak && !arguments.duration_s ? 86400.0 * 7 : duration_s);
  if (soak && schedule.empty()) return fail(2, "--kills needs faults: give the drill [mtbf_s] rates");
  const fs::path report = arguments.report_dir.empty()
                              ? fs::path("archipelago-runs") / ("drill-" + c.name + "-" + std::to_string(arguments.seed))
                              : fs::path(arguments.report_dir);
  std::error_code ec;
  fs::create_directories(report, ec);
  if (ec) return fail(1, "cannot create " + report.string() + ": " + ec.message());

  const std::string binary = self_binary();
  // The run's configuration as the coordinator will load it (its errors now, not in a child).
  auto effective = load_config(std::nullopt, "drill.sets", c.sets);
  if (!effective) return fail(2, "drill.sets: " + effective.error().reason);
  std::unique_ptr<SiteNetwork> net;
  if (c.netns) {
    auto made = SiteNetwork::create(c.sites);
    if (!made) return fail(1, "this drill runs its sites in network namespaces (netns = true): " + made.error().reason);
    net = std::move(*made);
    if (auto st = net->enter_hub(); !st) return fail(1, st.error().reason);
  }

  std::vector<std::string> modes;
  if (!soak && c.reference) modes.push_back("fault_free");
  modes.push_back("diloco");
  if (!soak && c.baseline) modes.push_back("ddp");
  std::map<std::string, RunResult> runs;
  std::map<std::string, double> origins;
  for (const auto& mode : modes) {
    std::fprintf(stderr, "archipelago drill %s seed %llu: %s run (%zu faults scheduled over %.0f s)\n", c.name.c_str(),
                 static_cast<unsigned long long>(arguments.seed), mode.c_str(), mode == "fault_free" ? size_t{0} : schedule.size(),
                 duration_s);
    Runner runner(c, mode, mode == "fault_free" ? std::vector<Fault>{} : schedule, report / mode, binary, duration_s,
                  mode == "diloco" ? arguments.kills : std::nullopt, arguments.seed, net.get());
    runner.run();
    const double theta0 = runs.count("fault_free") ? runs["fault_free"].initial_loss : NAN;
    runner.check_loss(theta0);
    RunResult r = runner.take();
    origins[mode] = runner.origin_s();
    if (!r.driven) return fail(1, mode + " run: " + r.error);
    std::fprintf(stderr, "  %s: goodput %.3f, held-out loss %.4f -> %.4f, %d kills, %zu recoveries, %zu skipped\n", mode.c_str(),
                 r.goodput, r.initial_loss, r.final_loss, r.kills, r.recoveries.size(), runner.skipped().size());
    runs[mode] = std::move(r);
  }

  RunResult& diloco = runs["diloco"];
  if (runs.count("fault_free")) {
    const double reference = runs["fault_free"].final_loss;
    diloco.checks.emplace_back("loss_within_margin_of_fault_free",
                             std::isfinite(diloco.final_loss) && diloco.final_loss <= reference * (1 + c.loss_margin),
                             std::isfinite(diloco.final_loss) && std::isfinite(reference) ? 2 : 0,
                             "final held-out loss " + num(diloco.final_loss, 4) + " vs fault-free " + num(reference, 4) +
                                 " (margin " + num(100 * c.loss_margin, 0) + " %: at most " +
                                 num(reference * (1 + c.loss_margin), 4) + ")");
  }
  {
    // A fault that was scheduled and not carried out leaves the drill with less evidence than it claims.
    std::string evidence, faulted;
    size_t skipped = 0, due = 0;  // due: carried out (each leaves a recovery record) or skipped
    for (const auto& [mode, r] : runs) {
      if (mode == "fault_free") continue;
      faulted += (faulted.empty() ? "" : " and ") + mode;
      due += r.recoveries.size() + r.skipped.size();
      for (const auto& s : r.skipped) {
        ++skipped;
        evidence += (evidence.empty() ? "" : "; ") + mode + ": " + s["fault"].get<std::string>() + " " +
                    s["target"].get<std::string>() + " at " + num(s["at_s"].get<double>(), 1) + " s (" +
                    s["why"].get<std::string>() + ")";
      }
    }
    diloco.checks.emplace_back("no_scheduled_fault_skipped", skipped == 0 || c.allow_skipped, static_cast<int64_t>(due),
                             skipped == 0 ? "all " + std::to_string(due) + " faults due in the " + faulted + " runs carried out"
                                          : std::to_string(skipped) + " of " + std::to_string(due) + " faults due skipped" +
                                                (c.allow_skipped ? " (allowed: drill.allow_skipped)" : "") + ": " + evidence);
  }
  int passed = 0;
  for (const auto& check : diloco.checks) passed += check.passed;
  const int total = static_cast<int>(diloco.checks.size());

  std::map<std::string, std::vector<double>> recovery;
  for (const auto& r : diloco.recoveries) {
    if (r.recovered()) recovery[r.kind].push_back(r.recovery_s());
  }
  json recovery_json = json::object();
  for (const char* kind : {"learner", "node", "coordinator"}) {
    recovery_json[kind] = stats_of(recovery.count(kind) ? recovery.at(kind) : std::vector<double>{});
  }
  for (const auto& [kind, v] : recovery) recovery_json[kind] = stats_of(v);
  json goodput = json::object();
  for (const auto& [mode, r] : runs) goodput[mode] = std::isfinite(r.goodput) ? json(r.goodput) : json(nullptr);
  if (!goodput.contains("ddp")) goodput["ddp"] = nullptr;
  json invariants = json::array();
  for (const auto& check : diloco.checks) {
    invariants.push_back({{"name", check.name}, {"passed", check.passed}, {"observations", check.observations},
                          {"evidence", check.evidence}});
  }
  int freezes = 0;
  for (const auto& r : diloco.recoveries) freezes += r.kind == "freeze" || r.kind == "slow";
  json line = {{"drill", c.name}, {"seed", arguments.seed}, {"goodput", goodput}, {"invariants_passed", passed},
               {"invariants_total", total}, {"kills", diloco.kills}, {"freezes_and_slowdowns", freezes},
               {"recovery_s", recovery_json}, {"invariants", invariants},
               {"heldout_loss", {{"initial", diloco.initial_loss}, {"diloco", diloco.final_loss}}},
               {"wall_s", diloco.wall_s}, {"coordinator_down_s", diloco.coordinator_down_s},
               {"report", (report / "report.md").string()}};
  line["skipped_faults"] = json::object();
  for (const auto& [mode, r] : runs) line["skipped_faults"][mode] = r.skipped;
  for (const auto& [mode, r] : runs) {
    if (mode != "diloco" && std::isfinite(r.final_loss)) line["heldout_loss"][mode] = r.final_loss;
  }
  // A coordinator restart in two parts: process start -> listening (LibTorch, store, scoring the
  // resumed version), listening -> next commit (the nodes' rejoin and a round: recovery_s).
  std::vector<double> start_to_listening;
  for (const auto& r : diloco.recoveries) {
    if (r.kind == "coordinator" && r.detail.contains("process_start_to_listening_s")) {
      start_to_listening.push_back(r.detail["process_start_to_listening_s"].get<double>());
    }
  }
  line["coordinator_start_to_listening_s"] = stats_of(start_to_listening);
  // A node restart in two parts too: its spawn -> its learners rejoined (LibTorch, the join, the state
  // fetch: down_s), rejoined -> merged again, against one fragment round (H inner steps, step_s below).
  std::vector<double> rejoin_to_merged;
  for (const auto& r : diloco.recoveries) {
    if (r.detail.contains("rejoin_to_merged_s")) rejoin_to_merged.push_back(r.detail["rejoin_to_merged_s"].get<double>());
  }
  line["node_rejoin_to_merged_s"] = stats_of(rejoin_to_merged);

  // What a model of this drill needs (archipelago sim --from-drill): its shape, its faults by kind,
  // how long each kept its victims down, the mean compute time of a step, and the ledgers' parts.
  json fault_counts = json::object(), down = json::object();
  std::map<std::string, std::vector<double>> down_by_kind;
  for (const auto& r : diloco.recoveries) {
    fault_counts[r.kind] = fault_counts.value(r.kind, 0) + 1;
    if (r.detail.contains("down_s")) down_by_kind[r.kind].push_back(r.detail["down_s"].get<double>());
  }
  for (const auto& [kind, v] : down_by_kind) down[kind] = stats_of(v);
  const Config& config = *effective;
  line["slots"] = c.nodes * c.learners_per_node;
  line["nodes"] = c.nodes;
  line["learners_per_node"] = c.learners_per_node;
  line["sites"] = c.sites;
  line["netns"] = c.netns;
  if (net) line["netns_prefix"] = net->prefix();
  line["inner_steps"] = config.run.inner_steps;
  line["fragments"] = config.outer.fragments;
  line["learner_checkpoint_every"] = config.learner_checkpoint_every;
  line["fault_counts"] = fault_counts;
  for (const auto& [key, value] : std::vector<std::pair<const char*, double>>{
           {"freeze_s", c.freeze_s}, {"slow_s", c.slow_s}, {"slow_duty", c.slow_duty}, {"slow_factor", c.slow_factor},
           {"cut_s", c.cut_s}, {"node_restart_after_s", c.node_restart_after_s},
           {"coordinator_restart_after_s", c.coordinator_restart_after_s}}) {
    line[key] = value;  // the drill's fault lengths, as its file gave them
  }
  line["down_s"] = down;
  json ledgers_s = json::object();
  for (const auto& [mode, r] : runs) ledgers_s[mode] = r.parts;
  line["ledger_s"] = ledgers_s;
  // Merged compute seconds per merged step, in the fault-free run (one coordinator incarnation), or
  // in the DiLoCo run's last incarnation: its summary's merged seconds and tokens.
  const RunResult& timed = runs.count("fault_free") ? runs["fault_free"] : diloco;
  const json seconds = timed.final_summary.value("goodput_seconds", json::object());
  const double merged_s = seconds.is_object() ? seconds.value("merged", 0.0) : 0.0;
  const double steps = timed.final_summary.value("tokens", 0.0) / (double(config.inner.batch_size) * config.model.seq_len);
  line["step_s"] = steps > 0 && merged_s > 0 ? json(merged_s / steps) : json(nullptr);
  line["step_s_from"] = runs.count("fault_free") ? "fault_free" : "diloco";
  line["fragment_round_s"] = line["step_s"].is_number() ? json(config.run.inner_steps * line["step_s"].get<double>())
                                                         : json(nullptr);

  // ---- report ----
  std::vector<Series> series;
  std::vector<Marker> markers;
  for (const auto& mode : modes) {
    Series s{mode == "diloco" ? "DiLoCo (faults)" : mode == "ddp" ? "ddp-like stall (faults)" : "fault-free", {}};
    for (const auto& p : runs[mode].loss) s.points.push_back({p.t_s - origins[mode], p.loss});
    series.push_back(s);
  }
  const std::map<std::string, int> kind_color = {{"learner", 3}, {"node", 4},         {"coordinator", 1},
                                                 {"freeze", 5},  {"slow", 6},         {"site", 8},
                                                 {"cut", 2},     {"slow_learner", 9}, {"corrupt", 0},
                                                 {"shard", 7}};
  for (const auto& r : diloco.recoveries) {
    markers.push_back({r.at_s - origins["diloco"], r.kind + " " + r.target, kind_color.count(r.kind) ? kind_color.at(r.kind) : 7});
  }
  std::ofstream(report / "loss.svg") << line_svg("held-out loss against wall time, " + c.name + " seed " +
                                                     std::to_string(arguments.seed) + " (dashed: faults in the DiLoCo run)",
                                                 "held-out loss", series, markers);
  std::vector<std::pair<std::string, std::map<std::string, double>>> ledgers;
  for (const auto& mode : modes) ledgers.push_back({mode, runs[mode].parts});
  std::ofstream(report / "goodput.svg") << ledger_svg(ledgers);
  std::ofstream(report / "recovery.svg") << recovery_svg(recovery, bounds_of(c));

  std::ostringstream md;
  md << "# Drill `" << c.name << "`, seed " << arguments.seed << "\n\n";
  if (!c.description.empty()) md << c.description << "\n\n";
  md << "Command: `archipelago drill --config " << arguments.config_file << " --seed " << arguments.seed;
  if (arguments.duration_s) md << " --duration " << *arguments.duration_s;
  if (arguments.kills) md << " --kills " << *arguments.kills;
  md << "`. " << c.nodes << " node processes × " << c.learners_per_node
     << " learners and a coordinator " << (c.netns ? "in network namespaces (" + std::to_string(c.sites) + " sites joined to a hub by veth pairs)" : std::string("on loopback"))
     << ", children of this binary; every run lasts "
     << (soak ? "until the kills are done" : num(duration_s, 0) + " s") << " from the first commit every learner contributed to.\n\n";
  md << "Result: **" << passed << " of " << total << " invariants held**, " << diloco.kills << " kills";
  if (freezes) md << ", " << freezes << " freezes/slowdowns";
  md << ".\n\n## Goodput (the coordinator's ledger)\n\n| run | goodput | merged s | allocated s | final held-out loss |\n|---|---|---|---|---|\n";
  for (const auto& mode : modes) {
    const auto& r = runs[mode];
    md << "| " << mode << " | " << num(r.goodput, 3) << " | " << num(r.parts.count("merged") ? r.parts.at("merged") : 0, 1) << " | "
       << num(r.allocated_s, 1) << " | " << num(r.final_loss, 4) << " |\n";
  }
  md << "\nGoodput is merged compute ÷ allocated slot time, from the last coordinator's summary: its ledger goes on "
        "from the carry of the committed version it resumed, so it covers the whole run, every earlier incarnation and "
        "the time no coordinator ran (kill → the next one listening: "
     << num(diloco.coordinator_down_s, 2)
     << " s in the DiLoCo run), when the learners trained on and the next coordinator merged their work. The `ddp` run is the same DiLoCo cluster under the same schedule where every fault also "
        "stalls every other learner (console `pause`) until the victim has merged a contribution again, which is what a "
        "data-parallel job's barrier does; `ddp` across processes does not exist.\n\n"
        "![goodput](goodput.svg)\n\n![loss](loss.svg)\n\n## Invariants (DiLoCo run)\n\n| invariant | | observations | evidence |\n|---|---|---:|---|\n";
  for (const auto& check : diloco.checks) {
    md << "| " << check.name << " | " << (check.passed ? "pass" : "**FAIL**") << " | " << check.observations << " | "
       << check.evidence << " |\n";
  }
  if (runs.count("ddp")) {
    md << "\nThe same checks on the ddp-like run (information; its coordinator restarts include waiting for paused learners):\n\n";
    for (const auto& check : runs["ddp"].checks) md << "- " << check.name << ": " << (check.passed ? "pass" : "fail") << " — " << check.evidence << "\n";
  }
  md << "\n## Recovery times (DiLoCo run)\n\n| kind | n | median s | max s | bound s | measured from → to |\n|---|---|---|---|---|---|\n";
  const std::map<std::string, std::string> definitions = {
      {"learner", "console `kill learner` answered → its restarted incarnation merged a contribution"},
      {"node", "the node process restarted → every learner of it rejoined and merged a contribution"},
      {"site", "the site's node processes restarted → every learner of them rejoined and merged a contribution"},
      {"coordinator", "the restarted coordinator listening → its next committed version (status polled at 50 ms)"},
      {"shard", "the restarted syncer shard listening → its next committed version (status polled at 50 ms)"},
      {"freeze", "SIGCONT → every learner of the node merged a contribution"},
      {"slow", "the end of the slowdown → every learner of the node merged a contribution"},
      {"slow_learner", "the end of its throttle (console `throttle ID 1`) → the learner merged a contribution"},
      {"corrupt", "console `corrupt ID` → the syncer refused the update (malformed) and the learner merged another"},
      {"cut", "the site's link up again → every learner of the site merged a contribution"}};
  for (const auto& [kind, v] : recovery) {
    auto st = stats_of(v);
    if (v.empty()) continue;
    md << "| " << kind << " | " << v.size() << " | " << num(st["median"].get<double>()) << " | " << num(st["max"].get<double>())
       << " | " << num(bounds_of(c)[kind], 1) << " | " << (definitions.count(kind) ? definitions.at(kind) : "") << " |\n";
  }
  if (!rejoin_to_merged.empty() && line["fragment_round_s"].is_number()) {
    const auto st = stats_of(rejoin_to_merged);
    md << "\nA node's learners, from their rejoin (seen by the drill's 0.1 s polls) to each merged again: median "
       << num(st["median"].get<double>()) << " s, max " << num(st["max"].get<double>()) << " s over " << rejoin_to_merged.size()
       << " node faults, against one fragment round of " << num(line["fragment_round_s"].get<double>())
       << " s (H × the mean step). The rest of a node's recovery is the process start, LibTorch and the join.\n";
  }
  md << "\n![recovery](recovery.svg)\n\n## Faults (DiLoCo run)\n\n| at s | fault | target | recovery s | evidence |\n|---|---|---|---|---|\n";
  for (const auto& r : diloco.recoveries) {
    md << "| " << num(r.at_s - origins["diloco"], 1) << " | " << r.fault << " | " << r.target << " | "
       << (r.recovered() ? num(r.recovery_s()) : "never") << " | " << r.evidence << " |\n";
  }
  md << "\nRun directories (logs, stores, summaries): `" << report.string() << "/<run>/`.\n";
  std::ofstream(report / "report.md") << md.str();
  std::ofstream(report / "result.json") << line.dump(2) << "\n";

  if (arguments.json) {
    std::printf("%s\n", line.dump().c_str());
  } else {
    std::printf("drill %s seed %llu: %d of %d invariants held, %d kills; report %s\n", c.name.c_str(),
                static_cast<unsigned long long>(arguments.seed), passed, total, diloco.kills, (report / "report.md").string().c_str());
    for (const auto& check : diloco.checks) std::printf("  %s %s: %s\n", check.passed ? "pass" : "FAIL", check.name.c_str(), check.evidence.c_str());
  }
  std::fflush(stdout);
  return passed == total ? 0 : 1;
}

}  // namespace archipelago::apps

#include "apps/drill/site_network.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace archipelago::apps::drill {

Expected<std::unique_ptr<SiteNetwork>> SiteNetwork::create(int sites) {
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

SiteNetwork::SiteNetwork(std::string ip, std::string prefix, int sites)
    : ip_(std::move(ip)), prefix_(std::move(prefix)), sites_(sites) {}

SiteNetwork::~SiteNetwork() {
  for (const auto& name : created_) {
    // A namespace outlives `ip netns del` while a process remains in it.
    std::istringstream pids(capture("netns pids " + name));
    for (pid_t pid; pids >> pid;) {
      if (pid != getpid()) ::kill(pid, SIGKILL);
    }
    (void)ip("netns del " + name);
  }
}

Status SiteNetwork::enter_hub() const {
  const std::string path = "/run/netns/" + ns("hub");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error(ErrorCode::io, "open " + path + ": " + std::strerror(errno));
  const int rc = setns(fd, CLONE_NEWNET);
  const int error = errno;
  close(fd);
  if (rc != 0) return make_error(ErrorCode::io, "setns " + path + ": " + std::strerror(error));
  return Status::success();
}

std::vector<std::string> SiteNetwork::in_site(int s, std::vector<std::string> command) const {
  std::vector<std::string> out{ip_, "netns", "exec", ns("s" + std::to_string(s))};
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

Status SiteNetwork::cut(int s) const { return ip("-n " + ns("hub") + " link set s" + std::to_string(s) + " down"); }

Status SiteNetwork::restore(int s) const {
  if (auto st = ip("-n " + ns("hub") + " link set s" + std::to_string(s) + " up"); !st) return st;
  return routes(s);
}

std::string SiteNetwork::capture(const std::string& args, int* status) const {
  std::string out;
  FILE* pipe = popen((ip_ + " " + args + " 2>&1").c_str(), "r");
  if (!pipe) return "popen failed";
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe)) out += buffer;
  const int rc = pclose(pipe);
  if (status) *status = rc;
  return out;
}

Status SiteNetwork::ip(const std::string& args) const {
  int status = 0;
  auto out = capture(args, &status);
  if (status != 0) return make_error(ErrorCode::io, "ip " + args + ": " + out);
  return Status::success();
}

Status SiteNetwork::routes(int s) const {
  const std::string i = std::to_string(s);
  if (auto st = ip("-n " + ns("hub") + " route replace " + site_address(s) + "/32 dev s" + i + " src " + hub_address()); !st) {
    return st;
  }
  return ip("-n " + ns("s" + i) + " route replace " + hub_address() + "/32 dev hub src " + site_address(s));
}

Status SiteNetwork::build() {
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

}  // namespace archipelago::apps::drill

// The drill's own network, for drills whose sites live in network namespaces (netns = true): a hub
// namespace (the drill and its coordinator) joined to one namespace per site by a veth pair,
// addresses on each namespace's loopback (hub 10.79.0.1, site s 10.79.1.<s + 1>, /32) and a host
// route each way, as tests/sites/netns.sh builds them.
//
// Cutting a site's link sets the hub's end of its veth down (the kernel drops its route); restoring
// sets it up and puts both routes back. Nothing outside these namespaces is touched; they are
// deleted, and whatever still runs in them killed, when the SiteNetwork is destroyed. Needs root
// and iproute2's `ip`. Created once by run_drill before any thread that opens sockets starts; the
// runs' injectors then cut and restore links from the drill's one thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace archipelago::apps::drill {

class SiteNetwork {
 public:
  // The namespaces of `sites` sites and the hub, links up; unavailable without root or `ip`.
  static Expected<std::unique_ptr<SiteNetwork>> create(int sites);
  ~SiteNetwork();
  SiteNetwork(const SiteNetwork&) = delete;
  SiteNetwork& operator=(const SiteNetwork&) = delete;

  // Moves this process into the hub namespace: call before any thread that opens sockets starts
  // (new threads and children inherit the namespace of the thread that made them).
  Status enter_hub() const;
  std::string hub_address() const { return "10.79.0.1"; }
  const std::string& prefix() const { return prefix_; }  // of every namespace's name
  // The command line that runs `command` in site `s`'s namespace (`ip netns exec` execs it: same pid).
  std::vector<std::string> in_site(int s, std::vector<std::string> command) const;
  Status cut(int s) const;
  Status restore(int s) const;

 private:
  SiteNetwork(std::string ip, std::string prefix, int sites);
  std::string ns(const std::string& name) const { return prefix_ + "-" + name; }
  std::string site_address(int s) const { return "10.79.1." + std::to_string(s + 1); }
  // `ip ARGS`'s output (stdout and stderr); its exit status in `status` when given.
  std::string capture(const std::string& args, int* status = nullptr) const;
  Status ip(const std::string& args) const;
  Status routes(int s) const;
  Status build();

  std::string ip_, prefix_;
  int sites_;
  std::vector<std::string> created_;
};

}  // namespace archipelago::apps::drill

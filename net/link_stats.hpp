// Byte accounting per link: what this process sent to and received from each remote node, and how
// cross-site traffic compares with what data-parallel training would have sent.
//
// A transport calls record_sent / record_received once per message with the remote node's id and
// site. snapshot() returns plain values for reports and the admin console. A link is "cross-site"
// when the remote site differs from this process's site.
//
// Invariant: counters only grow; a snapshot is consistent (taken under one lock).
// Thread-safety: LinkStats may be called from any thread; snapshots are plain values.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace archipelago::net {

struct LinkCounters {
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
  std::uint64_t messages_sent = 0;
  std::uint64_t messages_received = 0;

  LinkCounters& operator+=(const LinkCounters& other);
};

struct PeerTraffic {
  std::string node;  // remote node id
  std::string site;  // remote node's site
  LinkCounters counters;
};

struct LinkStatsSnapshot {
  std::string local_site;
  std::vector<PeerTraffic> peers;  // sorted by node id

  LinkCounters total() const;
  LinkCounters cross_site() const;                      // peers whose site differs from local_site
  std::map<std::string, LinkCounters> by_site() const;  // keyed by remote site
};

class LinkStats {
 public:
  explicit LinkStats(std::string local_site) : local_site_(std::move(local_site)) {}

  void record_sent(std::string_view remote_node, std::string_view remote_site, std::uint64_t bytes);
  void record_received(std::string_view remote_node, std::string_view remote_site, std::uint64_t bytes);

  LinkStatsSnapshot snapshot() const;

 private:
  PeerTraffic& peer(std::string_view node, std::string_view site);  // caller holds mutex_

  const std::string local_site_;
  mutable std::mutex mutex_;
  std::map<std::string, PeerTraffic, std::less<>> peers_;
};

// The data-parallel run to compare against: every optimizer step, sites all-reduce fp32 (by default)
// gradients hierarchically — reduce inside each site, then a ring all-reduce across the S sites, in
// which each site sends 2·(S-1)/S of the gradient bytes, so all sites together send
// 2·(S-1)·parameters·bytes_per_parameter per step across site boundaries.
struct DataParallelBaseline {
  std::uint64_t parameters = 0;
  double bytes_per_parameter = 4;  // fp32 gradients
  std::uint32_t sites = 0;
  std::uint64_t tokens_per_step = 0;  // global batch, in tokens
};

struct CommunicationEfficiency {
  double cross_site_bytes_per_token = 0;     // measured
  double data_parallel_bytes_per_token = 0;  // the baseline's
  double fraction_of_data_parallel = 0;      // measured / baseline (DiLoCo: well below 1)
};

// `cross_site_bytes`: bytes sent across site boundaries by all processes together during a run that
// trained `tokens` tokens. Fails on zero tokens, fewer than two sites, or an empty baseline.
Expected<CommunicationEfficiency> compare_to_data_parallel(std::uint64_t cross_site_bytes, std::uint64_t tokens,
                                                           const DataParallelBaseline& baseline);

}  // namespace archipelago::net

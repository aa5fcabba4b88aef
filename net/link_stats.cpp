// Per-link counters and the data-parallel comparison. See link_stats.hpp for the contract.
#include "net/link_stats.hpp"

namespace archipelago::net {

LinkCounters& LinkCounters::operator+=(const LinkCounters& other) {
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  messages_sent += other.messages_sent;
  messages_received += other.messages_received;
  return *this;
}

LinkCounters LinkStatsSnapshot::total() const {
  LinkCounters sum;
  for (const auto& peer : peers) sum += peer.counters;
  return sum;
}

LinkCounters LinkStatsSnapshot::cross_site() const {
  LinkCounters sum;
  for (const auto& peer : peers)
    if (peer.site != local_site) sum += peer.counters;
  return sum;
}

std::map<std::string, LinkCounters> LinkStatsSnapshot::by_site() const {
  std::map<std::string, LinkCounters> sums;
  for (const auto& peer : peers) sums[peer.site] += peer.counters;
  return sums;
}

PeerTraffic& LinkStats::peer(std::string_view node, std::string_view site) {
  auto it = peers_.find(node);
  if (it == peers_.end())
    it = peers_.emplace(std::string(node), PeerTraffic{std::string(node), std::string(site), {}}).first;
  else if (it->second.site != site)
    it->second.site = std::string(site);  // a node that moved sites is accounted at its latest site
  return it->second;
}

void LinkStats::record_sent(std::string_view remote_node, std::string_view remote_site, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto& counters = peer(remote_node, remote_site).counters;
  counters.bytes_sent += bytes;
  counters.messages_sent += 1;
}

void LinkStats::record_received(std::string_view remote_node, std::string_view remote_site, std::uint64_t bytes) {
  std::lock_guard lock(mutex_);
  auto& counters = peer(remote_node, remote_site).counters;
  counters.bytes_received += bytes;
  counters.messages_received += 1;
}

LinkStatsSnapshot LinkStats::snapshot() const {
  std::lock_guard lock(mutex_);
  LinkStatsSnapshot snapshot{local_site_, {}};
  snapshot.peers.reserve(peers_.size());
  for (const auto& [node, traffic] : peers_) snapshot.peers.push_back(traffic);
  return snapshot;
}

Expected<CommunicationEfficiency> compare_to_data_parallel(std::uint64_t cross_site_bytes, std::uint64_t tokens,
                                                           const DataParallelBaseline& baseline) {
  if (tokens == 0) return make_error(ErrorCode::invalid_argument, "no tokens trained: bytes per token undefined");
  if (baseline.sites < 2)
    return make_error(ErrorCode::invalid_argument, "a cross-site baseline needs at least 2 sites");
  if (baseline.parameters == 0 || baseline.tokens_per_step == 0 || !(baseline.bytes_per_parameter > 0))
    return make_error(ErrorCode::invalid_argument,
                      "baseline needs parameters, bytes_per_parameter and tokens_per_step > 0");
  CommunicationEfficiency result;
  result.cross_site_bytes_per_token = double(cross_site_bytes) / double(tokens);
  const double bytes_per_step =
      2.0 * double(baseline.sites - 1) * double(baseline.parameters) * baseline.bytes_per_parameter;
  result.data_parallel_bytes_per_token = bytes_per_step / double(baseline.tokens_per_step);
  result.fraction_of_data_parallel = result.cross_site_bytes_per_token / result.data_parallel_bytes_per_token;
  return result;
}

}  // namespace archipelago::net

// `--metrics-listen HOST:PORT` of the coordinator: Prometheus metrics and a status page over HTTP
// (cpp-httplib).
//
//   GET /metrics  text exposition format 0.0.4; units in the names:
//     archipelago_committed_version, archipelago_versions_committed_total (since this process
//     started), archipelago_updates_merged_total, archipelago_updates_rejected_total{reason},
//     archipelago_bytes_total{direction="sent"|"received",link=<node>}, archipelago_heldout_loss
//     (absent until measured), archipelago_learner_restarts_total, archipelago_learners{state},
//     archipelago_refused_messages_total{reason}, archipelago_uptime_seconds,
//     archipelago_goodput_ratio and archipelago_badput_ratio{part} (the goodput ledger of
//     actors/accounting.hpp: the nodes' supervisors report their learners' times).
//   GET /         a page that reloads itself every 2 s, with no script and nothing fetched from
//                 elsewhere: a header (committed version, held-out loss, goodput, uptime), the learners
//                 and links tables, and held-out loss, learner throughput, link bytes, goodput and
//                 committed versions over time as inline SVG charts, recent events (learner state
//                 changes). Each chart has both axes ticked at round values (1, 2 or 5 × 10^k; clock
//                 steps on the time axis) and labelled with their unit; time is the coordinator's
//                 local time of day. Figures read as what they measure: losses to 3 decimals, goodput
//                 as a fraction to 3 decimals, tokens/s whole with thousands grouped, bytes in SI units,
//                 uptime as "6 s", "2 min 05 s", "1 h 03 min".
//
// Every figure comes from the coordinator's last progress sample (runtime.progress_interval_s); each
// sample is stamped with the system clock when it arrives, which is when it was taken.
// With a metrics token configured, every request needs `Authorization: Bearer <metrics token>`, on
// loopback too: a read-only credential of its own (--metrics-token-file; Prometheus' `authorization`
// setting sends it). Off a loopback address one is required: without it the address is refused at
// start. A metrics token equal to the join or the admin token is refused at start: it travels to
// every scraper and must open neither a session nor a console. The server speaks plain HTTP: across
// machines, put it behind a TLS reverse proxy (README.md, "Metrics").
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "net/auth.hpp"

namespace archipelago::apps {

// The latest sample and a bounded history. Any thread.
class MetricsBoard {
 public:
  void update(const nlohmann::json& progress);
  std::string prometheus() const;
  std::string page() const;

 private:
  mutable std::mutex mutex_;
  nlohmann::json latest_;
  struct Point {
    double unix_s;        // the system clock when the sample arrived
    double heldout_loss;  // NaN: not measured yet
    uint64_t version;
    double goodput;       // NaN: no ledger in the sample
    double tokens_per_s;  // the learners' own reports, summed
    double link_bytes;    // on the node links so far, both directions
  };
  std::deque<Point> history_;
  double latest_unix_s_ = 0;
  std::deque<std::string> events_;  // newest last
  std::map<std::string, std::string> states_;  // learner -> last state seen
};


class MetricsServer {
 public:
  // Listens on host:port (0: any free port) in a thread of its own. `reader` (the metrics token) is
  // required off loopback and, when given, asked of every request; `admin` and `join` (either may be
  // null) are only compared with it.
  static Expected<std::unique_ptr<MetricsServer>> start(const std::string& host, uint16_t port,
                                                        std::shared_ptr<MetricsBoard> board,
                                                        std::shared_ptr<const net::Secret> reader,
                                                        std::shared_ptr<const net::Secret> admin,
                                                        std::shared_ptr<const net::Secret> join = nullptr);
  ~MetricsServer();
  uint16_t port() const { return port_; }

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl, uint16_t port);
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace archipelago::apps

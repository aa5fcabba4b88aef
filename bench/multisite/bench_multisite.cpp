// bench_multisite: what the cross-site plane (remote/) costs, each number against a baseline
// measured in the same run. Results and how to read them: README.md here.
//
//   1. transport   one `--mb` MB update in `--chunk-kib` KiB Session.update calls, sender and
//                  receiver on two threads (two kj event loops) over loopback TCP: the plane's
//                  RPC alone in plaintext and over TLS, and the product's whole path (remote::Server
//                  + remote::NodePlane with their actor bridges), against raw TCP and raw TLS copies
//                  of the same bytes (kj-tls, and OpenSSL on the socket). Seconds and CPU are
//                  medians of `--repeats`. `--transport-only` runs this alone.
//   2. 8 learners  eight uploads of mb/8 at once: eight connections, eight sessions on one
//                  connection, eight update streams on one session; against eight raw sockets.
//   3. CPU         the receiving thread's CPU seconds per GB received (getrusage RUSAGE_THREAD),
//                  in every row of 1 and 2: what the coordinator's plane thread spends.
//   4. restarts    a coordinator and a node SIGKILLed and started again (real processes):
//                  time to the next committed version / first merged update (restarts.hpp).
//   --variants     the plane with other chunk sizes, flow limits and send buffers.
//   --link         1 and 8 streams through an emulated 25 ms, 1 Gbit/s link (delay_line.hpp).
//   --skip-restarts leaves out 4; --only TEXT runs only the rows whose name holds TEXT (for perf).
#include <algorithm>
#include <thread>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <unistd.h>

#include "bench/multisite/delay_line.hpp"
#include "bench/multisite/restarts.hpp"
#include "bench/multisite/transfer.hpp"
#include "common/log.hpp"
#include "net/certificate_authority.hpp"

using namespace multisite_bench;
namespace fs = std::filesystem;

namespace {

struct Options {
  double mb = 100;
  int repeats = 3;
  uint64_t chunk_kib = 1024;
  bool transport_only = false;
  bool skip_restarts = false;
  bool restarts_only = false;  // 4 alone
  bool variants = false;
  bool link = false;
  double link_mb = 100;
  double link_latency_ms = 25;
  double link_mbit = 1000;
  std::string only;  // run only the rows whose name contains this (for perf)
};

// One row of a table: a carrier with its spec, and the row it is compared with.
using Carrier = std::function<TransferResult(const TransferSpec&)>;

struct Row {
  Row(std::string n, Carrier c, TransferSpec s, int b = -1) : name(std::move(n)), carrier(std::move(c)), spec(std::move(s)), baseline(b) {}
  std::string name;
  Carrier carrier;
  TransferSpec spec;
  int baseline;  // index of the row this one is divided by; -1: it is a baseline
  std::vector<TransferResult> results;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

struct Medians {
  double seconds = 0, receiver_cpu_s_per_gb = 0, sender_cpu_s_per_gb = 0, process_cpu_s_per_gb = 0, bytes = 0;
  int window = 0;
  int failures = 0;
};

Medians medians_of(const Row& row) {
  std::vector<double> s, r, w, p;
  Medians m;
  for (const auto& x : row.results) {
    if (!x.ok) {
      ++m.failures;
      continue;
    }
    s.push_back(x.seconds);
    r.push_back(x.receiver_cpu_s_per_gb());
    w.push_back(x.bytes > 0 ? x.sender_cpu_s / (x.bytes / 1e9) : 0);
    p.push_back(x.bytes > 0 ? x.process_cpu_s / (x.bytes / 1e9) : 0);
    m.bytes = static_cast<double>(x.bytes);
    m.window = x.window_bytes;
  }
  m.seconds = median(s);
  m.receiver_cpu_s_per_gb = median(r);
  m.sender_cpu_s_per_gb = median(w);
  m.process_cpu_s_per_gb = median(p);
  return m;
}

// Runs every row `repeats` times, the rows interleaved (so a slow moment of the VM hits all of
// them), and prints the table.
void run_table(const std::string& title, std::vector<Row>& rows, int repeats, const std::string& only) {
  if (!only.empty()) {
    std::vector<Row> kept;
    for (auto& row : rows) {
      if (row.name.find(only) != std::string::npos) kept.push_back(std::move(row));
    }
    for (auto& row : kept) row.baseline = -1;
    rows = std::move(kept);
    if (rows.empty()) return;
  }
  std::printf("\n%s (median of %d)\n", title.c_str(), repeats);
  std::fflush(stdout);
  for (int r = 0; r < repeats; ++r) {
    for (auto& row : rows) {
      row.results.push_back(row.carrier(row.spec));
      if (!row.results.back().ok) std::printf("  %s: FAILED: %s\n", row.name.c_str(), row.results.back().error.c_str());
    }
  }
  std::printf("  %-58s %8s %7s %14s %9s %9s %9s %9s\n", "carrier", "s", "GB/s", "vs baseline", "recv s/GB", "send s/GB", "all s/GB",
              "window");
  std::vector<Medians> m;
  for (const auto& row : rows) m.push_back(medians_of(row));
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    char versus[64] = "(baseline)";
    if (row.baseline >= 0 && m[row.baseline].seconds > 0) std::snprintf(versus, sizeof versus, "%.2fx row %d", m[i].seconds / m[row.baseline].seconds, row.baseline + 1);
    char cpu[64];
    std::snprintf(cpu, sizeof cpu, "%9.3f %9.3f", m[i].receiver_cpu_s_per_gb, m[i].sender_cpu_s_per_gb);
    char all[32] = "-";
    if (m[i].process_cpu_s_per_gb > 0) std::snprintf(all, sizeof all, "%.3f", m[i].process_cpu_s_per_gb);
    char window[32] = "-";
    if (m[i].window > 0) std::snprintf(window, sizeof window, "%.2f MiB", m[i].window / 1048576.0);
    std::printf("  %2zu %-55s %8.3f %7.3f %14s %s %9s %9s%s\n", i + 1, row.name.c_str(), m[i].seconds,
                m[i].seconds > 0 ? m[i].bytes / m[i].seconds / 1e9 : 0, versus, cpu, all, window,
                m[i].failures ? (" (" + std::to_string(m[i].failures) + " failed)").c_str() : "");
  }
  std::fflush(stdout);
}

TransferSpec spec_of(uint64_t bytes, uint64_t chunk, int streams = 1, Fanout fanout = Fanout::connections,
                     const std::optional<archipelago::remote::TlsFiles>& tls = std::nullopt) {
  TransferSpec spec;
  spec.total_bytes = bytes;
  spec.chunk_bytes = chunk;
  spec.streams = streams;
  spec.fanout = fanout;
  spec.tls = tls;
  return spec;
}

// A run CA and one certificate for 127.0.0.1 (both ends use it, as a run's processes may).
std::optional<archipelago::remote::TlsFiles> make_certificates(const fs::path& dir) {
  const std::string ca = (dir / "ca").string();
  if (auto made = archipelago::net::init_certificate_authority(ca); !made) {
    std::fprintf(stderr, "certificate authority: %s\n", made.error().reason.c_str());
    return std::nullopt;
  }
  if (auto issued = archipelago::net::issue_certificate(ca, "node", {"127.0.0.1"}); !issued) {
    std::fprintf(stderr, "certificate: %s\n", issued.error().reason.c_str());
    return std::nullopt;
  }
  return archipelago::remote::TlsFiles{archipelago::net::certificate_path(ca, "node"), archipelago::net::private_key_path(ca, "node"),
                                       archipelago::net::certificate_path(ca, archipelago::net::kCaName)};
}

void transport(const Options& o, const archipelago::remote::TlsFiles& tls) {
  const uint64_t bytes = static_cast<uint64_t>(o.mb * 1e6), chunk = o.chunk_kib << 10;
  std::vector<Row> rows{
      {"raw TCP socket copy", raw_tcp_copy, spec_of(bytes, chunk)},
      {"plane RPC (Session.update stream), plaintext", plane_copy, spec_of(bytes, chunk), 0},
      {"product path (Server + NodePlane + actors), plaintext", product_copy, spec_of(bytes, chunk), 0},
      {"raw TLS copy (kj-tls)", raw_tls_copy, spec_of(bytes, chunk, 1, Fanout::connections, tls)},
      {"plane RPC (Session.update stream), TLS", plane_copy, spec_of(bytes, chunk, 1, Fanout::connections, tls), 3},
      {"product path (Server + NodePlane + actors), TLS", product_copy, spec_of(bytes, chunk, 1, Fanout::connections, tls), 3},
      {"raw TLS copy (OpenSSL on the socket, not kj-tls)", openssl_copy, spec_of(bytes, chunk, 1, Fanout::connections, tls), 3},
  };
  char title[160];
  std::snprintf(title, sizeof title, "1. transport: one %.0f MB update in %llu KiB chunks, loopback", o.mb,
                static_cast<unsigned long long>(o.chunk_kib));
  run_table(title, rows, o.repeats, o.only);
}

void eight_learners(const Options& o, const archipelago::remote::TlsFiles& tls) {
  const uint64_t bytes = static_cast<uint64_t>(o.mb * 1e6), chunk = o.chunk_kib << 10;
  std::vector<Row> rows{
      {"raw TCP, 8 sockets", raw_tcp_copy, spec_of(bytes, chunk, 8)},
      {"plane, 8 connections", plane_copy, spec_of(bytes, chunk, 8, Fanout::connections), 0},
      {"plane, 8 sessions on one connection", plane_copy, spec_of(bytes, chunk, 8, Fanout::sessions), 0},
      {"plane, 8 update streams on one session", plane_copy, spec_of(bytes, chunk, 8, Fanout::calls), 0},
      {"plane, 1 connection (for comparison)", plane_copy, spec_of(bytes, chunk, 1), 0},
      {"raw TLS, 8 connections", raw_tls_copy, spec_of(bytes, chunk, 8, Fanout::connections, tls)},
      {"plane TLS, 8 connections", plane_copy, spec_of(bytes, chunk, 8, Fanout::connections, tls), 5},
      {"plane TLS, 8 sessions on one connection", plane_copy, spec_of(bytes, chunk, 8, Fanout::sessions, tls), 5},
  };
  char title[160];
  std::snprintf(title, sizeof title, "2. 8 learners uploading at once: 8 x %.1f MB in %llu KiB chunks, loopback", o.mb / 8,
                static_cast<unsigned long long>(o.chunk_kib));
  run_table(title, rows, o.repeats, o.only);
}

void variants(const Options& o) {
  const uint64_t bytes = static_cast<uint64_t>(o.mb * 1e6);
  std::vector<Row> rows{{"raw TCP, 1 MiB writes", raw_tcp_copy, spec_of(bytes, 1 << 20)}};
  for (uint64_t kib : {64, 256, 1024, 4096}) {
    rows.push_back({"plane, " + std::to_string(kib) + " KiB chunks", plane_copy, spec_of(bytes, kib << 10), 0});
  }
  auto small_flow = spec_of(bytes, 1 << 20);
  small_flow.limits.max_pending_bytes = 16ull << 20;
  rows.push_back({"plane, 1 MiB chunks, flow limit 16 MiB", plane_copy, small_flow, 0});
  auto referenced = spec_of(bytes, 1 << 20);
  referenced.reference_payload = true;
  rows.push_back({"plane, 1 MiB chunks by reference (not copied)", plane_copy, referenced, 0});
  auto big_buffer = spec_of(bytes, 1 << 20);
  big_buffer.send_buffer_bytes = 4 << 20;  // the kernel doubles it (and stops autotuning)
  rows.push_back({"plane, 1 MiB chunks, SO_SNDBUF 4 MiB (window 8 MiB)", plane_copy, big_buffer, 0});
  auto big_buffer_raw = spec_of(bytes, 1 << 20);
  big_buffer_raw.send_buffer_bytes = 4 << 20;
  rows.push_back({"raw TCP, SO_SNDBUF 4 MiB", raw_tcp_copy, big_buffer_raw, 0});
  char title[160];
  std::snprintf(title, sizeof title, "variants: one %.0f MB update, plaintext, loopback", o.mb);
  run_table(title, rows, o.repeats, o.only);
}

uint64_t tcp_wmem_max() {
  std::ifstream in("/proc/sys/net/ipv4/tcp_wmem");
  uint64_t low = 0, initial = 0, high = 0;
  in >> low >> initial >> high;
  return high > 0 ? high : 4u << 20;
}

void emulated_link(const Options& o) {
  const uint64_t bytes = static_cast<uint64_t>(o.link_mb * 1e6), chunk = o.chunk_kib << 10;
  const archipelago::net::LinkSpec link{o.link_mbit * 1e6, o.link_latency_ms / 1000};
  const uint64_t window = tcp_wmem_max();
  // Each transfer gets a fresh link (its own queues and shaper), started on the receiver's port.
  auto through_link = [link](Carrier carrier, uint64_t window) -> Carrier {
    return [carrier, link, window](const TransferSpec& spec) {
      std::unique_ptr<DelayLine> line;
      TransferSpec routed = spec;
      routed.route = [&](uint16_t port) -> uint16_t {
        auto started = DelayLine::start(link, window, port);
        if (!started) return 0;
        line = std::move(*started);
        return line->port();
      };
      return carrier(routed);
    };
  };
  // Twice the window: what raising net.ipv4.tcp_wmem's maximum would allow; the plane's stream
  // window follows SO_SNDBUF, set here to 4 MiB (the kernel doubles it, within net.core.wmem_max).
  auto wide = spec_of(bytes, chunk);
  wide.send_buffer_bytes = 4 << 20;
  std::vector<Row> rows{
      {"raw TCP, 1 socket", through_link(raw_tcp_copy, window), spec_of(bytes, chunk)},
      {"raw TCP, 8 sockets", through_link(raw_tcp_copy, window), spec_of(bytes, chunk, 8), 0},
      {"plane, 1 stream", through_link(plane_copy, window), spec_of(bytes, chunk), 0},
      {"plane, 8 connections", through_link(plane_copy, window), spec_of(bytes, chunk, 8, Fanout::connections), 0},
      {"plane, 8 sessions on one connection", through_link(plane_copy, window), spec_of(bytes, chunk, 8, Fanout::sessions), 0},
      {"plane, 8 update streams on one session", through_link(plane_copy, window), spec_of(bytes, chunk, 8, Fanout::calls), 0},
      {"raw TCP, 1 socket, TCP window x2", through_link(raw_tcp_copy, 2 * window), spec_of(bytes, chunk), 0},
      {"plane, 1 stream, TCP window x2, SO_SNDBUF 4 MiB", through_link(plane_copy, 2 * window), wide, 0},
  };
  char title[200];
  std::snprintf(title, sizeof title,
                "emulated link: %.0f MB through %.0f ms one-way, %.0f Mbit/s (ideal %.2f s), TCP window cap %.1f MiB per connection",
                o.link_mb, o.link_latency_ms, o.link_mbit, bytes * 8 / (o.link_mbit * 1e6), window / 1048576.0);
  run_table(title, rows, o.repeats, o.only);
}

void restart_row(const std::string& layout, const std::vector<int>& coordinator_cores, const std::vector<int>& node_cores,
                 int learner_nice = 5) {
  std::printf(" %s:\n", layout.c_str());
  std::fflush(stdout);
  const auto t = measure_restarts(coordinator_cores, node_cores, learner_nice);
  if (!t.ok) {
    std::printf("  FAILED: %s\n", t.error.c_str());
    return;
  }
  std::printf("  coordinator SIGKILL -> next committed version:       %.2f s (kill -> dead %.3f s, then the new process)\n",
              t.coordinator_kill_to_commit_s, t.kill_to_dead_s);
  std::printf("  coordinator process start -> next committed version: %.2f s (start -> listening %.2f s, listening -> commit %.2f s)\n",
              t.coordinator_start_to_commit_s, t.coordinator_start_to_listening_s,
              t.coordinator_start_to_commit_s - t.coordinator_start_to_listening_s);
  if (!t.coordinator_startup.empty()) std::printf("    the restarted coordinator's log: %s\n", t.coordinator_startup.c_str());
  std::printf("  node process start -> first merged update:           %.2f s (process start, join, state fetch, H = 10 steps)\n",
              t.node_start_to_merge_s);
}

void restarts() {
  std::printf("\n4. restarts (real processes: a coordinator and two nodes of two learners, tiny preset, H = 10)\n");
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  std::vector<int> others;
  for (int c = 1; c < cores; ++c) others.push_back(c);
  restart_row("every process on every core", {}, {});
  restart_row("every process on every core, learners at their process's priority (runtime.learner_nice = 0)", {}, {}, 0);
  if (!others.empty()) restart_row("the coordinator on core 0, the nodes on the other cores", {0}, others);
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : "0"; };
    if (a == "--mb") o.mb = std::atof(value());
    else if (a == "--repeats") o.repeats = std::max(1, std::atoi(value()));
    else if (a == "--chunk-kib") o.chunk_kib = std::max(1, std::atoi(value()));
    else if (a == "--transport-only") o.transport_only = true;
    else if (a == "--skip-restarts") o.skip_restarts = true;
    else if (a == "--restarts-only") o.restarts_only = true;
    else if (a == "--variants") o.variants = true;
    else if (a == "--link") o.link = true;
    else if (a == "--link-mb") o.link_mb = std::atof(value());
    else if (a == "--link-latency-ms") o.link_latency_ms = std::atof(value());
    else if (a == "--link-mbit") o.link_mbit = std::atof(value());
    else if (a == "--only") o.only = value();
    else {
      std::fprintf(stderr,
                   "usage: bench_multisite [--mb 100] [--repeats 3] [--chunk-kib 1024] [--transport-only | --skip-restarts | --restarts-only]\n"
                   "                       [--variants] [--link [--link-mb 100] [--link-latency-ms 25] [--link-mbit 1000]]\n"
                   "                       [--only TEXT]   (only the rows whose name contains TEXT)\n");
      return false;
    }
  }
  return o.mb > 0 && o.link_mb > 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A peer that goes away mid-write must be an error value, never the end of the bench.
  std::signal(SIGPIPE, SIG_IGN);
  Options o;
  if (!parse(argc, argv, o)) return 2;
  archipelago::init_logging({"bench", "warn", ""});  // not every session's end
  if (o.restarts_only) {
    restarts();
    return 0;
  }
  const fs::path dir = fs::temp_directory_path() / ("bench-multisite-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto tls = make_certificates(dir);
  if (!tls) return 1;
  std::printf("bench_multisite: sender and receiver are two threads of this process, each its own kj event loop, over loopback TCP\n");
  transport(o, *tls);
  if (!o.transport_only) eight_learners(o, *tls);
  if (o.variants) variants(o);
  if (o.link) emulated_link(o);
  if (!o.transport_only && !o.skip_restarts) restarts();
  fs::remove_all(dir);
  return 0;
}

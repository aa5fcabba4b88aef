// bench_multisite: what the multi-site layer costs, each number with its baseline from the same run.
//
//   1. Transport throughput: a `--mb` MB update in `--chunk-mib` MiB messages from one actor system
//      to an actor of another over CAF's io middleman on loopback (what a node's learners use),
//      vs a plain TCP socket copy of the same bytes on loopback.
//   2. Node restart -> its first merged update: a coordinator and two nodes train; one node is
//      SIGKILLed and started again; time from the restart to the first commit carrying its work.
//   3. Coordinator restart -> next committed version: the coordinator is SIGKILLed and started
//      again on the same run directory; time from the restart to its first new committed version.
// Usage: bench_multisite [--mb 100] [--chunk-mib 4] [--repeats 3] [--transport-only]
#include <netinet/tcp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/remote_protocol.hpp"
#include "actors/wire.hpp"
#include "tests/multisite/process.hpp"

using namespace multisite;
using archipelago::actors::WireBytes;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// ---- 1. transport ------------------------------------------------------------------------------------

double caf_copy(size_t total, size_t chunk) {
  caf::actor_system_config receiver_config, sender_config;
  archipelago::actors::TransportOptions transport;
  (void)archipelago::actors::configure_transport(receiver_config, transport);
  (void)archipelago::actors::configure_transport(sender_config, transport);
  caf::actor_system receiver(receiver_config), sender(sender_config);
  auto received = std::make_shared<std::atomic<size_t>>(0);
  auto sink = receiver.spawn([received](caf::event_based_actor*) -> caf::behavior {
    return {[received](WireBytes& bytes) { *received += bytes.size(); }};
  });
  auto port = receiver.middleman().publish(sink, 0, "127.0.0.1");
  auto remote = sender.middleman().remote_actor("127.0.0.1", *port);
  if (!port || !remote) return -1;
  const auto start = Clock::now();
  for (size_t sent = 0; sent < total; sent += chunk) caf::anon_send(*remote, WireBytes(chunk, 'x'));
  wait_until([&] { return *received >= total; }, 120);
  const double s = seconds_since(start);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  return s;
}

double tcp_copy(size_t total, size_t chunk) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length);
  listen(listener, 1);
  std::thread reader([&] {
    int peer = accept(listener, nullptr, nullptr);
    std::vector<char> buffer(1 << 20);
    size_t got = 0;
    while (got < total) {
      ssize_t n = read(peer, buffer.data(), buffer.size());
      if (n <= 0) break;
      got += n;
    }
    close(peer);
  });
  int out = socket(AF_INET, SOCK_STREAM, 0);
  connect(out, reinterpret_cast<sockaddr*>(&address), sizeof address);
  std::vector<char> message(chunk, 'x');  // a fresh buffer per chunk, as the transport has
  const auto start = Clock::now();
  for (size_t sent = 0; sent < total; sent += chunk) {
    std::vector<char> copy = message;
    for (size_t off = 0; off < copy.size();) {
      ssize_t n = write(out, copy.data() + off, copy.size() - off);
      if (n <= 0) break;
      off += n;
    }
  }
  shutdown(out, SHUT_WR);
  reader.join();
  const double s = seconds_since(start);
  close(out);
  close(listener);
  return s;
}

// ---- 2 and 3. restarts -------------------------------------------------------------------------------

std::vector<std::string> sets(std::vector<std::string> arguments, const std::string& data) {
  for (std::string s : std::vector<std::string>{"model.preset=tiny", "train.learners=4", "inner.batch_size=8", "data.eval_batches=2",
                        "train.inner_steps=10", "runtime.store_sync=true", "train.threads=1",
                        "runtime.progress_interval_s=0.2", "runtime.drain_timeout_s=5", "inner.warmup_steps=10",
                        "train.max_seconds=0", std::string("data.cache_dir=") + data}) {
    arguments.push_back("--set");
    arguments.push_back(s);
  }
  return arguments;
}

void restarts() {
  Scratch s("bench");
  const std::string data = (fs::temp_directory_path() / "archipelago-test-data").string();
  const int port = free_port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto coordinator_args = sets({"coordinator", "--json", "--listen", address, "--run-dir", (s.dir / "run").string(),
                                "--token-file", s.token.string()}, data);
  auto node_args = [&](const std::string& name) {
    return std::vector<std::string>{"node", "--json", "--coordinator", address, "--learners", "2", "--name", name,
                                    "--token-file", s.token.string(), "--set", "train.threads=1"};
  };
  auto first = std::make_unique<Process>("coordinator-1", coordinator_args, s.dir);
  wait_until([&] { return first->out().find("listening") != std::string::npos; }, 60);
  Process a("node-a", node_args("node-a"), s.dir);
  auto b = std::make_unique<Process>("node-b", node_args("node-b"), s.dir);
  wait_until([&] { return first->last_value("version") >= 10; }, 60);

  // Coordinator restart -> its first new committed version (both clocks are CLOCK_MONOTONIC).
  first->kill(SIGKILL);
  const double coordinator_restart = archipelago::actors::monotonic_seconds();
  Process second("coordinator-2", coordinator_args, s.dir);
  wait_until([&] { return count_of(second.err(), "admitted node") >= 2 && second.last_value("version") > 0; }, 60);
  std::this_thread::sleep_for(std::chrono::seconds(2));

  // Node restart -> the first commit carrying its learners' work.
  b->kill(SIGKILL);
  wait_until([&] { return count_of(second.err(), "declared dead") >= 2; }, 10);
  const double node_restart = archipelago::actors::monotonic_seconds();
  Process b2("node-b-2", node_args("node-b"), s.dir);
  wait_until([&] { return count_of(second.err(), "admitted node 'node-b'") == 2; }, 30);
  std::this_thread::sleep_for(std::chrono::seconds(4));
  second.kill(SIGTERM);
  second.wait(60);
  a.wait(30);
  b2.wait(30);
  auto summary = second.summary();
  auto restarted = b2.summary();
  if (!summary.is_object() || !restarted.is_object()) {
    std::printf("restarts: no summary\n%s\n", second.all().c_str());
    return;
  }
  double first_merge = -1;
  for (int m = restarted["first_learner"].get<int>(); m < restarted["first_learner"].get<int>() + 2; ++m) {
    const double t = summary["learners"]["learner-" + std::to_string(m)]["first_merge_after_join_s"].get<double>();
    if (t > 0 && (first_merge < 0 || t < first_merge)) first_merge = t;
  }
  std::printf("node restart -> first merged update:            %.2f s (process start, join, state fetch, H=10 steps)\n",
              first_merge - node_restart);
  std::printf("coordinator restart -> next committed version:  %.2f s (process start, store restore, nodes reconnect)\n",
              summary["first_commit_s"].get<double>() - coordinator_restart);
}

}  // namespace

int main(int argc, char** argv) {
  double mb = 100;
  size_t chunk_mib = 4;
  int repeats = 3;
  bool transport_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mb" && i + 1 < argc) mb = std::atof(argv[++i]);
    else if (a == "--chunk-mib" && i + 1 < argc) chunk_mib = std::atoi(argv[++i]);
    else if (a == "--repeats" && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (a == "--transport-only") transport_only = true;
  }
  const size_t total = static_cast<size_t>(mb * 1e6), chunk = chunk_mib << 20;
  std::vector<double> caf_s, tcp_s;
  for (int r = 0; r < repeats; ++r) {
    tcp_s.push_back(tcp_copy(total, chunk));
    caf_s.push_back(caf_copy(total, chunk));
  }
  std::sort(caf_s.begin(), caf_s.end());
  std::sort(tcp_s.begin(), tcp_s.end());
  const double caf_median = caf_s[caf_s.size() / 2], tcp_median = tcp_s[tcp_s.size() / 2];
  std::printf("transport: %.0f MB in %zu MiB messages, median of %d\n", mb, chunk_mib, repeats);
  std::printf("  CAF io middleman (remote actor)  %.3f s  %.2f GB/s\n", caf_median, total / caf_median / 1e9);
  std::printf("  plain TCP socket copy            %.3f s  %.2f GB/s\n", tcp_median, total / tcp_median / 1e9);
  std::printf("  ratio                            %.2fx the TCP copy's time\n", caf_median / tcp_median);
  if (!transport_only) restarts();
  return 0;
}

// bench_syncer: how many learners one syncer serves, and what its merge costs against the memory
// bandwidth limit.
//
//   bench_syncer [--params 25000000,250000000] [--learners 4,16,64] [--fragments 4] [--rounds 2]
//                [--shards 1,2] [--codec int4] [--dir DIR] [--out FILE]
//
// Per configuration (model size × learners), in one process: a real syncer actor and a real
// checkpoint store actor over RocksDB (synced commits, the last 2 versions kept), and M synthetic
// learners that send pre-encoded updates (Gaussian Δ, encoded once, no training) of every fragment
// in sync mode (quorum M: every round merges all M). The learners are one blocking CAF actor
// holding M outboxes; after each update it sends the syncer a request it answers at once (a `set`
// of a key that is not tunable), which the syncer answers after the update's chunks (one sender's messages arrive in order), so one update is in flight at a
// time and "updates/s" is the syncer's own pace: reassembly, decode, norm, screening, fold.
//
// Figures per round: updates/s; the merge phase (first update sent → last one folded) against the
// memory-bandwidth limit, M × (bytes of one fused decode + accumulate pass) at this machine's memcpy
// rate, measured in the same run; the commit (last fold → version visible: stage, outer step,
// downlink encoding, persist, broadcast); the syncer's CPU seconds (process CPU minus this thread's);
// and peak RSS above the process before the actors started, in fp32 copies of the model.
// With --shards S the fragments are owned by S syncer shards (fragment p by shard p mod S), each a
// syncer actor with its own store actor and RocksDB directory, in this one process; every learner
// joins each, sends each fragment's update to its owner, and has one update in flight per shard
// (one shard: one at a time, as above). The figures then sum over the shards (commits, folds).
// Each configuration prints one JSON line; --out appends them to a file.
#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/directory.hpp"
#include "run/run_setup.hpp"
#include "actors/store_actor.hpp"
#include "actors/syncer.hpp"
#include "actors/wire.hpp"
#include "common/log.hpp"
#include "messages/tensor_codec.hpp"
#include "storage/checkpoint_store.hpp"
#include "training/options.hpp"

using namespace archipelago;
using namespace archipelago::actors;
using archipelago::run::open_run_store;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

// kB fields of /proc/self/status (VmRSS, VmHWM).
int64_t status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const std::string key = std::string(field) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(key.size()));
  }
  return -1;
}

void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

// What the process's resident memory is made of at its highest sample: resident and file-backed
// pages (/proc/self/statm), and malloc's view (mallinfo2, every arena): bytes in use (its heap and
// its own mmaps) and bytes it holds free. Sampled every 5 ms on its own thread, so a peak shorter
// than that can be missed (VmHWM is the exact peak).
class ResidentSampler {
 public:
  struct Sample {
    int64_t resident = 0, file = 0, malloc_used = 0, malloc_free = 0;
  };
  ResidentSampler() : page_(sysconf(_SC_PAGESIZE)), thread_([this] { loop(); }) {}
  ~ResidentSampler() { stop(); }
  Sample stop() {
    if (thread_.joinable()) {
      done_ = true;
      thread_.join();
    }
    return peak_;
  }

 private:
  void loop() {
    while (!done_) {
      Sample s;
      std::ifstream statm("/proc/self/statm");
      int64_t size = 0, resident = 0, shared = 0;
      statm >> size >> resident >> shared;
      s.resident = resident * page_;
      s.file = shared * page_;
      const struct mallinfo2 m = mallinfo2();
      s.malloc_used = static_cast<int64_t>(m.uordblks + m.hblkhd);
      s.malloc_free = static_cast<int64_t>(m.fordblks);
      if (s.resident > peak_.resident) peak_ = s;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  const int64_t page_;
  std::atomic<bool> done_{false};
  Sample peak_;
  std::thread thread_;
};

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(static_cast<int64_t>(std::stod(item)));
  return out;
}

// Bytes per second memcpy copies on this machine (best of 3 over 256 MiB).
double memcpy_rate() {
  const size_t bytes = size_t{256} << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    auto t = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, since(t));
    a[static_cast<size_t>(i)] = b[bytes - 1 - static_cast<size_t>(i)];  // keep the copies observable
  }
  return static_cast<double>(bytes) / best;
}

// Drops what the syncer sent the learners (Welcome, broadcasts) and counts the broadcast bytes.
int64_t drain(caf::scoped_actor& self) {
  int64_t bytes = 0;
  bool more = true;
  while (more) {
    self->receive([&](const WireBytes& m) { bytes += static_cast<int64_t>(m.size()); },
                  caf::after(std::chrono::milliseconds(0)) >> [&] { more = false; });
  }
  return bytes;
}

struct Config {
  int64_t params = 0;
  int learners = 0;
  int fragments = 4;
  int rounds = 2;
  int shards = 1;  // syncer shards, each its own syncer and store actor owning fragments p mod shards
  messages::Codec codec = messages::Codec::int4_uniform;
  std::string dir;
};

// The status of one syncer actor (not looked up by name: a sharded run has several).
Expected<nlohmann::json> ask_admin_of(caf::actor_system& system, const caf::actor& syncer, double timeout_s) {
  caf::scoped_actor self{system};
  Expected<nlohmann::json> out = make_error(ErrorCode::unavailable, "no answer from the syncer");
  self->request(syncer, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)), admin_atom::value,
                admin_request("bench", "status"))
      .receive([&](WireBytes& bytes) { out = read_admin_reply(std::move(bytes)); },
               [&](caf::error& e) { out = make_error(ErrorCode::unavailable, system.render(e)); });
  return out;
}

Expected<nlohmann::json> run_case(const Config& c, double copy_rate) {
  std::error_code ec;
  std::filesystem::remove_all(c.dir, ec);
  std::filesystem::create_directories(c.dir, ec);
  auto options = std::make_shared<RuntimeOptions>();
  auto& s = options->setup;
  s.model = *training::model_preset("small");
  s.run.mode = archipelago::diloco::Mode::sync;
  s.run.learners = c.learners;
  s.run.inner_steps = 10;
  s.outer.fragments = c.fragments;
  s.outer.quorum = c.learners;
  s.outer.codec = messages::codec_name(c.codec);
  s.outer.downlink_codec = messages::codec_name(c.codec);
  options->run_dir = c.dir;
  options->store_sync = true;
  options->keep_versions = 2;

  // Fragments of equal size; zero parameters (the merge does not look at them).
  std::vector<int64_t> sizes(static_cast<size_t>(c.fragments), c.params / c.fragments);
  sizes.back() += c.params % c.fragments;
  // Pre-encoded updates: 4 distinct ones per fragment, reused by the learners in turn.
  const int distinct = std::min(c.learners, 4);
  std::vector<std::vector<std::vector<uint8_t>>> payloads(static_cast<size_t>(distinct));
  for (int k = 0; k < distinct; ++k) {
    std::mt19937 rng(static_cast<unsigned>(k + 1));
    std::normal_distribution<float> gauss(0.0f, 1e-3f * (1.0f + 0.1f * static_cast<float>(k)));
    for (int p = 0; p < c.fragments; ++p) {
      std::vector<float> delta(static_cast<size_t>(sizes[p]));
      for (auto& v : delta) v = gauss(rng);
      std::vector<uint8_t> encoded;
      if (Status ok = messages::encode_tensor(c.codec, delta.data(), delta.size(), encoded); !ok) return ok.error();
      payloads[static_cast<size_t>(k)].push_back(std::move(encoded));
    }
  }
  const int64_t rss_before_kb = status_kb("VmRSS");

  // One store (its own directory) and one syncer per shard, each owning fragments p mod shards.
  std::vector<std::shared_ptr<RuntimeOptions>> shard_options;
  std::vector<std::shared_ptr<storage::CheckpointStore>> stores;
  for (int k = 0; k < c.shards; ++k) {
    auto o = std::make_shared<RuntimeOptions>(*options);
    o->shard = {k, c.shards};
    if (c.shards > 1) o->run_dir = c.dir + "/shard-" + std::to_string(k);
    std::filesystem::create_directories(o->run_dir, ec);
    auto store = open_run_store(*o);
    if (!store) return store.error();
    stores.push_back(std::move(*store));
    shard_options.push_back(std::move(o));
  }
  auto owner = [&](int p) { return ShardOptions::owner(p, c.shards); };
  caf::actor_system_config config;
  config.set("scheduler.max-threads", size_t{2});
  config.set("logger.console-verbosity", caf::atom("quiet"));
  nlohmann::json rounds = nlohmann::json::array();
  int64_t peak_kb = 0;
  ResidentSampler::Sample at_peak;
  {
    caf::actor_system system{config};
    std::vector<caf::actor> store_actors, syncers;
    for (int k = 0; k < c.shards; ++k) {
      // θ0 (zeros) per shard, as each shard process builds its own; released once version 1 is durable.
      std::vector<std::vector<float>> zeros;
      for (int64_t n : sizes) zeros.emplace_back(static_cast<size_t>(n), 0.0f);
      auto initial = std::make_shared<InitialFragments>(std::move(zeros));
      store_actors.push_back(spawn_store_actor(system, stores[k], shard_options[k]->shard));
      syncers.push_back(spawn_syncer(system, SyncerSpec{shard_options[k], initial, store_actors.back()}));
      auto ready = Clock::now();
      while (true) {
        auto st = ask_admin_of(system, syncers.back(), 600);
        if (st && st->value("phase", "") == "ready") break;
        if (since(ready) > 300) return make_error(ErrorCode::unavailable, "the syncer did not get ready");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!initial->released()) return make_error(ErrorCode::inconsistent, "a ready syncer kept θ0");
    }

    caf::scoped_actor self{system};
    std::vector<Outbox> outboxes;
    for (int m = 0; m < c.learners; ++m) outboxes.emplace_back(learner_id(m));
    // Every learner joins every shard.
    for (int m = 0; m < c.learners; ++m) {
      auto join = outboxes[static_cast<size_t>(m)].wrap(
          messages::Join{learner_id(m), "bench", "bench", "cpu", 0, options->syncer.auth_token});
      if (!join) return join.error();
      for (auto& syncer : syncers) self->send(syncer, *join);
    }
    for (auto& syncer : syncers) {
      auto joined = ask_admin_of(system, syncer, 600);
      if (!joined || joined->value("active_learners", 0) != c.learners) {
        return make_error(ErrorCode::unavailable, "not every synthetic learner joined");
      }
    }
    drain(self);
    reset_peak_rss();
    ResidentSampler sampler;
    std::vector<uint64_t> versions(static_cast<size_t>(c.shards), 1);
    std::vector<double> fold_before(static_cast<size_t>(c.shards), 0);
    for (int r = 0; r < c.rounds; ++r) {
      const double cpu0 = process_cpu_s(), own0 = thread_cpu_s();
      const auto t0 = Clock::now();
      int64_t sent_bytes = 0;
      for (int m = 0; m < c.learners; ++m) {
        for (int p = 0; p < c.fragments; ++p) {
          const uint64_t version = versions[static_cast<size_t>(owner(p))];
          const auto& payload = payloads[static_cast<size_t>(m % distinct)][static_cast<size_t>(p)];
          auto chunks = outboxes[static_cast<size_t>(m)].wrap_tensor(
              c.codec, static_cast<uint64_t>(sizes[p]), payload, [&](messages::TensorChunk chunk) -> messages::Message {
                messages::FragmentUpdate u;
                u.learner_id = learner_id(m);
                u.fragment_id = static_cast<uint32_t>(p);
                u.base_version = version;
                u.inner_steps = 10;
                u.tokens = static_cast<uint64_t>(10 * s.inner.batch_size * s.model.seq_len);
                u.round = static_cast<uint64_t>(r);
                u.from_step = static_cast<uint64_t>(10 * r);
                u.to_step = static_cast<uint64_t>(10 * (r + 1));
                u.chunk = std::move(chunk);
                return u;
              });
          if (!chunks) return chunks.error();
          for (auto& bytes : *chunks) {
            sent_bytes += static_cast<int64_t>(bytes.size());
            self->send(syncers[static_cast<size_t>(owner(p))], std::move(bytes));
          }
          // One update in flight per shard: once each shard has one (fragments p mod shards), wait for
          // their answers. An answer comes after the update's chunks: the update has been folded (or
          // refused). A `set` of a key that is not tunable is refused at once and changes nothing: a
          // cheaper echo than status. One shard: one update in flight at a time.
          if ((p + 1) % c.shards != 0 && p != c.fragments - 1) continue;
          for (int q = p - p % c.shards; q <= p; ++q) {
            bool answered = false;
            self->request(syncers[static_cast<size_t>(owner(q))], std::chrono::seconds(600), tune_atom::value,
                          std::string("bench.echo"), std::string())
                .receive([&](bool, const std::string&, const std::string&) { answered = true; },
                         [&](caf::error&) {});
            if (!answered) return make_error(ErrorCode::unavailable, "the syncer did not answer");
          }
        }
        drain(self);
      }
      const double merge_s = since(t0);
      const auto t1 = Clock::now();
      int64_t broadcast_bytes = 0, commits = 0, rejected = 0, clipped = 0;
      double fold_s = 0;
      for (int k = 0; k < c.shards; ++k) {
        auto& version = versions[static_cast<size_t>(k)];
        nlohmann::json last;
        while (true) {
          auto st = ask_admin_of(system, syncers[static_cast<size_t>(k)], 600);
          if (!st) return st.error();
          broadcast_bytes += drain(self);
          // Every fragment of the round committed: nothing pending, nothing in flight.
          if (st->value("version", uint64_t{0}) > version && !st->value("commit_in_flight", true) &&
              st->value("pending", int64_t{1}) == 0) {
            last = *st;
            break;
          }
          if (since(t1) > 600) return make_error(ErrorCode::unavailable, "no commit within 600 s");
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        version = last.value("version", version + 1);
        commits += last.value("commits", int64_t{0});
        rejected += last.value("rejected_total", int64_t{0});
        clipped += last["screening"].value("clipped", int64_t{0});
        fold_s += last.value("fold_s", 0.0) - fold_before[static_cast<size_t>(k)];  // the syncers' norms and folds alone
        fold_before[static_cast<size_t>(k)] = last.value("fold_s", 0.0);
      }
      const double commit_s = since(t1);
      const double syncer_cpu_s = (process_cpu_s() - cpu0) - (thread_cpu_s() - own0);
      const int updates = c.learners * c.fragments;
      // One fused pass per update over its fragment: read the int4 payload, read and write the fp32
      // sum; memcpy moves 2 bytes of traffic per byte copied.
      const double pass_bytes = static_cast<double>(c.params) * (0.5 + 8.0) * c.learners;
      const double limit_s = pass_bytes / (2.0 * copy_rate);
      rounds.push_back({{"round", r + 1}, {"versions", versions}, {"updates", updates},
                        {"commits", commits},
                        {"updates_per_s", updates / merge_s}, {"merge_s", merge_s}, {"limit_s", limit_s},
                        {"merge_vs_limit", merge_s / limit_s}, {"fold_s", fold_s}, {"fold_vs_limit", fold_s / limit_s},
                        {"commit_s", commit_s},
                        {"syncer_cpu_s", syncer_cpu_s}, {"uplink_bytes", sent_bytes},
                        {"rejected", rejected}, {"clipped", clipped}});
      std::fprintf(stderr, "  M=%d params=%lld round %d: %.1f updates/s, merge %.2f s (limit %.2f s, %.1fx; "
                   "folds %.2f s, %.1fx), commit %.2f s, syncer cpu %.2f s\n", c.learners,
                   static_cast<long long>(c.params), r + 1, updates / merge_s, merge_s, limit_s, merge_s / limit_s,
                   fold_s, fold_s / limit_s, commit_s, syncer_cpu_s);
    }
    peak_kb = status_kb("VmHWM");
    at_peak = sampler.stop();
    for (auto& syncer : syncers) self->send_exit(syncer, caf::exit_reason::user_shutdown);
    for (auto& store_actor : store_actors) self->send_exit(store_actor, caf::exit_reason::user_shutdown);
  }
  const double model_copy_kb = static_cast<double>(c.params) * 4 / 1024;
  nlohmann::json out = {{"params", c.params}, {"learners", c.learners}, {"fragments", c.fragments}, {"shards", c.shards},
                        {"codec", messages::codec_name(c.codec)}, {"memcpy_gb_per_s", copy_rate / 1e9},
                        {"rss_before_mib", rss_before_kb / 1024}, {"peak_rss_mib", peak_kb / 1024},
                        {"peak_above_before_fp32_copies", (peak_kb - rss_before_kb) / model_copy_kb},
                        // The highest 5 ms sample of resident memory and what made it up, in fp32 copies
                        // (absolute, not above the start): malloc's bytes in use, the bytes it held
                        // free, and file-backed pages (libraries, files read through mmap).
                        {"sampled_peak", {{"resident_fp32_copies", at_peak.resident / 1024 / model_copy_kb},
                                          {"malloc_used_fp32_copies", at_peak.malloc_used / 1024 / model_copy_kb},
                                          {"malloc_free_fp32_copies", at_peak.malloc_free / 1024 / model_copy_kb},
                                          {"file_backed_fp32_copies", at_peak.file / 1024 / model_copy_kb}}},
                        {"rss_before_fp32_copies", rss_before_kb / model_copy_kb},
                        {"rounds", rounds}};
  std::filesystem::remove_all(c.dir, ec);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> params{25'000'000, 250'000'000}, learners{4, 16, 64}, shard_counts{1};
  Config base;
  std::string codec = "int4", out_path;
  base.dir = (std::filesystem::temp_directory_path() / "bench-syncer").string();
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "%s: a value is missing (flags: --params --learners --fragments --rounds --shards "
                   "--codec --dir --out)\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--params") params = parse_list(value);
    else if (flag == "--learners") learners = parse_list(value);
    else if (flag == "--fragments") base.fragments = std::stoi(value);
    else if (flag == "--rounds") base.rounds = std::stoi(value);
    else if (flag == "--shards") shard_counts = parse_list(value);
    else if (flag == "--codec") codec = value;
    else if (flag == "--dir") base.dir = value;
    else if (flag == "--out") out_path = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  auto parsed = messages::parse_codec(codec);
  if (!parsed) {
    std::fprintf(stderr, "--codec: %s\n", parsed.error().to_string().c_str());
    return 2;
  }
  base.codec = *parsed;
  LogOptions log;
  log.level = "error";
  init_logging(log);
  const double rate = memcpy_rate();
  std::fprintf(stderr, "memcpy: %.2f GB/s\n", rate / 1e9);
  for (int64_t n : params) {
    for (int64_t m : learners) {
      for (int64_t shards : shard_counts) {
        Config c = base;
        c.params = n;
        c.learners = static_cast<int>(m);
        c.shards = static_cast<int>(shards);
        auto result = run_case(c, rate);
        if (!result) {
          std::fprintf(stderr, "params %lld, %lld learners, %lld shards: %s\n", static_cast<long long>(n),
                       static_cast<long long>(m), static_cast<long long>(shards), result.error().to_string().c_str());
          return 1;
        }
        std::printf("%s\n", result->dump().c_str());
        std::fflush(stdout);
        if (!out_path.empty()) std::ofstream(out_path, std::ios::app) << result->dump() << "\n";
      }
    }
  }
  return 0;
}

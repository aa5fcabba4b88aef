// bench_store: what a synced checkpoint commit costs next to the plain-file floor.
//
//   bench_store [--dir DIR] [--mb 100] [--fragments 8] [--repeats 9] [--settle-ms 250]
//
// --settle-ms pauses before each timed operation so that it does not pay for the previous one's
// background work (RocksDB flushes, unlinking garbage blob files): checkpoints come tens of seconds
// apart in training. --settle-ms 0 measures back-to-back commits instead.
// Per round, in the same process and directory: (1) write the version's bytes to a file and
// fdatasync it, (2) commit a version whose every fragment changed, (3) commit a version with one
// fragment changed, passing all fragments (the unchanged ones deduplicate by hash), (4) the same
// with the unchanged fragments carried by id (no bytes passed, nothing hashed). Prints each round
// and the medians; ratios are against the medians of (1) and (2).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "storage/checkpoint_store.hpp"

using namespace archipelago;
using namespace archipelago::storage;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Makes every byte of the fragment new so that nothing deduplicates (fp32-like noise).
void refill(Blob& blob, uint64_t seed) {
  uint64_t state = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i + 8 <= blob.size(); i += 8) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    std::memcpy(blob.data() + i, &state, 8);
  }
}

// Changes one fragment's content cheaply (its first 8 bytes) so its hash changes.
void touch(Blob& blob, uint64_t stamp) { std::memcpy(blob.data(), &stamp, sizeof(stamp)); }

double write_file_fdatasync(const std::string& path, const std::map<uint32_t, Blob>& fragments) {
  auto start = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  for (const auto& [id, blob] : fragments) {
    size_t done = 0;
    while (done < blob.size()) {
      ssize_t wrote = ::write(fd, blob.data() + done, blob.size() - done);
      if (wrote <= 0) return -1;
      done += static_cast<size_t>(wrote);
    }
  }
  ::fdatasync(fd);
  ::close(fd);
  double elapsed = seconds_since(start);
  ::unlink(path.c_str());
  return elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::filesystem::temp_directory_path().string();
  size_t megabytes = 100, fragment_count = 8, repeats = 9, settle_ms = 250;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--dir") dir = argv[i + 1];
    else if (flag == "--mb") megabytes = std::stoul(argv[i + 1]);
    else if (flag == "--fragments") fragment_count = std::stoul(argv[i + 1]);
    else if (flag == "--repeats") repeats = std::stoul(argv[i + 1]);
    else if (flag == "--settle-ms") settle_ms = std::stoul(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 1;
    }
  }
  init_logging(LogOptions{"bench", "warn", ""});
  std::string root = dir + "/bench_store_" + std::to_string(::getpid());
  std::filesystem::create_directories(root);

  VersionData version;
  size_t fragment_bytes = megabytes * 1000 * 1000 / fragment_count;
  for (uint32_t f = 0; f < fragment_count; ++f) {
    version.fragments[f].resize(fragment_bytes);
    refill(version.fragments[f], f + 1);
  }
  StoreOptions options;
  options.sync = true;
  options.retention.keep_last = 2;
  auto store = CheckpointStore::open(root + "/store", options);
  if (!store.ok()) {
    std::fprintf(stderr, "open: %s\n", store.error().to_string().c_str());
    return 1;
  }

  std::printf("%zu MB in %zu fragments, sync on, dir %s\n", megabytes, fragment_count, root.c_str());
  std::printf("%5s %12s %12s %14s %14s\n", "round", "file+fdsync", "full commit", "1-frag (bytes)", "1-frag (carry)");
  std::vector<double> file_times, full_times, one_times, carry_times;
  uint64_t next_version = 1;
  for (size_t round = 0; round < repeats; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    file_times.push_back(write_file_fdatasync(root + "/baseline.bin", version.fragments));

    for (auto& [id, blob] : version.fragments) touch(blob, next_version * 1000 + id);
    version.version = next_version++;
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    auto start = Clock::now();
    auto full = (*store)->commit(version);
    full_times.push_back(seconds_since(start));
    if (!full.ok() || full->blobs_written != fragment_count) {
      std::fprintf(stderr, "full commit: %s\n", full.ok() ? "deduplicated unexpectedly" : full.error().to_string().c_str());
      return 1;
    }

    touch(version.fragments[round % fragment_count], next_version * 1000 + 999);
    version.version = next_version++;
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    start = Clock::now();
    auto one = (*store)->commit(version);
    one_times.push_back(seconds_since(start));
    if (!one.ok() || one->blobs_written != 1) {
      std::fprintf(stderr, "one-fragment commit: %s\n", one.ok() ? "wrote more than one blob" : one.error().to_string().c_str());
      return 1;
    }
    uint32_t changed = static_cast<uint32_t>((round + 1) % fragment_count);
    VersionData carried;
    carried.version = next_version++;
    touch(version.fragments[changed], carried.version * 1000 + 999);
    carried.fragments[changed] = version.fragments[changed];  // copied outside the timed region
    for (uint32_t f = 0; f < fragment_count; ++f)
      if (f != changed) carried.carried_fragments.push_back(f);
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    start = Clock::now();
    auto carry = (*store)->commit(carried);
    carry_times.push_back(seconds_since(start));
    if (!carry.ok() || carry->blobs_written != 1) {
      std::fprintf(stderr, "carried commit: %s\n", carry.ok() ? "wrote more than one blob" : carry.error().to_string().c_str());
      return 1;
    }
    std::printf("%5zu %11.3fs %11.3fs %13.3fs %13.3fs\n", round, file_times.back(), full_times.back(), one_times.back(),
                carry_times.back());
  }
  double file = median(file_times), full = median(full_times), one = median(one_times), carry = median(carry_times);
  std::printf("median: file+fdatasync %.3fs, full commit %.3fs, one-fragment commit %.3fs (bytes) %.3fs (carried)\n",
              file, full, one, carry);
  std::printf("full commit / file+fdatasync = %.2fx (target <= 1.5x)\n", full / file);
  std::printf("one-fragment commit / full commit = %.2fx passing all bytes, %.2fx carrying unchanged (target <= 0.2x)\n",
              one / full, carry / full);
  store->reset();
  std::filesystem::remove_all(root);
  return 0;
}

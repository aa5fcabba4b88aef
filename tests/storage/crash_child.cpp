// storage_crash_child <store path>: opens the store, continues from the latest committed version and
// commits forever (pinning every tenth version, unpinning the previous tenth) until the crash test
// SIGKILLs it. It reports on stdout, unbuffered: "ready <latest>" once open, "committed <v>" after
// each commit returned success, so the parent knows which versions were acknowledged.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/log.hpp"
#include "tests/storage/crash_workload.hpp"

using namespace archipelago;
using namespace archipelago::storage;

namespace {

void report(const std::string& line) {
  std::string text = line + "\n";
  if (::write(STDOUT_FILENO, text.data(), text.size()) != static_cast<ssize_t>(text.size())) _exit(3);
}

int fail(const std::string& what, const Error& error) {
  std::fprintf(stderr, "crash child: %s: %s\n", what.c_str(), error.to_string().c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: storage_crash_child <store path>\n");
    return 1;
  }
  init_logging(LogOptions{"crash-child", "warn", ""});
  auto store = CheckpointStore::open(argv[1], testing::crash_store_options());
  if (!store.ok()) return fail("open", store.error());
  // Continue from the high-water mark: a version number is never reused, even one lost to damage.
  uint64_t version = (*store)->high_water_version();
  report("ready " + std::to_string(version));
  for (;;) {
    ++version;
    auto committed = (*store)->commit(testing::crash_commit(version));
    if (!committed.ok()) return fail("commit " + std::to_string(version), committed.error());
    report("committed " + std::to_string(version));
    if (version % 10 == 0) {
      if (Status pinned = (*store)->pin(version); !pinned.ok()) return fail("pin", pinned.error());
      if (version >= 20) {
        // not_found: a kill between commit and pin left version-10 unpinned, and retention took it.
        Status unpinned = (*store)->unpin(version - 10);
        if (!unpinned.ok() && unpinned.error().code != ErrorCode::not_found) return fail("unpin", unpinned.error());
      }
    }
  }
}

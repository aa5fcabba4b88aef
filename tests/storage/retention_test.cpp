// plan_retention is a pure function: table-driven cases.
#include "storage/retention.hpp"

#include <doctest/doctest.h>

namespace archipelago::storage {
namespace {

TEST_CASE("plan_retention keeps the newest K and every pinned version") {
  struct Case {
    std::set<uint64_t> versions;
    std::set<uint64_t> pinned;
    uint32_t keep_last;
    std::vector<uint64_t> drop;
  };
  const std::vector<Case> cases = {
      {{}, {}, 3, {}},
      {{1, 2, 3}, {}, 0, {}},             // keep_last 0 keeps everything
      {{1, 2, 3}, {}, 3, {}},
      {{1, 2, 3, 4, 5}, {}, 2, {1, 2, 3}},
      {{1, 2, 3, 4, 5}, {2}, 2, {1, 3}},
      {{1, 2, 3, 4, 5}, {5}, 2, {1, 2, 3}},  // a pin among the newest K rescues nothing extra
      {{1, 2, 3, 4, 5}, {1, 2, 3}, 1, {4}},
      {{7, 30, 31}, {}, 1, {7, 30}},
  };
  for (const Case& c : cases) {
    RetentionDecision decision = plan_retention(c.versions, c.pinned, RetentionPolicy{c.keep_last});
    CHECK(decision.drop == c.drop);
    CHECK(!decision.reason.empty());
  }
}

}  // namespace
}  // namespace archipelago::storage

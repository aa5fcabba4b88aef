// diloco/learner_id: ids and indices round-trip; anything that is not "learner-<digits>" is -1.
#include <doctest/doctest.h>

#include "diloco/learner_id.hpp"

using namespace archipelago::diloco;

TEST_CASE("learner ids: an index's id parses back to it, and a malformed id is -1") {
  for (int m : {0, 1, 9, 10, 4095}) CHECK(learner_index(learner_id(m)) == m);
  CHECK(learner_ids(3) == std::vector<std::string>{"learner-0", "learner-1", "learner-2"});
  CHECK(learner_ids(0).empty());
  for (const char* bad : {"", "learner-", "learner-x", "learner--1", "Learner-1", "learner-1a", "node-1", "learner-99999999999"}) {
    CAPTURE(bad);
    CHECK(learner_index(bad) == -1);
  }
}

// diloco/mode: names round-trip, unknown names are refused with the known ones, and each rule
// holds for exactly the modes DESIGN.md gives it.
#include <doctest/doctest.h>

#include <set>

#include "diloco/mode.hpp"

using namespace archipelago;
using diloco::Mode;

TEST_CASE("mode: every name parses back to its mode, and an unknown one is refused with the list") {
  std::set<std::string> names;
  for (Mode m : diloco::all_modes()) {
    auto parsed = diloco::parse_mode(diloco::mode_name(m));
    REQUIRE(parsed.ok());
    CHECK(*parsed == m);
    names.insert(diloco::mode_name(m));
  }
  CHECK(names == std::set<std::string>{"sync", "decoupled", "async", "ddp"});
  auto bad = diloco::parse_mode("Sync");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().code == ErrorCode::invalid_argument);
  CHECK(bad.error().reason.find("sync, decoupled, async, ddp") != std::string::npos);
  CHECK_FALSE(diloco::parse_mode("").ok());
}

TEST_CASE("mode: the reference engine runs sync and ddp, the actor runtime every mode") {
  for (Mode m : diloco::all_modes()) {
    CHECK(diloco::check_engine_mode(diloco::Engine::actors, m).ok());
  }
  CHECK(diloco::check_engine_mode(diloco::Engine::reference, Mode::sync).ok());
  CHECK(diloco::check_engine_mode(diloco::Engine::reference, Mode::ddp).ok());
  auto refused = diloco::check_engine_mode(diloco::Engine::reference, Mode::decoupled);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().reason == "the reference engine runs sync, ddp, not decoupled");
  CHECK_FALSE(diloco::check_engine_mode(diloco::Engine::reference, Mode::async).ok());
  CHECK(*diloco::parse_engine("reference") == diloco::Engine::reference);
  CHECK_FALSE(diloco::parse_engine("gloo").ok());
}

TEST_CASE("mode: each rule holds for the modes that have it") {
  struct Row {
    Mode mode;
    bool staggered, dynamic, whole_rounds, barrier, numbered, on_arrival, data_parallel, shardable;
  };
  const Row table[] = {
      {Mode::sync, false, false, true, true, false, false, false, false},
      {Mode::decoupled, true, false, false, false, true, false, false, true},
      {Mode::async, true, true, false, false, false, true, false, true},
      {Mode::ddp, false, false, true, false, false, true, true, false},
  };
  for (const Row& r : table) {
    CAPTURE(diloco::mode_name(r.mode));
    CHECK(diloco::staggered(r.mode) == r.staggered);
    CHECK(diloco::dynamic_local_steps(r.mode) == r.dynamic);
    CHECK(diloco::whole_rounds(r.mode) == r.whole_rounds);
    CHECK(diloco::round_barrier(r.mode) == r.barrier);
    CHECK(diloco::numbered_rounds(r.mode) == r.numbered);
    CHECK(diloco::merge_on_arrival(r.mode) == r.on_arrival);
    CHECK(diloco::data_parallel(r.mode) == r.data_parallel);
    CHECK(diloco::shardable(r.mode) == r.shardable);
  }
}

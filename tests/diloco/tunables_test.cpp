// diloco/tunables: every key is a key of config/default.toml under one name, each bound is enforced
// at its edge, and the names the keys had before are refused with the one name.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>

#include "diloco/tunables.hpp"

using namespace archipelago;
using diloco::Tunable;
using diloco::TunableKind;

namespace {

constexpr int kLearners = 4;

// "section.key" for every `key = value` line under a `[section]` header of config/default.toml.
std::set<std::string> default_config_keys() {
  std::ifstream in(std::string(ARCHIPELAGO_SOURCE_DIR) + "/config/default.toml");
  REQUIRE(in.good());
  std::set<std::string> keys;
  std::string section, line;
  while (std::getline(in, line)) {
    const size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    if (line[start] == '[') {
      section = line.substr(start + 1, line.find(']') - start - 1);
      continue;
    }
    const size_t equals = line.find('=');
    if (equals == std::string::npos) continue;
    std::string key = line.substr(start, equals - start);
    key.erase(key.find_last_not_of(" \t") + 1);
    keys.insert(section + "." + key);
  }
  return keys;
}

std::string text_of(double value) {
  std::ostringstream out;
  out.precision(17);
  out << value;
  return out.str();
}

const Tunable& tunable(const char* key) {
  const Tunable* t = diloco::find_tunable(key);
  REQUIRE_MESSAGE(t != nullptr, key);
  return *t;
}

}  // namespace

TEST_CASE("tunables: every key is a key of config/default.toml, under one name") {
  const std::set<std::string> config_keys = default_config_keys();
  REQUIRE(config_keys.count("outer.grace_max_s") == 1);  // the scan reads the file's sections
  std::set<std::string> names;
  for (const Tunable& t : diloco::tunables()) {
    CHECK_MESSAGE(config_keys.count(t.key) == 1, t.key);
    CHECK_MESSAGE(names.insert(t.key).second, t.key);
    CHECK_FALSE(t.help.empty());
    CHECK(diloco::find_tunable(t.key) == &t);
    CHECK(diloco::tunable_names().find(t.key) != std::string::npos);
  }
  CHECK(diloco::tunable_names() ==
        "outer.lr, outer.momentum, outer.quorum, outer.codec, outer.downlink_codec, outer.grace_max_s, "
        "outer.grace_gamma, outer.max_staleness, train.inner_steps");
  CHECK(diloco::find_tunable("model.preset") == nullptr);
}

TEST_CASE("tunables: each key's kind and bounds") {
  struct Case {
    const char* key;
    TunableKind kind;
    const char* range;  // with 4 learners
  };
  const Case cases[] = {
      {"outer.lr", TunableKind::real, "(0, 10]"},
      {"outer.momentum", TunableKind::real, "[0, 1)"},
      {"outer.quorum", TunableKind::whole, "[1, 4]"},
      {"outer.codec", TunableKind::codec, "fp32, bf16, int8, int4"},
      {"outer.downlink_codec", TunableKind::codec, "fp32, bf16, int8, int4"},
      {"outer.grace_max_s", TunableKind::real, "[0, 60]"},
      {"outer.grace_gamma", TunableKind::real, "[0, 10]"},
      {"outer.max_staleness", TunableKind::whole, "[0, 1000]"},
      {"train.inner_steps", TunableKind::whole, "[1, 100000]"},
  };
  REQUIRE(diloco::tunables().size() == std::size(cases));
  for (const Case& c : cases) {
    CAPTURE(c.key);
    const Tunable& t = tunable(c.key);
    CHECK(t.kind == c.kind);
    CHECK(diloco::tunable_range(t, kLearners) == c.range);
  }
  CHECK(diloco::tunable_range(tunable("outer.quorum"), 7) == "[1, 7]");  // the run's learners, at check time
}

TEST_CASE("tunables: every number bound holds at its edge, and non-numbers are refused") {
  for (const Tunable& t : diloco::tunables()) {
    if (t.kind == TunableKind::codec) continue;
    CAPTURE(t.key);
    const double max = t.max_is_learners ? kLearners : t.max;
    // Whole keys step by 1; real keys by a hair past the bound.
    const double below = t.kind == TunableKind::whole ? t.min - 1 : t.min - 1e-9;
    const double above = t.kind == TunableKind::whole ? max + 1 : max + 1e-9 * std::max(1.0, max);
    CHECK(diloco::check_tunable_number(t, text_of(t.min), kLearners).ok() == !t.min_open);
    CHECK(diloco::check_tunable_number(t, text_of(max), kLearners).ok() == !t.max_open);
    CHECK(diloco::check_tunable_value(t, t.min, kLearners).ok() == !t.min_open);
    CHECK(diloco::check_tunable_value(t, max, kLearners).ok() == !t.max_open);
    auto inside = diloco::check_tunable_number(t, text_of(t.kind == TunableKind::whole ? t.min + 1 : (t.min + max) / 2), kLearners);
    REQUIRE(inside.ok());
    CHECK(*inside > t.min);
    for (double outside : {below, above}) {
      auto refused = diloco::check_tunable_number(t, text_of(outside), kLearners);
      REQUIRE_FALSE(refused.ok());
      CHECK(refused.error().code == ErrorCode::invalid_argument);
      CHECK(refused.error().reason.find(t.key) == 0);
      CHECK(refused.error().reason.find(diloco::tunable_range(t, kLearners)) != std::string::npos);
      CHECK_FALSE(diloco::check_tunable_value(t, outside, kLearners).ok());
    }
    for (const char* text : {"", "abc", "1x", "nan", "inf", "-inf"}) {
      auto refused = diloco::check_tunable_number(t, text, kLearners);
      REQUIRE_FALSE(refused.ok());
      CHECK(refused.error().reason == t.key + ": '" + text + "' is not a finite number");
    }
    CHECK_FALSE(diloco::check_tunable_choice(t, "int8").ok());
  }
}

TEST_CASE("tunables: whole keys refuse 2.5, and the messages say the range as the console shows it") {
  for (const Tunable& t : diloco::tunables()) {
    if (t.kind != TunableKind::whole) continue;
    CAPTURE(t.key);
    auto refused = diloco::check_tunable_number(t, "2.5", kLearners);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().reason.find("must be a whole number in") != std::string::npos);
    CHECK(diloco::check_tunable_number(t, "2", kLearners).ok());
  }
  auto lr = diloco::check_tunable_number(tunable("outer.lr"), "-1", kLearners);
  REQUIRE_FALSE(lr.ok());
  CHECK(lr.error().reason == "outer.lr must be in (0, 10], not -1");
  auto quorum = diloco::check_tunable_number(tunable("outer.quorum"), "5", kLearners);
  REQUIRE_FALSE(quorum.ok());
  CHECK(quorum.error().reason == "outer.quorum must be a whole number in [1, 4], not 5");
  CHECK(diloco::check_tunable_number(tunable("outer.quorum"), "5", 5).ok());
  auto grace = diloco::check_tunable_value(tunable("outer.grace_max_s"), 100, kLearners);
  REQUIRE_FALSE(grace.ok());
  CHECK(grace.error().reason == "outer.grace_max_s must be in [0, 60], not 100");
}

TEST_CASE("tunables: codec keys take the configuration's codec names, nothing else") {
  for (const char* key : {"outer.codec", "outer.downlink_codec"}) {
    CAPTURE(key);
    const Tunable& t = tunable(key);
    for (const char* name : {"fp32", "bf16", "int8", "int4"}) CHECK(diloco::check_tunable_choice(t, name).ok());
    auto refused = diloco::check_tunable_choice(t, "int3");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
    CHECK(refused.error().reason == std::string(key) + " must be one of fp32, bf16, int8, int4, not 'int3'");
    CHECK_FALSE(diloco::check_tunable_choice(t, "").ok());
    CHECK_FALSE(diloco::check_tunable_choice(t, "INT8").ok());
    CHECK_FALSE(diloco::check_tunable_number(t, "8", kLearners).ok());
    CHECK_FALSE(diloco::check_tunable_value(t, 8, kLearners).ok());
  }
}

TEST_CASE("tunables: a key is found by its one name, an old name is refused naming it, another key listing all") {
  auto found = diloco::lookup_tunable("outer.grace_max_s");
  REQUIRE(found.ok());
  CHECK((*found)->key == "outer.grace_max_s");
  const std::pair<const char*, const char*> renamed[] = {
      {"syncer.grace_max_s", "outer.grace_max_s"},
      {"syncer.grace_gamma", "outer.grace_gamma"},
      {"syncer.max_staleness", "outer.max_staleness"},
  };
  for (auto [old_name, one_name] : renamed) {
    CAPTURE(old_name);
    CHECK(diloco::find_tunable(old_name) == nullptr);
    REQUIRE(diloco::renamed_tunable(old_name) != nullptr);
    CHECK(std::string(diloco::renamed_tunable(old_name)) == one_name);
    CHECK(diloco::find_tunable(one_name) != nullptr);
    auto refused = diloco::lookup_tunable(old_name);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
    CHECK(refused.error().reason == "'" + std::string(old_name) + "' is called '" + one_name + "'");
  }
  CHECK(diloco::renamed_tunable("outer.grace_max_s") == nullptr);
  auto unknown = diloco::lookup_tunable("model.preset");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.error().reason == "'model.preset' is not runtime-tunable (" + diloco::tunable_names() + ")");
}

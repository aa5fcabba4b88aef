// diloco/version_manifest.hpp: a manifest survives its encoding, an old manifest reads with
// defaults, and a damaged one is refused with a reason that names the key.
#include <doctest/doctest.h>

#include <cmath>

#include "diloco/version_manifest.hpp"

using namespace archipelago;
using diloco::Contribution;
using diloco::VersionManifest;

namespace {

VersionManifest sample() {
  VersionManifest m;
  m.version = 7;
  m.mode = diloco::Mode::decoupled;
  m.fragments = {1};
  m.carried = {0, 2};
  m.fragment_versions = {5, 7, 6};
  m.contributors = {Contribution{"learner-0", 1, 5, 0.5, 3, true, 1, 40, 40960, 4.25},
                    Contribution{"learner-3", 1, 4, 0.5, 3, false, 2, 36, 36864, 4.5}};
  m.screening_norms = {{{"learner-0", 1.5}}, {}, {{"learner-1", 0.25}, {"learner-3", 2.0}}};
  m.bytes_from_learners = 123456;
  m.bytes_to_learners = 654321;
  m.outer_state = nlohmann::json::array({{{"kind", "nesterov"}}, {{"kind", "nesterov"}}, {{"kind", "nesterov"}}});
  m.accounting = {{"learners", {{"learner-0", {{"steps_merged_fragment0", 80}}}}}, {"ledger", {{"wall_s", 12.5}}}};
  return m;
}

}  // namespace

TEST_CASE("version manifest: every field survives encode and decode") {
  const VersionManifest m = sample();
  auto back = VersionManifest::decode(m.encode());
  REQUIRE(back);
  CHECK(back->version == 7);
  CHECK(back->mode == diloco::Mode::decoupled);
  CHECK_FALSE(back->initial);
  CHECK(back->fragments == m.fragments);
  CHECK(back->carried == m.carried);
  CHECK(back->fragment_versions == m.fragment_versions);
  CHECK(back->contributors == m.contributors);
  CHECK(back->screening_norms == m.screening_norms);
  CHECK(back->bytes_from_learners == 123456);
  CHECK(back->bytes_to_learners == 654321);
  CHECK(back->outer_state == m.outer_state);
  CHECK(back->accounting == m.accounting);
  CHECK(back->version_of(0) == 5);
  CHECK(back->version_of(2) == 6);
  CHECK(back->version_of(9) == 7);  // a fragment the manifest does not name: the version itself
}

TEST_CASE("version manifest: an initial version is marked as one and carries no contributors") {
  VersionManifest m = sample();
  m.initial = true;
  m.version = 1;
  m.fragment_versions = {1, 1, 1};
  const auto text = m.encode();
  CHECK(nlohmann::json::parse(text).value("kind", "") == "initial");
  CHECK_FALSE(nlohmann::json::parse(text).contains("contributors"));
  auto back = VersionManifest::decode(text);
  REQUIRE(back);
  CHECK(back->initial);
  CHECK(back->contributors.empty());
}

TEST_CASE("version manifest: a manifest of an older build reads with defaults, unknown keys are ignored") {
  auto back = VersionManifest::decode(R"({"version": 3, "mode": "sync", "fragments": [0], "future_key": {"x": 1}})");
  REQUIRE(back);
  CHECK(back->version == 3);
  CHECK(back->mode == diloco::Mode::sync);
  CHECK(back->carried.empty());
  CHECK(back->fragment_versions.empty());
  CHECK(back->version_of(0) == 3);
  CHECK(back->screening_norms.empty());
  CHECK(back->accounting.is_object());
  CHECK(back->outer_state.is_array());
}

TEST_CASE("version manifest: damage is refused with the key named") {
  struct Case {
    const char* text;
    ErrorCode code;
    const char* names;
  };
  const Case cases[] = {
      {"not json", ErrorCode::corrupt, "not a JSON object"},
      {"[1, 2]", ErrorCode::corrupt, "not a JSON object"},
      {R"({"version": "seven"})", ErrorCode::corrupt, "'version'"},
      {R"({"version": 2, "mode": "lockstep"})", ErrorCode::corrupt, "'mode'"},
      {R"({"version": 2, "carried": [0, "one"]})", ErrorCode::corrupt, "'carried'"},
      {R"({"version": 2, "contributors": [{"learner": 4}]})", ErrorCode::corrupt, "contributors: 'learner'"},
      {R"({"version": 2, "screening_norms": [{"learner-0": "big"}]})", ErrorCode::corrupt, "'screening_norms'"},
      {R"({"version": 2, "accounting": []})", ErrorCode::corrupt, "'accounting'"},
      {R"({"version": 2, "fragments": [1], "carried": [1]})", ErrorCode::inconsistent, "both changed and carried"},
      {R"({"version": 2, "fragment_versions": [2, 3]})", ErrorCode::inconsistent, "above version 2"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    auto decoded = VersionManifest::decode(c.text);
    REQUIRE_FALSE(decoded);
    CHECK(decoded.error().code == c.code);
    CHECK(decoded.error().reason.find(c.names) != std::string::npos);
  }
}

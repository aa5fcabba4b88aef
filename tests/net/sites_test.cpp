// Sites and links config: the shipped example, direction rules, defaults, and one case per error.
#include <string>

#include <doctest/doctest.h>

#include "net/sites.hpp"

using namespace archipelago;
using namespace archipelago::net;

namespace {

Expected<SiteTopology> parse(const std::string& text) { return parse_sites(text, "test.toml"); }

const char* kTwoSites = "[sites.a]\n[sites.b]\n";

}  // namespace

TEST_CASE("config/sites/three-sites.toml: three sites, the hub coordinates, links are symmetric") {
  auto topology = load_sites_file(ARCHIPELAGO_SOURCE_DIR "/config/sites/three-sites.toml");
  REQUIRE_MESSAGE(topology.ok(), (topology.ok() ? "" : topology.error().to_string()));
  REQUIRE(topology->sites().size() == 3);
  CHECK(topology->sites()[0].name == "east");  // name order
  REQUIRE(topology->coordinator() != nullptr);
  CHECK(topology->coordinator()->name == "hub");
  CHECK(topology->coordinator()->address == "10.77.0.1:4242");
  CHECK(topology->find("west")->role == SiteRole::node);
  CHECK(topology->find("north") == nullptr);

  struct Case { const char* from; const char* to; double mbit; double ms; };
  const Case cases[] = {
      {"hub", "east", 100, 25}, {"east", "hub", 100, 25}, {"hub", "west", 50, 40},
      {"west", "hub", 50, 40},  {"east", "west", 20, 60}, {"west", "east", 20, 60},
  };
  for (const auto& c : cases) {
    CAPTURE(c.from);
    CAPTURE(c.to);
    const LinkSpec spec = topology->link(c.from, c.to);
    CHECK(spec.bandwidth_bits_per_s == doctest::Approx(c.mbit * 1e6));
    CHECK(spec.latency_s == doctest::Approx(c.ms / 1e3));
  }
  CHECK(topology->link("hub", "hub").pass_through());
  CHECK(topology->link("hub", "north").pass_through());
}

TEST_CASE("both directions given: each key is its own direction, and omitted fields are unlimited / zero") {
  auto topology = parse(std::string(kTwoSites) + "[sites.c]\n"
                                                 "[links.a-b]\nbandwidth_mbit = 10\nlatency_ms = 5\n"
                                                 "[links.b-a]\nbandwidth_mbit = 2.5\n"
                                                 "[links.a-c]\nlatency_ms = 7.5\n");
  REQUIRE(topology.ok());
  CHECK(topology->link("a", "b").bandwidth_bits_per_s == doctest::Approx(10e6));
  CHECK(topology->link("a", "b").latency_s == doctest::Approx(0.005));
  CHECK(topology->link("b", "a").bandwidth_bits_per_s == doctest::Approx(2.5e6));
  CHECK(topology->link("b", "a").latency_s == 0);
  CHECK(topology->link("c", "a").bandwidth_bits_per_s == 0);
  CHECK(topology->link("c", "a").latency_s == doctest::Approx(0.0075));
  CHECK(topology->link("b", "c").pass_through());
  CHECK(topology->coordinator() == nullptr);
}

TEST_CASE("site names with dashes: the link key splits where both halves are sites") {
  auto topology = parse("[sites.us-east]\n[sites.eu-west]\n[links.us-east-eu-west]\nlatency_ms = 80\n");
  REQUIRE(topology.ok());
  CHECK(topology->link("eu-west", "us-east").latency_s == doctest::Approx(0.08));
}

TEST_CASE("other top-level tables are ignored, so a larger config can carry [sites] and [links]") {
  auto topology = parse(std::string("[train]\nlearners = 4\n") + kTwoSites);
  CHECK(topology.ok());
}

TEST_CASE("every invalid sites file is rejected with the file, line and key in the reason") {
  struct Case { std::string name; std::string text; const char* says; };
  const std::string two = kTwoSites;
  const Case cases[] = {
      {"no sites", "[links.a-b]\n", "no [sites] table"},
      {"empty sites", "sites = {}\n", "sites: must be a table with one sub-table per site"},
      {"site not a table", "[sites]\na = 1\n", "sites.a: must be a table"},
      {"unknown site key", "[sites.a]\nrole = \"node\"\nadress = \"x:1\"\n", "test.toml:3: sites.a.adress: unknown key"},
      {"bad role", "[sites.a]\nrole = \"leader\"\n", "sites.a.role: must be \"coordinator\" or \"node\""},
      {"role not a string", "[sites.a]\nrole = 1\n", "sites.a.role"},
      {"two coordinators", "[sites.a]\nrole = \"coordinator\"\n[sites.b]\nrole = \"coordinator\"\n",
       "sites.b.role: a second coordinator"},
      {"address without port", "[sites.a]\naddress = \"10.0.0.1\"\n", "sites.a.address: expected \"host:port\""},
      {"address bad port", "[sites.a]\naddress = \"h:70000\"\n", "sites.a.address: port must be 1..65535"},
      {"links not a table", "links = 3\n" + two, "links: must be a table"},
      {"unknown link key", two + "[links.a-b]\nbandwith_mbit = 100\n", "test.toml:4: links.a-b.bandwith_mbit: unknown key"},
      {"bandwidth is text", two + "[links.a-b]\nbandwidth_mbit = \"100\"\n", "links.a-b.bandwidth_mbit: must be a number"},
      {"bandwidth zero", two + "[links.a-b]\nbandwidth_mbit = 0\n", "links.a-b.bandwidth_mbit: must be > 0"},
      {"bandwidth inf", two + "[links.a-b]\nbandwidth_mbit = inf\n", "links.a-b.bandwidth_mbit: must be finite"},
      {"negative latency", two + "[links.a-b]\nlatency_ms = -1\n", "links.a-b.latency_ms: must be >= 0"},
      {"unknown site in link", two + "[links.a-c]\n", "links.a-c: not of the form"},
      {"no dash", two + "[links.ab]\n", "links.ab: not of the form"},
      {"self link", two + "[links.a-a]\n", "links.a-a: a link must join two different sites"},
      {"link not a table", two + "[links]\na-b = 1\n", "links.a-b: must be a table"},
      {"ambiguous", "[sites.a]\n[sites.a-b]\n[sites.b-c]\n[sites.c]\n[links.a-b-c]\n", "links.a-b-c: ambiguous"},
      {"quoted odd key", two + "[links.\"a b\"]\n", "links.\"a b\": not of the form"},
      {"syntax error", "[sites.a\n", "test.toml:1:"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto topology = parse(c.text);
    REQUIRE_FALSE(topology.ok());
    CHECK(topology.error().code == ErrorCode::invalid_argument);
    CAPTURE(topology.error().reason);
    CHECK(topology.error().reason.find(c.says) != std::string::npos);
  }
}

TEST_CASE("a missing sites file is not_found") {
  auto topology = load_sites_file("/nonexistent/sites.toml");
  REQUIRE_FALSE(topology.ok());
  CHECK(topology.error().code == ErrorCode::not_found);
}

// `archipelago sim` as the CLI runs it: flags, a TOML file, JSON and table output, bad input.
#include "sim/sim_command.hpp"

#include <CLI/CLI.hpp>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unistd.h>

#include "sim/bandwidth.hpp"
#include "sim/simulator.hpp"

using namespace archipelago::sim;

namespace {

struct Output {
  int code;
  std::string out, err;
};

Output run(const SimArguments& a) {
  std::ostringstream out, err;
  const int code = run_sim(a, out, err);
  return {code, out.str(), err.str()};
}

// A scratch directory removed at the end of the test.
struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    dir = std::filesystem::temp_directory_path() / ("sim_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
  }
  ~Scratch() { std::filesystem::remove_all(dir); }
};

}  // namespace

TEST_CASE("--chips --mtbi-hours --learners --json prints one line with the three goodputs") {
  SimArguments a;
  a.json = true;
  a.settings = {{"chips", "150000"}, {"mtbi_hours", "8760"}, {"learners", "8"}};
  const Output o = run(a);
  REQUIRE(o.code == 0);
  CHECK(o.out.find('\n') == o.out.size() - 1);
  const nlohmann::json j = nlohmann::json::parse(o.out);
  SimConfig c;
  c.chips = 150000;
  c.learners = 8;
  CHECK(j["goodput"]["decoupled"].get<double>() == doctest::Approx(simulate(c, Strategy::decoupled).goodput));
  CHECK(j["goodput"]["elastic_ddp"].get<double>() == doctest::Approx(simulate(c, Strategy::elastic_ddp).goodput));
  CHECK(j["goodput"]["ddp"].get<double>() == doctest::Approx(simulate(c, Strategy::ddp).goodput));
  CHECK(j["goodput"]["decoupled"].get<double>() > j["goodput"]["ddp"].get<double>());
  CHECK(j["config"]["learners"] == 8);
}

TEST_CASE("the command line as archipelago parses it: one flag per key") {
  CLI::App app;
  CLI::App* command = app.add_subcommand("sim");
  SimArguments a;
  add_sim_options(*command, a);
  const char* argv[] = {"archipelago", "sim", "--chips", "4", "--mtbi-hours", "inf", "--learners", "4",
                        "--kill-every-s", "20", "--learner-restart-s", "2", "--step-time-s", "0.5",
                        "--learner-checkpoint-steps", "1", "--wall-s", "150", "--runs", "2", "--json"};
  REQUIRE_NOTHROW(app.parse(static_cast<int>(std::size(argv)), argv));
  CHECK(a.json);
  CHECK(a.settings.size() == 9);
  const Output o = run(a);
  REQUIRE_MESSAGE(o.code == 0, o.err);
  const nlohmann::json j = nlohmann::json::parse(o.out);
  CHECK(j["goodput"]["decoupled"].get<double>() == doctest::Approx(1 - 14.0 / 600));
  CHECK(j["config"]["kill_every_s"] == 20.0);

  CLI::App bad;
  SimArguments b;
  add_sim_options(*bad.add_subcommand("sim"), b);
  const char* typo[] = {"archipelago", "sim", "--chipz", "4"};
  CHECK_THROWS(bad.parse(4, typo));
}

TEST_CASE("a drill's configuration from a TOML file, overridden by a flag") {
  Scratch scratch;
  const auto file = scratch.dir / "drill.toml";
  std::ofstream(file) << "[sim]\nchips = 4\nlearners = 4\nmtbi_hours = inf\nkill_every_s = 20.0\nlearner_restart_s = 2\n"
                         "restart_s = 2\nrescale_s = 2\nstep_time_s = 0.5\ninner_steps = 10\nfragments = 2\n"
                         "learner_checkpoint_steps = 1\nquorum = 1\nwall_s = 150\nruns = 2\n";
  SimArguments a;
  a.config_file = file.string();
  a.json = true;
  Output o = run(a);
  REQUIRE_MESSAGE(o.code == 0, o.err);
  nlohmann::json j = nlohmann::json::parse(o.out);
  CHECK(j["goodput"]["decoupled"].get<double>() == doctest::Approx(1 - 14.0 / 600));
  CHECK(j["interruptions_per_run"]["decoupled"].get<double>() == 7);
  a.settings = {{"learner_restart_s", "5"}};  // flags win over the file
  o = run(a);
  REQUIRE(o.code == 0);
  j = nlohmann::json::parse(o.out);
  CHECK(j["goodput"]["decoupled"].get<double>() == doctest::Approx(1 - 35.0 / 600));
}

TEST_CASE("tables, the sweep and its SVG plot") {
  Scratch scratch;
  SimArguments a;
  a.svg_file = (scratch.dir / "goodput.svg").string();
  a.sweep_chips = "150000,1200000";
  a.settings = {{"runs", "8"}};
  const Output o = run(a);
  REQUIRE_MESSAGE(o.code == 0, o.err);
  CHECK(o.out.find("decoupled M=8") != std::string::npos);
  CHECK(o.out.find("elastic_ddp") != std::string::npos);
  std::ifstream svg(a.svg_file);
  std::stringstream text;
  text << svg.rdbuf();
  CHECK(text.str().rfind("<svg", 0) == 0);
  CHECK(text.str().find("decoupled M=16") != std::string::npos);
  CHECK(text.str().find("</svg>") != std::string::npos);
}

TEST_CASE("--bandwidth prints the papers' rows, --bw-* one configuration") {
  SimArguments a;
  a.bandwidth = true;
  a.json = true;
  Output o = run(a);
  REQUIRE(o.code == 0);
  nlohmann::json j = nlohmann::json::parse(o.out);
  CHECK(j["bandwidth"].size() == 18);
  a.settings = {{"bandwidth.parameters", "10e9"}, {"bandwidth.method", "streaming"}, {"bandwidth.overlap_steps", "1"},
                {"bandwidth.bits_per_parameter", "4"}};
  o = run(a);
  REQUIRE(o.code == 0);
  j = nlohmann::json::parse(o.out);
  REQUIRE(j["bandwidth"].size() == 1);
  BandwidthModel m;
  m.method = SyncMethod::streaming;
  m.overlap_steps = 1;
  m.bits_per_parameter = 4;
  CHECK(j["bandwidth"][0]["last_below"][2].get<double>() == doctest::Approx(required_bandwidth(m, 0.9, GridRule::last_below)));
  CHECK(j["bandwidth"][0]["threshold"][2].get<double>() == doctest::Approx(threshold_bandwidth(m, 0.9)));
}

TEST_CASE("bad input is refused with exit code 2 and the key named") {
  SimArguments a;
  a.settings = {{"learnerz", "4"}};
  Output o = run(a);
  CHECK(o.code == 2);
  CHECK(o.err.find("learnerz") != std::string::npos);
  a.settings = {{"chips", "many"}};
  o = run(a);
  CHECK(o.code == 2);
  CHECK(o.err.find("sim.chips") != std::string::npos);
  a.settings = {{"learners", "2.5"}};
  CHECK(run(a).code == 2);
  a.settings = {{"chips", "4"}, {"learners", "8"}};
  CHECK(run(a).code == 2);
  a.settings = {{"bandwidth.method", "carrier-pigeon"}};
  o = run(a);
  CHECK(o.code == 2);
  CHECK(o.err.find("bandwidth.method") != std::string::npos);

  Scratch scratch;
  const auto file = scratch.dir / "bad.toml";
  std::ofstream(file) << "[simulation]\nchips = 4\n";
  a = SimArguments{};
  a.config_file = file.string();
  o = run(a);
  CHECK(o.code == 2);
  CHECK(o.err.find("simulation") != std::string::npos);
  std::ofstream(file) << "[sim]\nchips = [1, 2]\n";
  CHECK(run(a).code == 2);
}

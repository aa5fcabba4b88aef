// A drill's goodput predicted from its result.json, against answers known without the simulator: no
// faults give the fault-free efficiency, an outage of X s over W gives E (1 - X/W), a node fault
// costs all its learners, and a result without the simulator's inputs is refused by name.
#include "sim/drill_prediction.hpp"

#include <CLI/CLI.hpp>
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>

#include "sim/sim_command.hpp"

using namespace archipelago::sim;
using nlohmann::json;

namespace {

const std::string kFixture = std::string(ARCHIPELAGO_SOURCE_DIR) + "/tests/sim/fixtures/drill_result.json";

json fixture() {
  std::ifstream file(kFixture);
  REQUIRE(file.is_open());
  return json::parse(file);
}

// The fixture with only the faults in `counts`, each kind down `down_s` seconds.
json with_faults(const json& counts, double down_s) {
  json r = fixture();
  r["fault_counts"] = counts;
  r["down_s"] = json::object();
  for (const auto& [kind, n] : counts.items()) r["down_s"][kind] = {{"n", n}, {"mean", down_s}, {"median", down_s}};
  return r;
}

DrillOptions quick() {
  DrillOptions o;
  o.runs = 400;
  return o;
}

}  // namespace

TEST_CASE("a drill without faults is predicted at its fault-free goodput") {
  const json r = with_faults(json::object(), 0);
  const DrillPrediction p = predict_drill(r, quick());
  REQUIRE_MESSAGE(p.error.empty(), p.error);
  const double fault_free = r["goodput"]["fault_free"].get<double>();
  CHECK(p.efficiency == fault_free);
  CHECK(p.efficiency_source.find("fault-free run") != std::string::npos);
  CHECK(p.predicted == doctest::Approx(fault_free).epsilon(1e-9));
  CHECK(p.measured == r["goodput"]["diloco"].get<double>());
  CHECK(p.difference == doctest::Approx(p.predicted - p.measured).epsilon(1e-12));
  CHECK(p.lost_unsent_work == 0);
}

TEST_CASE("one coordinator outage of X s over a wall of W s: E when learners train on, E x (1 - X / W) when it stops them") {
  const double wall = 140, outage = 14;
  const DrillPrediction p = predict_drill(with_faults({{"coordinator", 1}}, outage), quick());
  REQUIRE_MESSAGE(p.error.empty(), p.error);
  CHECK(p.config.coordinator_faults == 1);
  CHECK_FALSE(p.outages_stop_learners);
  CHECK(p.predicted == doctest::Approx(p.efficiency).epsilon(1e-9));  // the nodes' learners train on
  CHECK(p.lost_to_coordinator_outages == 0);
  CHECK(p.outage_share == doctest::Approx(p.efficiency * outage / wall).epsilon(1e-9));
  CHECK(p.predicted_other_reading == doctest::Approx(p.efficiency * (1 - outage / wall)).epsilon(1e-9));
  DrillOptions stop = quick();
  stop.outages_stop_learners = true;
  const DrillPrediction s = predict_drill(with_faults({{"coordinator", 1}}, outage), stop);
  REQUIRE_MESSAGE(s.error.empty(), s.error);
  CHECK(s.predicted == doctest::Approx(s.efficiency * (1 - outage / wall)).epsilon(1e-9));
  CHECK(s.lost_to_coordinator_outages == doctest::Approx(s.efficiency * outage / wall).epsilon(1e-9));
  CHECK(s.lost_unsent_work == 0);  // learners keep their unsent work through an outage
  CHECK(s.predicted_other_reading == doctest::Approx(s.efficiency).epsilon(1e-9));
}

TEST_CASE("a node fault stops all its learners, a learner fault one") {
  // H = 1, P = 1 and short steps: a failed learner loses at most the step in flight (<= 1 ms).
  json counts = {{"node", 1}};
  json r = with_faults(counts, 5);
  r["inner_steps"] = 1;
  r["fragments"] = 1;
  r["step_s"] = 0.001;
  const DrillPrediction node = predict_drill(r, quick());
  REQUIRE_MESSAGE(node.error.empty(), node.error);
  const double slot_seconds = 4 * 140.0;
  CHECK(node.lost_to_node_faults == doctest::Approx(node.efficiency * 2 * 5 / slot_seconds).epsilon(1e-9));
  CHECK(node.predicted == doctest::Approx(node.efficiency * (1 - 2 * 5 / slot_seconds)).epsilon(1e-5));
  r["fault_counts"] = {{"learner", 1}};
  r["down_s"] = {{"learner", {{"n", 1}, {"mean", 5}}}};
  const DrillPrediction learner = predict_drill(r, quick());
  REQUIRE_MESSAGE(learner.error.empty(), learner.error);
  CHECK(learner.lost_to_learner_faults == doctest::Approx(learner.efficiency * 5 / slot_seconds).epsilon(1e-9));
  CHECK(learner.lost_to_node_faults == 0);
}

TEST_CASE("a failed learner loses its unsent work: about H / 2 steps with one fragment") {
  json r = with_faults({{"learner", 1}}, 0);
  r["wall_s"] = 1000;
  r["step_s"] = 1;
  r["fragments"] = 1;
  const DrillPrediction p = predict_drill(r, quick());
  REQUIRE_MESSAGE(p.error.empty(), p.error);
  // Steps since the last sync: uniform on 0..9, plus half the step in flight: 5 compute seconds.
  CHECK(p.lost_unsent_work == doctest::Approx(5.0 / 4000).epsilon(0.1));
  r["learner_checkpoint_every"] = 1;  // checkpointed every step: only the step in flight
  CHECK(predict_drill(r, quick()).lost_unsent_work == doctest::Approx(0.5 / 4000).epsilon(0.15));
}

TEST_CASE("the fixture's prediction is E minus its parts") {
  const DrillPrediction p = predict_drill(fixture(), quick());
  REQUIRE_MESSAGE(p.error.empty(), p.error);
  CHECK(p.config.learner_faults == 2);
  CHECK(p.config.node_faults == 1);
  CHECK(p.config.coordinator_faults == 2);
  CHECK(p.config.learner_restart_s == 1.2);
  CHECK(p.config.node_restart_s == 3.0);
  CHECK(p.config.coordinator_restart_s == 4.0);
  const double parts = p.lost_to_learner_faults + p.lost_to_node_faults + p.lost_to_coordinator_outages +
                       p.lost_to_stalls + p.lost_unsent_work;
  CHECK(p.predicted == doctest::Approx(p.efficiency - parts).epsilon(1e-9));
  // The outages alone are known in advance: 2 x 4 s of every slot over 140 s.
  CHECK(p.lost_to_coordinator_outages == 0);  // learners train on through them
  CHECK(p.outage_share == doctest::Approx(p.efficiency * 8 / 140).epsilon(0.02));
  CHECK(p.lost_unsent_work > 0);
}

TEST_CASE("a result without the simulator's inputs is refused, naming every missing field") {
  json r = fixture();
  r.erase("slots");
  r.erase("step_s");
  r["down_s"].erase("node");
  const DrillPrediction p = predict_drill(r, quick());
  CHECK(p.error.find("missing or null fields") != std::string::npos);
  CHECK(p.error.find("slots") != std::string::npos);
  CHECK(p.error.find("step_s") != std::string::npos);
  CHECK(p.error.find("down_s.node.mean") != std::string::npos);
  CHECK(p.error.find("inner_steps") == std::string::npos);

  r = fixture();
  r["nodes"] = 3;
  CHECK(predict_drill(r, quick()).error.find("nodes x learners_per_node") != std::string::npos);
  r = fixture();
  r["fault_counts"]["site"] = 1;
  r["down_s"]["site"] = {{"n", 1}, {"mean", 3}};
  CHECK(predict_drill(r, quick()).error.find("sites") != std::string::npos);
  r["sites"] = 2;
  const DrillPrediction site = predict_drill(r, quick());
  REQUIRE_MESSAGE(site.error.empty(), site.error);
  CHECK(site.config.node_faults == 2);  // one node fault and a site of one node
}

TEST_CASE("without a fault-free run the efficiency must be given") {
  json r = fixture();
  r["goodput"].erase("fault_free");
  r["ledger_s"].erase("fault_free");
  CHECK(predict_drill(r, quick()).error.find("--fault-free-goodput") != std::string::npos);
  DrillOptions given = quick();
  given.fault_free_goodput = 0.5;
  const DrillPrediction p = predict_drill(r, given);
  REQUIRE_MESSAGE(p.error.empty(), p.error);
  CHECK(p.efficiency == 0.5);
  CHECK(p.efficiency_source.find("given") != std::string::npos);
  CHECK(p.predicted < 0.5);

  r = fixture();
  r["goodput"].erase("fault_free");  // the ledger's parts: 520 merged of 560
  const DrillPrediction ledger = predict_drill(r, quick());
  REQUIRE_MESSAGE(ledger.error.empty(), ledger.error);
  CHECK(ledger.efficiency == doctest::Approx(520.0 / 560.0));
  CHECK(ledger.efficiency_source.find("ledger_s.fault_free") != std::string::npos);
}

TEST_CASE("a freeze is charged when the result gives its length, and slowdowns are merged compute, not charged") {
  json r = with_faults(json::object(), 0);
  r["fault_counts"] = {{"freeze", 1}, {"slow", 1}, {"slow_learner", 1}};
  const DrillPrediction uncharged = predict_drill(r, quick());
  REQUIRE_MESSAGE(uncharged.error.empty(), uncharged.error);
  CHECK(uncharged.predicted == doctest::Approx(uncharged.efficiency).epsilon(1e-9));
  CHECK(uncharged.notes.size() == 3);  // the freeze without its length, the slowdown, the throttle
  r["freeze_s"] = 3;
  r["slow_s"] = 8;
  r["slow_duty"] = 0.5;
  const DrillPrediction charged = predict_drill(r, quick());
  REQUIRE_MESSAGE(charged.error.empty(), charged.error);
  CHECK(charged.notes.size() == 2);
  // The frozen node's two learners stopped 3 s each; the slowdown costs nothing.
  CHECK(charged.lost_to_stalls == doctest::Approx(charged.efficiency * 2 * 3 / (4 * 140.0)).epsilon(0.01));
  CHECK(charged.predicted == doctest::Approx(charged.efficiency - charged.lost_to_stalls).epsilon(1e-9));
  r["fault_counts"]["cut"] = 2;  // a kind the model does not know is named, not silently dropped
  const DrillPrediction unknown = predict_drill(r, quick());
  REQUIRE(unknown.notes.size() == 3);
  CHECK(std::any_of(unknown.notes.begin(), unknown.notes.end(),
                    [](const std::string& n) { return n.find("2 cut faults not modelled") != std::string::npos; }));
}

TEST_CASE("archipelago sim --from-drill --json: one line with predicted, measured, difference") {
  CLI::App app;
  CLI::App* command = app.add_subcommand("sim");
  SimArguments a;
  add_sim_options(*command, a);
  const std::string runs = "400";
  const char* argv[] = {"archipelago", "sim", "--from-drill", kFixture.c_str(), "--runs", runs.c_str(), "--json"};
  REQUIRE_NOTHROW(app.parse(static_cast<int>(std::size(argv)), argv));
  std::ostringstream out, err;
  REQUIRE_MESSAGE(run_sim(a, out, err) == 0, err.str());
  CHECK(out.str().find('\n') == out.str().size() - 1);
  const json j = json::parse(out.str());
  DrillOptions options = quick();
  const DrillPrediction p = predict_drill(fixture(), options);
  CHECK(j["predicted"].get<double>() == doctest::Approx(p.predicted).epsilon(1e-12));
  CHECK(j["measured"].get<double>() == fixture()["goodput"]["diloco"].get<double>());
  CHECK(j["difference"].get<double>() == doctest::Approx(p.predicted - p.measured).epsilon(1e-12));
  CHECK(j["fault_free_source"].get<std::string>().find("fault-free run") != std::string::npos);

  SimArguments table;
  table.from_drill = kFixture;
  table.settings = {{"runs", "50"}};
  std::ostringstream text, text_err;
  REQUIRE(run_sim(table, text, text_err) == 0);
  CHECK(text.str().find("predicted") != std::string::npos);
  CHECK(text.str().find("coordinator") != std::string::npos);

  SimArguments bad = table;
  bad.settings = {{"chips", "8"}};
  std::ostringstream bad_out, bad_err;
  CHECK(run_sim(bad, bad_out, bad_err) == 2);
  CHECK(bad_err.str().find("--chips") != std::string::npos);
  bad = SimArguments{};
  bad.fault_free_goodput = 0.9;
  CHECK(run_sim(bad, bad_out, bad_err) == 2);
  CHECK(bad_err.str().find("needs --from-drill") != std::string::npos);
}

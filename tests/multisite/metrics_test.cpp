// The coordinator's /metrics (Prometheus text format) and status page, read over HTTP and in a real
// headless Chromium, checked against what the coordinator reports itself. Loopback only.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <map>
#include <regex>
#include <set>
#include <thread>
#include <sstream>
#include <vector>

#include <doctest/doctest.h>
#include <httplib.h>

#include "tests/multisite/process.hpp"
#include "tests/multisite/run_args.hpp"

using namespace multisite;

namespace {

// "name{labels}" -> value, and the names with HELP and TYPE lines.
struct Exposition {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> types;
  std::set<std::string> helped;
  // A sample that must have been exported, then its value (std::map::operator[] would insert a 0
  // for a family that never was, and a check for 0 would pass).
  double operator()(const std::string& key) const {
    auto it = samples.find(key);
    REQUIRE_MESSAGE(it != samples.end(), key << " was not exported");
    return it->second;
  }
  // While waiting for a family to appear: its value, or `missing`.
  double get(const std::string& key, double missing) const {
    auto it = samples.find(key);
    return it == samples.end() ? missing : it->second;
  }
};

Exposition parse_exposition(const std::string& text) {
  Exposition e;
  std::istringstream lines(text);
  std::string line;
  const std::regex sample(R"(^([a-z_]+(\{[^}]*\})?) (-?[0-9.eE+-]+|NaN)$)");
  while (std::getline(lines, line)) {
    if (line.rfind("# HELP ", 0) == 0) {
      e.helped.insert(line.substr(7, line.find(' ', 7) - 7));
    } else if (line.rfind("# TYPE ", 0) == 0) {
      const auto name_end = line.find(' ', 7);
      e.types[line.substr(7, name_end - 7)] = line.substr(name_end + 1);
    } else {
      std::smatch m;
      REQUIRE_MESSAGE(std::regex_match(line, m, sample), "not a sample line: " << line);
      e.samples[m[1]] = std::stod(m[3]);
    }
  }
  return e;
}

// What a browser shows of one chart of the status page (the <svg id=...> element of its DOM).
struct ChartMarks {
  bool found = false;
  std::vector<std::string> x_ticks, y_ticks;  // tick labels
  std::string x_title, y_title;
  bool curve = false;  // a polyline of two points or more
};

std::vector<std::string> all_of(const std::string& text, const std::regex& pattern) {
  std::vector<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pattern); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

ChartMarks chart_marks(const std::string& dom, const std::string& id) {
  ChartMarks marks;
  const auto start = dom.find("<svg id=\"" + id + "\"");
  const auto end = dom.find("</svg>", start);
  if (start == std::string::npos || end == std::string::npos) return marks;
  const std::string svg = dom.substr(start, end - start);
  marks.found = true;
  marks.x_ticks = all_of(svg, std::regex("<text class=\"tick x\"[^>]*>([^<]*)</text>"));
  marks.y_ticks = all_of(svg, std::regex("<text class=\"tick y\"[^>]*>([^<]*)</text>"));
  const auto x_title = all_of(svg, std::regex("<text class=\"axis-title x\"[^>]*>([^<]*)</text>"));
  const auto y_title = all_of(svg, std::regex("<text class=\"axis-title y\"[^>]*>([^<]*)</text>"));
  marks.x_title = x_title.empty() ? "" : x_title[0];
  marks.y_title = y_title.empty() ? "" : y_title[0];
  marks.curve = std::regex_search(svg, std::regex("<polyline [^>]*points=\"([0-9.]+,[0-9.]+ ){2,}"));
  return marks;
}

// The text a reader sees: no style sheet, no tags.
std::string visible_text(const std::string& dom) {
  std::string text;
  bool in_tag = false, in_style = false;
  for (size_t i = 0; i < dom.size(); ++i) {
    if (dom[i] == '<') {
      in_tag = true;
      if (dom.compare(i, 6, "<style") == 0) in_style = true;
      if (dom.compare(i, 8, "</style>") == 0) in_style = false;
      text += ' ';
    } else if (dom[i] == '>') {
      in_tag = false;
    } else if (!in_tag && !in_style) {
      text += dom[i];
    }
  }
  return text;
}

// Seconds since local midnight now, and of an "HH:MM:SS" label (-1 when it is not one).
int seconds_of_day_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  return tm.tm_hour * 3600 + tm.tm_min * 60 + tm.tm_sec;
}
int seconds_of_day(const std::string& label) {
  std::smatch m;
  if (!std::regex_match(label, m, std::regex("([01][0-9]|2[0-3]):([0-5][0-9]):([0-5][0-9])"))) return -1;
  return std::stoi(m[1]) * 3600 + std::stoi(m[2]) * 60 + std::stoi(m[3]);
}

// Whether tick labels ("12,000", "0.25") are evenly spaced by 1, 2 or 5 x 10^k.
bool nice_steps(const std::vector<std::string>& labels) {
  std::vector<double> values;
  for (auto label : labels) {
    label.erase(std::remove(label.begin(), label.end(), ','), label.end());
    if (!std::regex_match(label, std::regex("-?[0-9]+(\\.[0-9]+)?"))) return false;
    values.push_back(std::stod(label));
  }
  if (values.size() < 2) return false;
  const double step = values[1] - values[0];
  if (step <= 0) return false;
  const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  if (std::fabs(mantissa - 1) > 1e-6 && std::fabs(mantissa - 2) > 1e-6 && std::fabs(mantissa - 5) > 1e-6) return false;
  for (size_t i = 1; i < values.size(); ++i) {
    if (std::fabs(values[i] - values[i - 1] - step) > step * 1e-6) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("metrics and the status page: Prometheus text checked against the run, the page in headless Chromium") {
  Scratch s("metrics");
  const int port = free_port();
  const int metrics_port = free_port();
  Process coordinator("coordinator",
                      coordinator_args(s, port, {"train.max_seconds=0"},
                                       {"--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port)}),
                      s.dir);
  await_listening(coordinator);
  CHECK(coordinator.out().find("metrics and status page on http://127.0.0.1:" + std::to_string(metrics_port)) !=
        std::string::npos);
  Process node("node-a", node_args(s, port, "node-a"), s.dir);

  httplib::Client http("127.0.0.1", metrics_port);
  http.set_connection_timeout(5);
  http.set_read_timeout(10);
  Exposition metrics;
  // Until the evaluator scored a version (the loss appears only once measured).
  REQUIRE_MESSAGE(wait_until([&] {
                    auto response = http.Get("/metrics");
                    if (!response || response->status != 200) return false;
                    metrics = parse_exposition(response->body);
                    return metrics.samples.count("archipelago_heldout_loss") > 0 &&
                           metrics.get("archipelago_committed_version", 0) >= 3 &&
                           metrics.get("archipelago_learners{state=\"alive\"}", 0) == 2;
                  }, 60),
                  coordinator.all());
  const double seen_after = static_cast<double>(coordinator.last_value("version"));
  for (const char* name : {"archipelago_committed_version", "archipelago_versions_committed_total",
                           "archipelago_updates_merged_total", "archipelago_updates_rejected_total",
                           "archipelago_bytes_total", "archipelago_heldout_loss", "archipelago_learner_restarts_total",
                           "archipelago_learners", "archipelago_refused_messages_total", "archipelago_uptime_seconds",
                           "archipelago_goodput_ratio", "archipelago_badput_ratio"}) {
    CAPTURE(name);
    CHECK(metrics.helped.count(name) == 1);
    CHECK(metrics.types.count(name) == 1);
  }
  CHECK(metrics.types["archipelago_updates_merged_total"] == "counter");
  CHECK(metrics.types["archipelago_learners"] == "gauge");
  // The figures are the run's: the version is one the coordinator has printed by now, two learners
  // are alive, the node link carried bytes both ways, updates were merged, nothing was refused.
  CHECK(metrics("archipelago_committed_version") <= seen_after);
  CHECK(metrics("archipelago_versions_committed_total") == metrics("archipelago_committed_version") - 1);
  CHECK(metrics("archipelago_learners{state=\"alive\"}") == 2);
  CHECK(metrics("archipelago_syncer_shard_info{shard=\"0\",shards=\"1\"}") == 1);  // unsharded
  CHECK(metrics("archipelago_learners{state=\"dead\"}") == 0);
  CHECK(metrics("archipelago_bytes_total{direction=\"received\",link=\"node-a\"}") > 0);
  CHECK(metrics("archipelago_bytes_total{direction=\"sent\",link=\"node-a\"}") > 0);
  CHECK(metrics("archipelago_updates_merged_total") > 0);
  CHECK(metrics("archipelago_updates_rejected_total{reason=\"stale\"}") == 0);
  // Screening is on by default and honest updates pass it: the families are there, at zero.
  REQUIRE(metrics.samples.count("archipelago_updates_rejected_total{reason=\"outlier\"}") == 1);
  CHECK(metrics("archipelago_updates_rejected_total{reason=\"outlier\"}") == 0);
  REQUIRE(metrics.samples.count("archipelago_updates_clipped_total") == 1);
  CHECK(metrics("archipelago_updates_clipped_total") == 0);
  // A newcomer's first update of a fragment may be clipped to the median (on probation): at most
  // once per learner and fragment (2 learners, 4 fragments), and counted apart from outliers.
  REQUIRE(metrics.samples.count("archipelago_updates_probation_clipped_total") == 1);
  CHECK(metrics("archipelago_updates_probation_clipped_total") <= 2 * 4);
  // Each fragment's committed version; the newest of them is the latest global version.
  double newest_fragment = 0;
  for (int f = 0; f < 4; ++f) {
    const std::string key = "archipelago_fragment_version{fragment=\"" + std::to_string(f) + "\"}";
    REQUIRE(metrics.samples.count(key) == 1);
    CHECK(metrics(key) >= 1);
    newest_fragment = std::max(newest_fragment, metrics(key));
  }
  CHECK(newest_fragment == metrics("archipelago_committed_version"));
  CHECK(metrics("archipelago_refused_messages_total{reason=\"unauthenticated\"}") == 0);
  CHECK(metrics("archipelago_heldout_loss") > 0);
  CHECK(metrics("archipelago_heldout_loss") < 6);  // below a uniform byte model's ln 256 = 5.55 + margin
  // The learners' recent train loss came over the wire in their heartbeats (a node's learners).
  REQUIRE(metrics.samples.count("archipelago_train_loss") == 1);
  CHECK(metrics("archipelago_train_loss") > 0);
  CHECK(metrics("archipelago_train_loss") < 6);
  CHECK(metrics("archipelago_heldout_bits_per_byte") ==
        doctest::Approx(metrics("archipelago_heldout_loss") / std::log(2.0)).epsilon(1e-6));
  // The best version scored: no worse than the latest, and one of the versions committed.
  REQUIRE(metrics.samples.count("archipelago_best_heldout_loss") == 1);
  CHECK(metrics("archipelago_best_heldout_loss") <= metrics("archipelago_heldout_loss"));
  CHECK(metrics("archipelago_best_version") >= 1);
  CHECK(metrics("archipelago_best_version") <= metrics("archipelago_committed_version"));
  // The goodput ledger: two of four slots have no node, so at most half the allocated time is goodput;
  // goodput and the badput parts add up to one.
  const double goodput = metrics("archipelago_goodput_ratio");
  CHECK(goodput > 0);
  CHECK(goodput <= 0.5);
  double parts = goodput;
  for (const auto& [sample, value] : metrics.samples) {
    if (sample.rfind("archipelago_badput_ratio{", 0) == 0) parts += value;
  }
  CHECK(parts == doctest::Approx(1).epsilon(1e-6));
  CHECK(metrics("archipelago_badput_ratio{part=\"idle\"}") >= 0.45);

  // The page, rendered by a real browser: the learners table, the charts, and a screenshot.
  const fs::path artifacts = fs::path(ARCHIPELAGO_BINARY).parent_path().parent_path() / "test-artifacts";
  fs::create_directories(artifacts);
  const std::string url = "http://127.0.0.1:" + std::to_string(metrics_port) + "/";
  const std::string chromium = "timeout 90 chromium --headless --no-sandbox --disable-gpu --user-data-dir=" +
                               (s.dir / "chromium").string();
  const auto dom_file = s.dir / "dom.html";
  REQUIRE(std::system((chromium + " --dump-dom " + url + " > " + dom_file.string() + " 2> " +
                       (s.dir / "chromium.log").string()).c_str()) == 0);
  const std::string dom = read_file(dom_file);
  CAPTURE(dom.substr(0, 2000));
  CHECK(count_of(dom, "class=\"learner\"") == 2);
  CHECK(dom.find("data-id=\"learner-0\"") != std::string::npos);
  CHECK(dom.find("data-id=\"learner-1\"") != std::string::npos);
  CHECK(dom.find("<td class=\"alive\">alive</td>") != std::string::npos);
  // Every chart: its curve, both axes ticked at round values and titled with their unit, the time
  // axis in times of day of this run (the coordinator's local time: this machine's, this TZ).
  const int now_s = seconds_of_day_now();
  for (const auto& [id, unit] : std::vector<std::pair<std::string, std::string>>{
           {"loss", "\\(nats/token\\)"}, {"throughput", "\\(tokens/s\\)"}, {"bytes", "\\((B|kB|MB|GB)\\)"},
           {"goodput", "\\(fraction\\)"}, {"versions", "version"}}) {
    CAPTURE(id);
    const ChartMarks chart = chart_marks(dom, id);
    REQUIRE(chart.found);
    CHECK(chart.curve);
    CHECK(chart.x_ticks.size() > 2);
    CHECK(chart.y_ticks.size() > 2);
    CHECK(chart.x_title.rfind("local time (", 0) == 0);
    CHECK_MESSAGE(std::regex_search(chart.y_title, std::regex(unit)), chart.y_title);
    CHECK_MESSAGE(nice_steps(chart.y_ticks), chart.y_ticks.front() << " .. " << chart.y_ticks.back());
    for (const auto& tick : chart.x_ticks) {
      CAPTURE(tick);
      const int at = seconds_of_day(tick);
      REQUIRE(at >= 0);
      const int behind = ((now_s - at) % 86400 + 86400) % 86400;  // seconds before now, across midnight
      CHECK(behind < 600);
    }
  }
  // Figures rounded to what they mean: the header's loss, goodput and uptime, the tables' tokens/s
  // and bytes; nowhere a number with more than four decimals.
  const std::string text = visible_text(dom);
  const auto summary_at = dom.find("<p id=\"summary\">");
  REQUIRE(summary_at != std::string::npos);
  const std::string summary = visible_text(dom.substr(summary_at, dom.find("</p>", summary_at) - summary_at));
  CAPTURE(summary);
  CHECK(std::regex_search(summary, std::regex("held-out loss +[0-9]+\\.[0-9]{3} nats/token ")));
  CHECK(std::regex_search(summary, std::regex("goodput +0\\.[0-9]{3} ")));
  CHECK(std::regex_search(summary, std::regex("up ([0-9]{1,2} s|[0-9]{1,2} min [0-5][0-9] s|[0-9]+ h [0-5][0-9] min) ")));
  CHECK_FALSE(std::regex_search(text, std::regex("[0-9]\\.[0-9]{5}")));
  CHECK(std::regex_search(dom, std::regex("<tr class=\"learner\"[^>]*><td>[^<]*</td><td>[^<]*</td><td class=\"[^\"]*\">[^<]*</td>"
                                          "<td>[0-9]{1,3}(,[0-9]{3})*</td><td>[0-9]{1,3}(,[0-9]{3})*</td>")));
  CHECK(std::regex_search(dom, std::regex("<tr class=\"link\"><td>node-a</td><td>[^<]*</td><td>[0-9.]+ (kB|MB|GB)</td>")));
  const auto screenshot = artifacts / "status-page.png";
  fs::remove(screenshot);
  REQUIRE(std::system((chromium + " --window-size=1000,1100 --screenshot=" + screenshot.string() + " " + url + " > " +
                       (s.dir / "chromium-shot.log").string() + " 2>&1").c_str()) == 0);
  CHECK(fs::exists(screenshot));
  CHECK(fs::file_size(screenshot) > 5000);

  coordinator.kill(SIGTERM);
  REQUIRE(coordinator.wait(60) == 0);
  CHECK_MESSAGE(node.wait(30) == 0, node.all());
}

TEST_CASE("metrics: off loopback without a token, or with the admin or join token as one, refused at start, a token asked for on loopback too") {
  Scratch s("metrics-open");
  const int port = free_port();
  Process coordinator("coordinator", coordinator_args(s, port, {"train.max_seconds=0"}, {"--metrics-listen", "0.0.0.0:9"}),
                      s.dir);
  CHECK(coordinator.wait(60) == 2);
  CHECK(coordinator.err().find("is not a loopback address: it needs a metrics token") != std::string::npos);
  CHECK(coordinator.out().find("listening on") == std::string::npos);
  // The admin or the join token given as the metrics token: refused, a scraper's credential travels
  // to every Prometheus and must open neither a console nor a session.
  const auto admin = s.dir / "admin-token", reader = s.dir / "metrics-token";
  std::ofstream(admin) << "admin-horse-battery-staple-0123456789\n";
  std::ofstream(reader) << "reader-horse-battery-staple-0123456789\n";
  chmod(admin.c_str(), 0600);
  chmod(reader.c_str(), 0600);
  Process as_admin("coordinator-admin", coordinator_args(s, port, {"train.max_seconds=0"},
                                                         {"--metrics-listen", "127.0.0.1:0", "--admin-token-file", admin.string(),
                                                          "--metrics-token-file", admin.string()}),
                   s.dir);
  CHECK(as_admin.wait(60) == 2);
  CHECK(as_admin.err().find("the metrics token must differ from the admin token") != std::string::npos);
  Process as_join("coordinator-join", coordinator_args(s, port, {"train.max_seconds=0"},
                                                       {"--metrics-listen", "127.0.0.1:0", "--admin-token-file", admin.string(),
                                                        "--metrics-token-file", s.token.string()}),
                  s.dir);
  CHECK(as_join.wait(60) == 2);
  CHECK(as_join.err().find("the metrics token must differ from the join token") != std::string::npos);
  // A metrics token of its own on loopback: asked for there too (401 without it, 200 with it).
  const int metrics_port = free_port();
  Process served("coordinator-served", coordinator_args(s, port, {"train.max_seconds=0"},
                                                        {"--metrics-listen", "127.0.0.1:" + std::to_string(metrics_port),
                                                         "--metrics-token-file", reader.string()}),
                 s.dir);
  await_listening(served);
  httplib::Client http("127.0.0.1", metrics_port);
  http.set_connection_timeout(5);
  http.set_read_timeout(10);
  for (const char* path : {"/metrics", "/"}) {
    CAPTURE(path);
    auto anonymous = http.Get(path);
    REQUIRE(anonymous);
    CHECK(anonymous->status == 401);
    CHECK(anonymous->body.find("archipelago_") == std::string::npos);
    auto wrong = http.Get(path, {{"Authorization", "Bearer admin-horse-battery-staple-0123456789"}});
    REQUIRE(wrong);
    CHECK(wrong->status == 401);
    auto bearer = http.Get(path, {{"Authorization", "Bearer reader-horse-battery-staple-0123456789"}});
    REQUIRE(bearer);
    CHECK(bearer->status == 200);
  }
  served.kill(SIGTERM);
  CHECK(served.wait(60) == 0);
}

TEST_CASE("a local run (archipelago train) serves the admin console and the metrics of a coordinator") {
  Scratch s("local-operated");
  const auto admin_token = s.dir / "admin-token";
  std::ofstream(admin_token) << "local-admin-battery-staple-0123456789\n";
  chmod(admin_token.c_str(), 0600);
  // A 3 s restart backoff: a killed learner stays `restarting` longer than a console poll takes under load.
  Process train("train",
                {"train", "--set", "model.preset=tiny", "--set", "data.tokenizer=bytes", "--set", "train.learners=2", "--set", "train.inner_steps=10",
                 "--set", "train.max_seconds=300", "--set", "train.threads=1", "--set", "runtime.backoff_initial_s=3",
                 "--set", "runtime.backoff_max_s=3", "--run-dir", (s.dir / "run").string(), "--admin-listen",
                 "127.0.0.1:0", "--admin-token-file", admin_token.string(), "--metrics-listen", "127.0.0.1:0", "--json"},
                s.dir);
  auto port_after = [&](const std::string& prefix) {
    const auto text = train.out();
    const auto at = text.find(prefix);
    return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + prefix.size());
  };
  REQUIRE_MESSAGE(wait_until([&] { return port_after("admin console on 127.0.0.1:") > 0; }, 60), train.all());
  const std::string target = "127.0.0.1:" + std::to_string(port_after("admin console on 127.0.0.1:"));
  const int metrics_port = port_after("metrics and status page on http://127.0.0.1:");
  REQUIRE(metrics_port > 0);
  auto answer = [&](const std::string& command) { return console_answer(s.dir, target, command, admin_token); };
  nlohmann::json status;
  REQUIRE_MESSAGE(wait_until([&] {
                    status = answer("status");
                    return status["committed_version"].get<uint64_t>() >= 3 && status["learners_alive"].get<int>() == 2;
                  }, 60),
                  status.dump());
  CHECK(status["mode"] == "decoupled");
  CHECK(status["learners_alive"].get<int>() == 2);
  CHECK(status["bytes_up"].get<int64_t>() > 0);    // the learners' mailboxes, as the syncer counted them
  CHECK(status["bytes_down"].get<int64_t>() > 0);
  CHECK(status["uplink_codec"] == "int4_uniform");  // config/default.toml
  CHECK(status["updates_by_codec"].value("int4_uniform", int64_t{0}) > 0);
  auto learners = answer("learners")["learners"];
  REQUIRE(learners.size() == 2);
  for (const auto& l : learners) CHECK(l["state"] == "alive");

  // The uplink codec is tunable at run time: the learners take it from the next broadcast.
  auto codec = answer("set outer.codec int8");
  CHECK(codec["old"] == "int4_uniform");
  CHECK(codec["new"] == "int8");
  CHECK_MESSAGE(wait_until([&] {
                  return (status = answer("status"))["updates_by_codec"].value("int8", int64_t{0}) >= 4;
                }, 60),
                status.dump());
  CHECK(status["uplink_codec"] == "int8");
  CHECK(train.err().find("encoding updates with int8 from now on (was int4_uniform)") != std::string::npos);
  {
    auto refused = console_command(s.dir, target, "set outer.codec int3", admin_token);
    CHECK(refused.code == 1);
    CHECK(refused.err.find("outer.codec") != std::string::npos);
  }

  // H too: from one period past the leading learner, every learner's fragments are due every 20 steps.
  // (An update spans 20 steps under H = 10 too when the one before it was not answered in time.)
  // The console's status names screening's mode and counts (tests/actors/syncer_core_test.cpp drives them).
  const auto screening = answer("status")["screening"];
  CHECK(screening["mode"] == "refuse");
  CHECK(screening["clipped"] == 0);
  CHECK(screening["median_norm_per_lr"].size() == 4);
  // ... and the model version as the vector of its fragments' versions, none above the latest.
  const auto versions = answer("status");
  REQUIRE(versions["fragment_versions"].size() == 4);
  for (const auto& v : versions["fragment_versions"]) CHECK(v.get<uint64_t>() <= versions["committed_version"].get<uint64_t>());
  CHECK(versions["fragments_in_flight"].is_array());

  auto period = answer("set train.inner_steps 20");
  CHECK(period["old"] == "10");
  CHECK(period["new"].get<std::string>().rfind("20 from step ", 0) == 0);
  auto grown = [&](const nlohmann::json& now, const nlohmann::json& before, const char* steps) {
    return now.value(steps, int64_t{0}) - before.value(steps, int64_t{0});
  };
  const auto before = answer("status")["updates_by_period"];
  CHECK_MESSAGE(wait_until([&] { return grown((status = answer("status"))["updates_by_period"], before, "20") >= 12; }, 90),
                status.dump());
  // Past the change (the learners sent 10-step updates until they reached its step): 20-step ones now.
  const auto after = status["updates_by_period"];
  CHECK_MESSAGE(wait_until([&] { return grown((status = answer("status"))["updates_by_period"], after, "20") >= 8; }, 90),
                status.dump());
  CHECK(grown(status["updates_by_period"], after, "10") * 4 <= grown(status["updates_by_period"], after, "20"));
  CHECK(status["inner_steps"] == 20);
  CHECK(train.err().find("learner-0: H = 20 from step ") != std::string::npos);
  CHECK(train.err().find("learner-1: H = 20 from step ") != std::string::npos);
  {
    auto refused = console_command(s.dir, target, "set train.inner_steps 0", admin_token);
    CHECK(refused.code == 1);
    CHECK(refused.err.find("train.inner_steps must be a whole number") != std::string::npos);
  }

  // A throttled learner runs slower: over the same window it takes fewer than half the steps of its
  // peer at 6x (the peer also gets the CPU the throttled one sleeps through).
  auto step_of = [&](const std::string& id) {
    const auto rows = answer("learners")["learners"];
    for (const auto& l : rows) {
      if (l["id"] == id) return l.value("step", int64_t{0});
    }
    return int64_t{-1};
  };
  CHECK(answer("throttle learner-0 6")["sent"][0]["learner"] == "learner-0");
  CHECK_MESSAGE(wait_until([&] { return train.err().find("learner-0: throttled to 6x") != std::string::npos; }, 20), train.err());
  {
    const int64_t slow0 = step_of("learner-0"), fast0 = step_of("learner-1");
    std::this_thread::sleep_for(std::chrono::seconds(4));  // a measuring window, not a wait for an event
    const int64_t slow = step_of("learner-0") - slow0, fast = step_of("learner-1") - fast0;
    CAPTURE(slow);
    CAPTURE(fast);
    CHECK(fast > 0);
    CHECK(slow * 2 < fast);
  }
  CHECK(answer("throttle learner-0 1")["sent"][0]["learner"] == "learner-0");
  {
    auto refused = console_command(s.dir, target, "throttle learner-0 0.5", admin_token);
    CHECK(refused.code == 1);
    CHECK(refused.err.find("a factor from 1") != std::string::npos);
    // The corrupt-update hook is for drills' nodes only (--drill-hooks): a local run refuses it.
    auto corrupt = console_command(s.dir, target, "corrupt learner-0", admin_token);
    CHECK(corrupt.code == 1);
    CHECK_MESSAGE(corrupt.err.find("drill hooks are off") != std::string::npos, corrupt.err);
  }

  // Learner control goes straight to this process's learners; there are no nodes to kill.
  CHECK(answer("kill learner learner-1")["sent"][0]["node"] == "local");
  std::set<std::string> seen;
  nlohmann::json victim;
  CHECK_MESSAGE(wait_until([&] {
                  const auto rows = answer("learners")["learners"];  // named: a range-for over a temporary's member dangles
                  for (const auto& l : rows) {
                    if (l["id"] == "learner-1") victim = l;
                  }
                  seen.insert(victim.value("state", ""));
                  return seen.count("restarting") && victim.value("state", "") == "alive";
                }, 60),
                victim.dump());
  CHECK(victim["restarts"].get<int>() == 1);
  {
    auto refused = console_command(s.dir, target, "kill node somewhere", admin_token);
    CHECK(refused.code == 1);
    CHECK(refused.err.find("a local run has no nodes") != std::string::npos);
    auto wrong = console_command(s.dir, target, "status", s.token);  // not the admin token
    CHECK(wrong.code == 3);
    CHECK(wrong.err.find("unauthenticated") != std::string::npos);
    // A node that finds the console's port takes no learner slot of the local run.
    Process node("node-x", {"node", "--coordinator", target, "--learners", "1", "--name", "node-x", "--token-file",
                            s.token.string(), "--give-up-after", "3"},
                 s.dir);
    CHECK(node.wait(60) == 1);
    CHECK_MESSAGE(node.err().find("this run takes no nodes") != std::string::npos, node.all());
  }

  // /metrics: the same run's figures.
  httplib::Client http("127.0.0.1", metrics_port);
  http.set_connection_timeout(5);
  http.set_read_timeout(10);
  Exposition metrics;
  CHECK(wait_until([&] {
    auto response = http.Get("/metrics");
    if (!response || response->status != 200) return false;
    metrics = parse_exposition(response->body);
    return metrics.get("archipelago_learner_restarts_total", 0) == 1 &&
           metrics.get("archipelago_learners{state=\"alive\"}", 0) == 2;
  }, 30));
  const auto later = answer("status");
  CHECK(metrics("archipelago_committed_version") >= status["committed_version"].get<double>());
  CHECK(metrics("archipelago_committed_version") <= later["committed_version"].get<double>());
  CHECK(metrics("archipelago_bytes_total{direction=\"received\",link=\"learners\"}") > 0);
  CHECK(metrics("archipelago_bytes_total{direction=\"received\",link=\"learners\"}") <=
        later["bytes_up"].get<double>());
  CHECK(metrics("archipelago_goodput_ratio") > 0);
  CHECK(metrics("archipelago_badput_ratio{part=\"restarting\"}") > 0);

  // drain ends the run cleanly, long before its 300 s budget; the audit log lists what was done.
  CHECK(answer("drain")["draining"] == true);
  REQUIRE_MESSAGE(train.wait(90) == 0, train.all());
  auto summary = train.summary();
  REQUIRE(summary.is_object());
  CHECK(summary["wall_s"].get<double>() < 250);
  CHECK(summary["restarts"].get<int>() == 1);
  CHECK(summary["heldout_loss"].get<double>() < summary["initial_heldout_loss"].get<double>());
  // The final version is the run's result; the best scored is reported beside it.
  REQUIRE(summary["best_heldout_loss"].is_number());
  CHECK(summary["best_version"].get<uint64_t>() >= 1);
  CHECK(summary["best_heldout_loss"].get<double>() <= summary["heldout_loss"].get<double>());
  CHECK(summary["final_minus_best"].get<double>() ==
        doctest::Approx(summary["heldout_loss"].get<double>() - summary["best_heldout_loss"].get<double>()).epsilon(1e-12));
  CHECK(train.err().find("local-admin") == std::string::npos);  // never the secret
}

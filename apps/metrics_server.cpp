#include "apps/metrics_server.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>
#include <vector>

#include <httplib.h>

#include "apps/console_format.hpp"
#include "remote/edge.hpp"

namespace archipelago::apps {
namespace {

constexpr size_t kHistory = 600;
constexpr size_t kEvents = 30;
const char* const kStates[] = {"alive", "suspect", "dead", "restarting", "failed", "paused", "finished"};

std::string label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string html(const std::string& value) {
  std::string out;
  for (char c : value) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string number(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

void family(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

// ---- figures as they read on the page -------------------------------------------------------

std::string printed(const char* format, double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, format, v);
  return buffer;
}

std::tm local_tm(double unix_s) {
  const std::time_t seconds = static_cast<std::time_t>(std::floor(unix_s));
  std::tm tm{};
  localtime_r(&seconds, &tm);
  return tm;
}

// HH:MM:SS in this process's local time (TZ).
std::string time_of_day(double unix_s) {
  const std::tm tm = local_tm(unix_s);
  char buffer[16];
  std::strftime(buffer, sizeof buffer, "%H:%M:%S", &tm);
  return buffer;
}

std::string zone_name(double unix_s) {
  const std::tm tm = local_tm(unix_s);
  char buffer[16];
  std::strftime(buffer, sizeof buffer, "%Z", &tm);
  return buffer;
}

// "6 s", "2 min 05 s", "1 h 03 min", "2 d 03 h": the two largest units, the second zero-padded.
std::string uptime(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, std::floor(seconds)));
  char buffer[48];
  if (s < 60) std::snprintf(buffer, sizeof buffer, "%lld s", static_cast<long long>(s));
  else if (s < 3600) std::snprintf(buffer, sizeof buffer, "%lld min %02lld s", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  else if (s < 86400) std::snprintf(buffer, sizeof buffer, "%lld h %02lld min", static_cast<long long>(s / 3600), static_cast<long long>(s % 3600 / 60));
  else std::snprintf(buffer, sizeof buffer, "%lld d %02lld h", static_cast<long long>(s / 86400), static_cast<long long>(s % 86400 / 3600));
  return buffer;
}

// A whole number with its thousands grouped: 12,345.
std::string grouped(double v) {
  const long long n = std::llround(v);
  const std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (n < 0 ? "-" : "") + out;
}

std::string bytes(double v) { return format_value("bytes", nlohmann::json(v)); }  // the console's SI units

// ---- charts ------------------------------------------------------------------------------------

// Tick values at multiples of `step` from `low` to `high` (both multiples of it).
struct Ticks {
  double low, high, step;
  std::vector<double> values() const {
    std::vector<double> out;
    for (int k = 0; low + k * step <= high + step * 1e-6; ++k) out.push_back(std::round((low + k * step) / step) * step);
    return out;
  }
};

// About five ticks at 1, 2 or 5 × 10^k covering [low, high]; at least `min_step` apart (1 for
// counts). A range narrower than `min_span` is widened around its middle first.
Ticks nice_ticks(double low, double high, double min_span, double min_step, bool from_zero) {
  if (from_zero) low = std::min(low, 0.0);
  if (high - low < min_span) {
    const double pad = (min_span - (high - low)) / 2;
    low -= pad;
    high += pad;
    if (from_zero && low < 0) {
      high -= low;
      low = 0;
    }
  }
  const double raw = (high - low) / 5;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / magnitude;
  const double step = std::max(min_step, (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * magnitude);
  return {std::floor(low / step + 1e-9) * step, std::ceil(high / step - 1e-9) * step, step};
}

// Decimals that tell ticks `step` apart: 0.5 -> 1, 0.02 -> 2, 5 -> 0.
int decimals_for(double step) { return std::max(0, static_cast<int>(std::ceil(-std::log10(step) - 1e-9))); }

// The time axis: from `low`, a round local clock time at or before the first sample, to `high`, the
// last sample; ticks `step` apart from `low` on.
struct TimeAxis {
  double low, high, step;
};

// The first clock step (seconds) that gives at most six ticks; with the steps at most 2.5 apart
// that is at least three.
TimeAxis time_axis(double first_unix_s, double last_unix_s) {
  static const double kSteps[] = {1,    2,    5,    10,   15,    30,    60,    120,   300,   600,   900,
                                  1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 432000, 864000};
  const double offset = static_cast<double>(local_tm(first_unix_s).tm_gmtoff);  // ticks on the local clock
  TimeAxis axis{first_unix_s, last_unix_s, 1};
  for (double step : kSteps) {
    axis.step = step;
    axis.low = std::floor((first_unix_s + offset) / step) * step - offset;
    if (std::floor((last_unix_s - axis.low) / step + 1e-9) + 1 <= 6) break;
  }
  return axis;
}

enum class YUnit { decimal, whole, bytes };

struct Chart {
  const char* id;
  const char* heading;
  const char* note;       // what is measured, under the heading
  const char* quantity;   // the y axis' title, before its unit
  const char* unit;       // in parentheses after it ("": a count); bytes: chosen from the range
  YUnit y_unit;
  bool from_zero;
  double min_span;
  std::vector<std::pair<double, double>> points;  // (unix s, value); NaN: not measured then
};

constexpr double kWidth = 440, kHeight = 210;
constexpr double kLeft = 64, kRight = 28, kTop = 12, kBottom = 48;

// One chart as inline SVG: gridlines, both axes with their ticks, tick labels and titles, the curve.
// Every chart of the page has the same time axis, so their times line up.
void render_chart(std::ostringstream& out, const Chart& chart, const TimeAxis& time) {
  std::vector<std::pair<double, double>> finite;
  for (const auto& p : chart.points) {
    if (std::isfinite(p.first) && std::isfinite(p.second)) finite.push_back(p);
  }
  out << "<figure><h2>" << chart.heading << "</h2><p class=\"note\">" << chart.note << "</p><svg id=\"" << chart.id << "\" class=\"chart\" width=\"" << kWidth
      << "\" height=\"" << kHeight << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\">";
  if (finite.empty()) {
    out << "<text x=\"20\" y=\"" << kHeight / 2 << "\">\u2014 not measured yet</text></svg></figure>";
    return;
  }
  double y_low = finite[0].second, y_high = finite[0].second;
  for (const auto& p : finite) {
    y_low = std::min(y_low, p.second);
    y_high = std::max(y_high, p.second);
  }
  const bool whole = chart.y_unit != YUnit::decimal;
  const Ticks y = nice_ticks(y_low, y_high, chart.min_span, whole ? 1 : 0, chart.from_zero);
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double t) { return kLeft + (t - time.low) / (time.high - time.low) * plot_w; };
  auto py = [&](double v) { return kTop + plot_h - (v - y.low) / (y.high - y.low) * plot_h; };

  // y: gridlines, ticks and their labels; bytes in one SI unit for the whole axis.
  double scale = 1;
  std::string unit = chart.unit;
  if (chart.y_unit == YUnit::bytes) {
    static const char* kUnits[] = {"B", "kB", "MB", "GB", "TB"};
    int u = 0;
    while (u < 4 && std::max(std::fabs(y.low), std::fabs(y.high)) >= scale * 1e3) {
      scale *= 1e3;
      u += 1;
    }
    unit = kUnits[u];
  }
  const int y_decimals = chart.y_unit == YUnit::whole ? 0 : decimals_for(y.step / scale);
  for (double v : y.values()) {
    const double at = py(v);
    const std::string label = chart.y_unit == YUnit::whole ? grouped(v) : printed(("%." + std::to_string(y_decimals) + "f").c_str(), v / scale);
    out << "<line class=\"grid\" x1=\"" << kLeft << "\" x2=\"" << kWidth - kRight << "\" y1=\"" << printed("%.1f", at)
        << "\" y2=\"" << printed("%.1f", at) << "\"/><line class=\"axis\" x1=\"" << kLeft - 5 << "\" x2=\"" << kLeft
        << "\" y1=\"" << printed("%.1f", at) << "\" y2=\"" << printed("%.1f", at) << "\"/><text class=\"tick y\" x=\""
        << kLeft - 8 << "\" y=\"" << printed("%.1f", at + 4) << "\" text-anchor=\"end\">" << label << "</text>";
  }
  // x: ticks on round local clock times.
  for (double t = time.low; t <= time.high + 1e-6; t += time.step) {
    const double at = px(t);
    out << "<line class=\"axis\" x1=\"" << printed("%.1f", at) << "\" x2=\"" << printed("%.1f", at) << "\" y1=\""
        << kTop + plot_h << "\" y2=\"" << kTop + plot_h + 5 << "\"/><text class=\"tick x\" x=\"" << printed("%.1f", at)
        << "\" y=\"" << kTop + plot_h + 18 << "\" text-anchor=\"middle\">" << time_of_day(t) << "</text>";
  }
  out << "<line class=\"axis\" x1=\"" << kLeft << "\" x2=\"" << kWidth - kRight << "\" y1=\"" << kTop + plot_h
      << "\" y2=\"" << kTop + plot_h << "\"/><line class=\"axis\" x1=\"" << kLeft << "\" x2=\"" << kLeft << "\" y1=\""
      << kTop << "\" y2=\"" << kTop + plot_h << "\"/>";
  out << "<text class=\"axis-title x\" x=\"" << kLeft + plot_w / 2 << "\" y=\"" << kHeight - 8
      << "\" text-anchor=\"middle\">local time (" << html(zone_name(time.high)) << ")</text>";
  out << "<text class=\"axis-title y\" transform=\"translate(14 " << kTop + plot_h / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << chart.quantity << (unit.empty() ? "" : " (" + unit + ")") << "</text>";
  // The curve (a dot while there is one point).
  if (finite.size() == 1) {
    out << "<circle class=\"curve\" r=\"3\" cx=\"" << printed("%.1f", px(finite[0].first)) << "\" cy=\""
        << printed("%.1f", py(finite[0].second)) << "\"/>";
  } else {
    out << "<polyline class=\"curve\" points=\"";
    for (const auto& p : finite) out << printed("%.1f", px(p.first)) << "," << printed("%.1f", py(p.second)) << " ";
    out << "\"/>";
  }
  out << "</svg></figure>";
}

// j[key] as a number or text when it is one (a sample's fields may be null or absent: 0 / "").
double num(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}
int64_t whole(const nlohmann::json& j, const char* key) { return static_cast<int64_t>(num(j, key)); }
std::string text(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// p[key] when it has the expected kind (object or array), else an empty one: a sample may lack it.
nlohmann::json part(const nlohmann::json& p, const char* key, bool array = false) {
  if (p.is_object() && p.contains(key) && (array ? p[key].is_array() : p[key].is_object())) return p[key];
  return array ? nlohmann::json::array() : nlohmann::json::object();
}

}  // namespace


void MetricsBoard::update(const nlohmann::json& p) {
  if (!p.is_object()) return;
  const double now_unix_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::lock_guard lock(mutex_);
  latest_ = p;
  latest_unix_s_ = now_unix_s;
  const double loss = p.contains("heldout_loss") && p["heldout_loss"].is_number() ? p["heldout_loss"].get<double>()
                                                                                  : std::nan("");
  const auto ledger = part(p, "goodput");
  const double goodput = ledger.contains("goodput") && ledger["goodput"].is_number() ? ledger["goodput"].get<double>()
                                                                                     : std::nan("");
  const auto learners = part(p, "learner_states");
  double tokens_per_s = 0;
  for (const auto& [id, r] : learners.items()) tokens_per_s += num(r, "tokens_per_s");
  double link_bytes = 0;
  for (const auto& link : part(p, "links", true)) link_bytes += num(link, "bytes_sent") + num(link, "bytes_received");
  history_.push_back({now_unix_s, loss, static_cast<uint64_t>(whole(p, "version")), goodput, tokens_per_s, link_bytes});
  while (history_.size() > kHistory) history_.pop_front();
  for (const auto& [id, r] : learners.items()) {
    const std::string state = text(r, "state");
    auto& last = states_[id];
    if (last != state) {
      events_.push_back(time_of_day(now_unix_s) + " " + id + " " + (last.empty() ? "seen" : last) + " \u2192 " + state);
      while (events_.size() > kEvents) events_.pop_front();
      last = state;
    }
  }
}

std::string MetricsBoard::prometheus() const {
  std::lock_guard lock(mutex_);
  const nlohmann::json p = latest_.is_object() ? latest_ : nlohmann::json::object();
  std::ostringstream out;
  const uint64_t version = whole(p, "version");
  family(out, "archipelago_committed_version", "gauge", "Latest committed global version.");
  out << "archipelago_committed_version " << version << "\n";
  // Which syncer shard this coordinator is: a sharded run's model is every shard's fragments, each
  // shard's /metrics scraped as its own target (versions are per shard).
  family(out, "archipelago_syncer_shard_info", "gauge", "This coordinator is syncer shard `shard` of `shards` (1 of 1: unsharded).");
  out << "archipelago_syncer_shard_info{shard=\"" << whole(p, "shard") << "\",shards=\"" << std::max<int64_t>(1, whole(p, "shards"))
      << "\"} 1\n";
  family(out, "archipelago_fragment_version", "gauge",
         "Committed version of each fragment: the model version is the vector of these (fragments commit independently).");
  const auto fragment_versions = part(p, "fragment_versions", true);
  for (size_t f = 0; f < fragment_versions.size(); ++f) {
    out << "archipelago_fragment_version{fragment=\"" << f << "\"} "
        << (fragment_versions[f].is_number() ? fragment_versions[f].get<uint64_t>() : 0) << "\n";
  }
  family(out, "archipelago_versions_committed_total", "counter", "Versions committed since this coordinator started.");
  const uint64_t start = whole(p, "start_version");
  out << "archipelago_versions_committed_total " << (version > start ? version - start : 0) << "\n";
  family(out, "archipelago_updates_merged_total", "counter", "Learner updates merged by this coordinator's syncer.");
  out << "archipelago_updates_merged_total " << whole(p, "merged") << "\n";
  family(out, "archipelago_updates_rejected_total", "counter", "Learner updates rejected, by reason.");
  const auto rejected = part(p, "rejected");  // named: items() must not outlive what it iterates
  for (const auto& [reason, n] : rejected.items()) {
    out << "archipelago_updates_rejected_total{reason=\"" << label(reason) << "\"} " << (n.is_number() ? n.get<int64_t>() : 0) << "\n";
  }
  const auto screening = part(p, "screening");
  family(out, "archipelago_updates_clipped_total", "counter",
         "Learner updates scaled down by screening (outer.screen_clip medians of recent honest norms).");
  out << "archipelago_updates_clipped_total " << whole(screening, "clipped") << "\n";
  family(out, "archipelago_updates_probation_clipped_total", "counter",
         "A learner's first update of a fragment scaled down to outer.screen_probation medians for being new.");
  out << "archipelago_updates_probation_clipped_total " << whole(screening, "probation_clipped") << "\n";
  family(out, "archipelago_syncer_pending_bytes", "gauge",
         "Bytes the syncer holds for updates not yet merged (running sums and held deltas).");
  out << "archipelago_syncer_pending_bytes " << whole(p, "syncer_pending_bytes") << "\n";
  family(out, "archipelago_bytes_total", "counter", "Bytes on each node link, as this coordinator counted them.");
  for (const auto& link : part(p, "links", true)) {
    const std::string node = label(text(link, "node"));
    out << "archipelago_bytes_total{direction=\"sent\",link=\"" << node << "\"} " << whole(link, "bytes_sent") << "\n";
    out << "archipelago_bytes_total{direction=\"received\",link=\"" << node << "\"} "
        << whole(link, "bytes_received") << "\n";
  }
  if (p.contains("train_loss") && p["train_loss"].is_number() && std::isfinite(p["train_loss"].get<double>())) {
    family(out, "archipelago_train_loss", "gauge",
           "The learners' recent inner-step cross-entropy, mean over learners (nats/token).");
    out << "archipelago_train_loss " << number(p["train_loss"].get<double>()) << "\n";
  }
  if (p.contains("heldout_loss") && p["heldout_loss"].is_number() && std::isfinite(p["heldout_loss"].get<double>())) {
    family(out, "archipelago_heldout_loss", "gauge", "Held-out cross-entropy of the latest scored version (nats/token).");
    out << "archipelago_heldout_loss " << number(p["heldout_loss"].get<double>()) << "\n";
  }
  if (p.contains("heldout_bits_per_byte") && p["heldout_bits_per_byte"].is_number() &&
      std::isfinite(p["heldout_bits_per_byte"].get<double>())) {
    family(out, "archipelago_heldout_bits_per_byte", "gauge",
           "The same in bits per byte of text (loss / (ln 2 x bytes per token)), comparable across tokenizers.");
    out << "archipelago_heldout_bits_per_byte " << number(p["heldout_bits_per_byte"].get<double>()) << "\n";
  }
  if (p.contains("best_heldout_loss") && p["best_heldout_loss"].is_number() &&
      std::isfinite(p["best_heldout_loss"].get<double>())) {
    family(out, "archipelago_best_heldout_loss", "gauge",
           "The lowest held-out loss of any version scored so far (nats/token); its version is archipelago_best_version.");
    out << "archipelago_best_heldout_loss " << number(p["best_heldout_loss"].get<double>()) << "\n";
    family(out, "archipelago_best_version", "gauge", "The version that scored archipelago_best_heldout_loss.");
    out << "archipelago_best_version " << whole(p, "best_version") << "\n";
  }
  family(out, "archipelago_learner_restarts_total", "counter", "Learner restarts by the nodes' supervisors (a node process started again counts from zero).");
  out << "archipelago_learner_restarts_total " << whole(p, "learner_restarts") << "\n";
  family(out, "archipelago_learners", "gauge", "Learners by the failure monitor's state.");
  std::map<std::string, int> by_state;
  const auto states = part(p, "learner_states");
  for (const auto& [id, r] : states.items()) by_state[text(r, "state")] += 1;
  for (const char* state : kStates) out << "archipelago_learners{state=\"" << state << "\"} " << by_state[state] << "\n";
  family(out, "archipelago_refused_messages_total", "counter", "Messages refused at the process boundary, by reason.");
  const auto refused = part(part(p, "refused"), "by_reason");
  for (const auto& [reason, n] : refused.items()) {
    out << "archipelago_refused_messages_total{reason=\"" << label(reason) << "\"} " << (n.is_number() ? n.get<int64_t>() : 0) << "\n";
  }
  const auto ledger = part(p, "goodput");
  if (ledger.contains("goodput") && ledger["goodput"].is_number()) {
    family(out, "archipelago_goodput_ratio", "gauge",
           "Learner compute merged into committed versions / allocated learner-slot time, this process.");
    out << "archipelago_goodput_ratio " << number(ledger["goodput"].get<double>()) << "\n";
    family(out, "archipelago_badput_ratio", "gauge", "The rest of the allocated time, by part; with goodput it adds to 1.");
    const auto badput = part(ledger, "badput");
    for (const auto& [name, share] : badput.items()) {
      out << "archipelago_badput_ratio{part=\"" << label(name) << "\"} " << number(share.is_number() ? share.get<double>() : 0) << "\n";
    }
  }
  family(out, "archipelago_uptime_seconds", "gauge", "Seconds since the coordinator started.");
  out << "archipelago_uptime_seconds " << number(num(p, "elapsed_s")) << "\n";
  return out.str();
}

std::string MetricsBoard::page() const {
  std::lock_guard lock(mutex_);
  const nlohmann::json p = latest_.is_object() ? latest_ : nlohmann::json::object();
  std::ostringstream out;
  const bool scored = p.contains("heldout_loss") && p["heldout_loss"].is_number() &&
                      std::isfinite(p["heldout_loss"].get<double>());
  const auto ledger = part(p, "goodput");
  const bool has_goodput = ledger.contains("goodput") && ledger["goodput"].is_number();
  out << "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">"
         "<title>Archipelago</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}svg.chart{border:1px solid #ccc}"
         ".charts{display:flex;flex-wrap:wrap;gap:0 1.5em}figure{margin:0;width:"
      << kWidth + 2 << "px}figure h2{margin-bottom:0}.note{margin:0 0 .4em;color:#666;font-size:smaller}"
         "svg text{font-size:11px;fill:#333}svg text.tick{font-size:10px}.axis{stroke:#444}.grid{stroke:#e6e6e6}"
         ".curve{fill:none;stroke:#2266cc;stroke-width:2}circle.curve{fill:#2266cc}"
         ".alive{color:#080}.dead,.failed{color:#c00}.suspect,.restarting{color:#c80}</style></head><body>"
      << "<h1>Archipelago coordinator</h1><p id=\"summary\">committed version <b>" << whole(p, "version")
      << "</b> &middot; held-out loss <b>" << (scored ? printed("%.3f", p["heldout_loss"].get<double>()) + " nats/token" : "\u2014")
      << "</b> &middot; goodput <b>" << (has_goodput ? printed("%.3f", num(ledger, "goodput")) : "\u2014")
      << "</b> &middot; up " << uptime(num(p, "elapsed_s"));
  if (latest_unix_s_ > 0) out << " &middot; as of " << time_of_day(latest_unix_s_) << " " << html(zone_name(latest_unix_s_));
  out << "</p>";
  // Learner -> node, from the admitted sessions' slot ranges.
  auto node_of = [&](const std::string& id) -> std::string {
    const int index = id.rfind("learner-", 0) == 0 ? std::atoi(id.c_str() + 8) : -1;
    for (const auto& s : part(p, "sessions", true)) {
      const int first = s.contains("first_learner") ? static_cast<int>(whole(s, "first_learner")) : -1;
      if (index >= first && index < first + whole(s, "learners")) return text(s, "node");
    }
    return "";
  };
  out << "<h2>Learners</h2><table id=\"learners\"><tr><th>learner</th><th>node</th><th>state</th><th>step</th>"
         "<th>tokens/s</th><th>deaths</th></tr>";
  const auto learners = part(p, "learner_states");
  for (const auto& [id, r] : learners.items()) {
    const std::string state = text(r, "state");
    out << "<tr class=\"learner\" data-id=\"" << html(id) << "\"><td>" << html(id) << "</td><td>" << html(node_of(id))
        << "</td><td class=\"" << html(state) << "\">" << html(state) << "</td><td>" << grouped(num(r, "step"))
        << "</td><td>" << grouped(num(r, "tokens_per_s")) << "</td><td>" << whole(r, "deaths") << "</td></tr>";
  }
  out << "</table><h2>Links</h2><table id=\"links\"><tr><th>node</th><th>site</th><th>sent</th><th>received</th></tr>";
  for (const auto& link : part(p, "links", true)) {
    out << "<tr class=\"link\"><td>" << html(text(link, "node")) << "</td><td>" << html(text(link, "site")) << "</td><td>"
        << bytes(num(link, "bytes_sent")) << "</td><td>" << bytes(num(link, "bytes_received")) << "</td></tr>";
  }
  out << "</table>";
  std::vector<Chart> charts = {
      {"loss", "Held-out loss", "cross-entropy of the latest scored version on held-out text", "held-out loss",
       "nats/token", YUnit::decimal, false, 0.01, {}},
      {"throughput", "Throughput", "the learners' own reports, summed", "throughput", "tokens/s", YUnit::whole, true, 10, {}},
      {"bytes", "Link traffic", "bytes on the node links since start, sent and received", "link traffic", "", YUnit::bytes,
       true, 1000, {}},
      {"goodput", "Goodput", "compute merged into committed versions / allocated learner time", "goodput",
       "fraction", YUnit::decimal, true, 0.01, {}},
      {"versions", "Committed versions", "the latest global version", "committed version", "", YUnit::whole, false, 2, {}}};
  for (const auto& point : history_) {
    charts[0].points.emplace_back(point.unix_s, point.heldout_loss);
    charts[1].points.emplace_back(point.unix_s, point.tokens_per_s);
    charts[2].points.emplace_back(point.unix_s, point.link_bytes);
    charts[3].points.emplace_back(point.unix_s, point.goodput);
    charts[4].points.emplace_back(point.unix_s, static_cast<double>(point.version));
  }
  // One time axis for every chart (at least 10 s long, so a young run's axis has ticks too).
  const double last = history_.empty() ? latest_unix_s_ : history_.back().unix_s;
  const TimeAxis time = time_axis(std::min(history_.empty() ? last : history_.front().unix_s, last - 10), last);
  out << "<div class=\"charts\">";
  for (const auto& chart : charts) render_chart(out, chart, time);
  out << "</div>";
  out << "<h2>Recent events</h2><ul id=\"events\">";
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) out << "<li>" << html(*it) << "</li>";
  out << "</ul></body></html>\n";
  return out.str();
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

Expected<std::unique_ptr<MetricsServer>> MetricsServer::start(const std::string& host, uint16_t port,
                                                              std::shared_ptr<MetricsBoard> board,
                                                              std::shared_ptr<const net::Secret> reader,
                                                              std::shared_ptr<const net::Secret> admin,
                                                              std::shared_ptr<const net::Secret> join) {
  const bool open = !remote::is_loopback(host);
  if (open && !reader) {
    return make_error(ErrorCode::invalid_argument, "--metrics-listen " + host +
                                                       " is not a loopback address: it needs a metrics token "
                                                       "(--metrics-token-file), sent as a bearer token");
  }
  if (reader && admin && net::tokens_equal(reader->bytes(), admin->bytes())) {
    // A scraper's credential travels to every Prometheus; it must never open a console.
    return make_error(ErrorCode::invalid_argument, "the metrics token must differ from the admin token");
  }
  if (reader && join && net::tokens_equal(reader->bytes(), join->bytes())) {
    return make_error(ErrorCode::invalid_argument, "the metrics token must differ from the join token");
  }
  auto impl = std::make_unique<Impl>();
  // A configured token is asked for on loopback as well: another user of the machine is a peer too.
  auto authorized = [reader](const httplib::Request& request, httplib::Response& response) {
    if (!reader) return true;
    const std::string header = request.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    const bool ok = header.rfind(prefix, 0) == 0 && net::verify_join(*reader, header.substr(prefix.size())).accepted();
    if (!ok) {
      response.status = 401;
      response.set_header("WWW-Authenticate", "Bearer");
      response.set_content("unauthorized: send the metrics token as a bearer token\n", "text/plain");
    }
    return ok;
  };
  // A handler's exception is a 500 with its text, never the end of the process.
  impl->server.set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
    std::string what = "internal error";
    try {
      if (error) std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    response.status = 500;
    response.set_content(what + "\n", "text/plain");
  });
  impl->server.Get("/metrics", [board, authorized](const httplib::Request& request, httplib::Response& response) {
    if (!authorized(request, response)) return;
    response.set_content(board->prometheus(), "text/plain; version=0.0.4; charset=utf-8");
  });
  impl->server.Get("/", [board, authorized](const httplib::Request& request, httplib::Response& response) {
    if (!authorized(request, response)) return;
    response.set_content(board->page(), "text/html; charset=utf-8");
  });
  const int bound = port == 0 ? impl->server.bind_to_any_port(host.c_str()) : (impl->server.bind_to_port(host.c_str(), port) ? port : -1);
  if (bound <= 0) {
    return make_error(ErrorCode::unavailable, "cannot listen for metrics on " + host + ":" + std::to_string(port));
  }
  auto* server = &impl->server;
  impl->thread = std::thread([server] { server->listen_after_bind(); });
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(impl), static_cast<uint16_t>(bound)));
}

MetricsServer::MetricsServer(std::unique_ptr<Impl> impl, uint16_t port) : impl_(std::move(impl)), port_(port) {}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace archipelago::apps

#include "apps/metrics_server.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include <httplib.h>

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

// A polyline of (x, y) scaled into a w × h box; empty when fewer than two finite points.
std::string polyline(const std::vector<std::pair<double, double>>& points, double w, double h) {
  std::vector<std::pair<double, double>> finite;
  for (const auto& p : points) {
    if (std::isfinite(p.first) && std::isfinite(p.second)) finite.push_back(p);
  }
  if (finite.size() < 2) return "";
  double x0 = finite.front().first, x1 = finite.back().first, y0 = finite[0].second, y1 = finite[0].second;
  for (const auto& p : finite) {
    y0 = std::min(y0, p.second);
    y1 = std::max(y1, p.second);
  }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  std::ostringstream out;
  for (const auto& p : finite) {
    out << number(10 + (p.first - x0) / (x1 - x0) * (w - 20)) << "," << number(h - 10 - (p.second - y0) / (y1 - y0) * (h - 20))
        << " ";
  }
  return out.str();
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
  std::lock_guard lock(mutex_);
  latest_ = p;
  const double loss = p.contains("heldout_loss") && p["heldout_loss"].is_number() ? p["heldout_loss"].get<double>()
                                                                                  : std::nan("");
  const auto ledger = part(p, "goodput");
  const double goodput = ledger.contains("goodput") && ledger["goodput"].is_number() ? ledger["goodput"].get<double>()
                                                                                     : std::nan("");
  history_.push_back({num(p, "elapsed_s"), loss, whole(p, "version"), goodput});
  while (history_.size() > kHistory) history_.pop_front();
  const auto learners = part(p, "learner_states");
  for (const auto& [id, r] : learners.items()) {
    const std::string state = text(r, "state");
    auto& last = states_[id];
    if (last != state) {
      char when[32];
      std::snprintf(when, sizeof when, "%.1f s", num(p, "elapsed_s"));
      events_.push_back(std::string(when) + ": " + id + " " + (last.empty() ? "seen" : last) + " \u2192 " + state);
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
  out << "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"2\">"
         "<title>Archipelago</title><style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
         "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}svg{border:1px solid #ccc}"
         ".alive{color:#080}.dead,.failed{color:#c00}.suspect,.restarting{color:#c80}</style></head><body>"
      << "<h1>Archipelago coordinator</h1><p id=\"summary\">committed version <b>" << whole(p, "version")
      << "</b> &middot; held-out loss <b>" << (scored ? number(p["heldout_loss"].get<double>()) : "\u2014")
      << "</b> &middot; goodput <b>"
      << (part(p, "goodput").contains("goodput") ? number(num(part(p, "goodput"), "goodput")) : "\u2014")
      << "</b> &middot; up " << number(num(p, "elapsed_s")) << " s</p>";
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
        << "</td><td class=\"" << html(state) << "\">" << html(state) << "</td><td>" << whole(r, "step")
        << "</td><td>" << number(std::round(num(r, "tokens_per_s"))) << "</td><td>" << whole(r, "deaths")
        << "</td></tr>";
  }
  out << "</table>";
  std::vector<std::pair<double, double>> loss, versions, goodput;
  for (const auto& point : history_) {
    loss.emplace_back(point.elapsed_s, point.heldout_loss);
    versions.emplace_back(point.elapsed_s, static_cast<double>(point.version));
    goodput.emplace_back(point.elapsed_s, point.goodput);
  }
  for (const auto& [id, title, points] : {std::make_tuple("loss", "Held-out loss", &loss),
                                          std::make_tuple("goodput", "Goodput", &goodput),
                                          std::make_tuple("versions", "Committed versions", &versions)}) {
    out << "<h2>" << title << "</h2><svg id=\"" << id << "\" width=\"600\" height=\"180\" viewBox=\"0 0 600 180\">";
    const std::string line = polyline(*points, 600, 180);
    if (line.empty()) {
      out << "<text x=\"20\" y=\"90\">\u2014 not measured yet</text>";
    } else {
      out << "<polyline fill=\"none\" stroke=\"#2266cc\" stroke-width=\"2\" points=\"" << line << "\"/>";
    }
    out << "</svg>";
  }
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
                                                              std::shared_ptr<const net::Secret> admin) {
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
  auto impl = std::make_unique<Impl>();
  auto authorized = [open, reader](const httplib::Request& request, httplib::Response& response) {
    if (!open) return true;
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

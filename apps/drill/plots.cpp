#include "apps/drill/plots.hpp"

#include <algorithm>
#include <set>
#include <sstream>

#include "apps/drill/observations.hpp"
#include "apps/drill/random.hpp"
#include "apps/drill/report.hpp"

namespace archipelago::apps::drill {
namespace {

std::string esc(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (ch == '<') out += "&lt;";
    else if (ch == '>') out += "&gt;";
    else if (ch == '&') out += "&amp;";
    else out += ch;
  }
  return out;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                         "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#000000"};

}  // namespace

std::string line_svg(const std::string& title, const std::string& ylabel, const std::vector<Series>& series,
                     const std::vector<Marker>& markers) {
  const double W = 760, H = 380, L = 60, R = 150, T = 30, B = 45;
  double x0 = 0, x1 = 1, y0 = 1e300, y1 = -1e300;
  for (const auto& s : series) {
    for (auto [x, y] : s.points) {
      x1 = std::max(x1, x);
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  for (const auto& m : markers) x1 = std::max(x1, m.x);
  if (y0 > y1) y0 = 0, y1 = 1;
  if (y1 - y0 < 1e-9) y1 = y0 + 1;
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad;
  y1 += pad;
  auto X = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double y) { return T + (y1 - y) / (y1 - y0) * (H - T - B); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">" << esc(title) << "</text>\n";
  o << "<rect x=\"" << L << "\" y=\"" << T << "\" width=\"" << W - L - R << "\" height=\"" << H - T - B
    << "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (int i = 0; i <= 5; ++i) {
    const double y = y0 + (y1 - y0) * i / 5, x = x0 + (x1 - x0) * i / 5;
    o << "<text x=\"" << L - 5 << "\" y=\"" << Y(y) + 4 << "\" text-anchor=\"end\">" << fixed(y) << "</text>\n";
    o << "<text x=\"" << X(x) << "\" y=\"" << H - B + 15 << "\" text-anchor=\"middle\">" << fixed(x, 0) << "</text>\n";
  }
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\">wall time since the first commit (s)</text>\n";
  o << "<text x=\"14\" y=\"" << (T + H - B) / 2 << "\" transform=\"rotate(-90 14 " << (T + H - B) / 2
    << ")\" text-anchor=\"middle\">" << esc(ylabel) << "</text>\n";
  for (const auto& m : markers) {
    o << "<line x1=\"" << X(m.x) << "\" x2=\"" << X(m.x) << "\" y1=\"" << T << "\" y2=\"" << H - B << "\" stroke=\""
      << kColors[m.color % 9] << "\" stroke-dasharray=\"3,3\" opacity=\"0.7\"><title>" << esc(m.label) << "</title></line>\n";
  }
  for (size_t i = 0; i < series.size(); ++i) {
    o << "<polyline fill=\"none\" stroke-width=\"1.8\" stroke=\"" << kColors[i % 9] << "\" points=\"";
    for (auto [x, y] : series[i].points) o << X(x) << "," << Y(y) << " ";
    o << "\"/>\n";
    o << "<line x1=\"" << W - R + 10 << "\" x2=\"" << W - R + 30 << "\" y1=\"" << T + 10 + 16 * i << "\" y2=\"" << T + 10 + 16 * i
      << "\" stroke=\"" << kColors[i % 9] << "\" stroke-width=\"2\"/><text x=\"" << W - R + 35 << "\" y=\"" << T + 14 + 16 * i
      << "\">" << esc(series[i].label) << "</text>\n";
  }
  std::set<std::string> kinds;
  int row = static_cast<int>(series.size()) + 1;
  for (const auto& m : markers) {
    const std::string kind = m.label.substr(0, m.label.find(' '));
    if (!kinds.insert(kind).second) continue;
    o << "<line x1=\"" << W - R + 10 << "\" x2=\"" << W - R + 30 << "\" y1=\"" << T + 10 + 16 * row << "\" y2=\"" << T + 10 + 16 * row
      << "\" stroke=\"" << kColors[m.color % 9] << "\" stroke-dasharray=\"3,3\"/><text x=\"" << W - R + 35 << "\" y=\""
      << T + 14 + 16 * row << "\">" << esc(kind) << "</text>\n";
    row += 1;
  }
  o << "</svg>\n";
  return o.str();
}

std::string ledger_svg(const std::vector<std::pair<std::string, std::map<std::string, double>>>& runs) {
  const std::vector<std::string> parts = {"merged",     "rejected", "in_flight", "lost",       "throttled", "recovering",
                                          "waiting",    "paused",   "overhead",  "restarting", "idle",      "unaccounted"};
  const double W = 760, L = 90, R = 20, T = 40, bar = 34, gap = 18;
  const double H = T + runs.size() * (bar + gap) + 70;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">goodput ledger under the same fault "
       "schedule (share of allocated slot time)</text>\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& [name, seconds] = runs[i];
    double total = 0;
    for (const auto& [p, v] : seconds) total += v;
    const double y = T + i * (bar + gap);
    o << "<text x=\"" << L - 6 << "\" y=\"" << y + bar / 2 + 4 << "\" text-anchor=\"end\">" << esc(name) << "</text>\n";
    double x = L;
    for (size_t p = 0; p < parts.size(); ++p) {
      auto it = seconds.find(parts[p]);
      const double share = total > 0 && it != seconds.end() ? std::max(0.0, it->second) / total : 0;
      const double w = share * (W - L - R);
      if (w <= 0) continue;
      o << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << bar << "\" fill=\"" << kColors[p % 12]
        << "\"><title>" << parts[p] << " " << fixed(100 * share, 1) << " %</title></rect>\n";
      if (w > 34) {
        o << "<text x=\"" << x + w / 2 << "\" y=\"" << y + bar / 2 + 4 << "\" text-anchor=\"middle\" fill=\"white\">"
          << fixed(100 * share, 1) << "%</text>\n";
      }
      x += w;
    }
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    const double x = L + (p % 6) * 110, y = H - 50 + (p / 6) * 18;  // two rows of six
    o << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"12\" height=\"12\" fill=\"" << kColors[p % 12] << "\"/><text x=\""
      << x + 16 << "\" y=\"" << y + 10 << "\">" << parts[p] << (p == 0 ? " (goodput)" : "") << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string recovery_svg(const std::map<std::string, std::vector<double>>& kinds, const std::map<std::string, double>& bounds) {
  const double W = 760, L = 100, R = 30, T = 40, row = 44;
  const double H = T + std::max<size_t>(1, kinds.size()) * row + 45;
  double x1 = 0.5;
  for (const auto& [k, v] : kinds) {
    for (double x : v) x1 = std::max(x1, x);
    if (bounds.count(k)) x1 = std::max(x1, bounds.at(k));
  }
  x1 *= 1.08;
  auto X = [&](double x) { return L + x / x1 * (W - L - R); };
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W << "\" height=\"" << H
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o << "<text x=\"" << W / 2 << "\" y=\"18\" text-anchor=\"middle\" font-size=\"13\">recovery times (DiLoCo run; dashed: "
       "bound, bar: median)</text>\n";
  int i = 0;
  for (const auto& [k, v] : kinds) {
    const double y = T + i * row + row / 2;
    o << "<text x=\"" << L - 8 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">" << esc(k) << " (" << v.size() << ")</text>\n";
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << y << "\" y2=\"" << y << "\" stroke=\"#ddd\"/>\n";
    Random jitter(i + 7);
    for (double x : v) {
      o << "<circle cx=\"" << X(x) << "\" cy=\"" << y + (jitter.unit() - 0.5) * 16 << "\" r=\"3.5\" fill=\"" << kColors[i % 9]
        << "\" opacity=\"0.75\"><title>" << fixed(x) << " s</title></circle>\n";
    }
    auto st = stats_of(v);
    if (st["median"].is_number()) {
      const double m = st["median"].get<double>();
      o << "<line x1=\"" << X(m) << "\" x2=\"" << X(m) << "\" y1=\"" << y - 14 << "\" y2=\"" << y + 14 << "\" stroke=\"black\" stroke-width=\"2\"/>\n";
    }
    if (bounds.count(k)) {
      o << "<line x1=\"" << X(bounds.at(k)) << "\" x2=\"" << X(bounds.at(k)) << "\" y1=\"" << y - 18 << "\" y2=\"" << y + 18
        << "\" stroke=\"#d62728\" stroke-dasharray=\"4,3\"/>\n";
    }
    i += 1;
  }
  const double yb = T + std::max<size_t>(1, kinds.size()) * row;
  o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << yb << "\" y2=\"" << yb << "\" stroke=\"#444\"/>\n";
  for (int k = 0; k <= 6; ++k) {
    const double x = x1 * k / 6;
    o << "<text x=\"" << X(x) << "\" y=\"" << yb + 15 << "\" text-anchor=\"middle\">" << fixed(x, 1) << "</text>\n";
  }
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 8 << "\" text-anchor=\"middle\">seconds</text>\n</svg>\n";
  return o.str();
}

}  // namespace archipelago::apps::drill

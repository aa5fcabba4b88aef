#include "sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace archipelago::sim {

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

std::string text_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  std::string text;
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < rows[r].size(); ++i) {
      const std::string& cell = rows[r][i];
      if (i == 0) text += cell + std::string(width[i] - cell.size(), ' ');
      else text += "  " + std::string(width[i] - cell.size(), ' ') + cell;
    }
    text += '\n';
    if (r == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      text += std::string(total - 2, '-') + '\n';
    }
  }
  return text;
}

std::string svg_plot(const std::string& title, const std::string& x_label, const std::vector<double>& x,
                     const std::vector<PlotSeries>& series) {
  const double width = 720, height = 440, left = 70, right = 180, top = 40, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  const double x_lo = std::log10(*std::min_element(x.begin(), x.end()));
  const double x_hi = std::log10(*std::max_element(x.begin(), x.end()));
  auto px = [&](double v) { return left + (x_hi > x_lo ? (std::log10(v) - x_lo) / (x_hi - x_lo) : 0.5) * plot_w; };
  auto py = [&](double v) { return top + (1 - std::clamp(v, 0.0, 1.0)) * plot_h; };
  static const char* colours[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + fixed(width, 0) + "\" height=\"" +
                  fixed(height, 0) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + fixed(left + plot_w / 2, 1) + "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" + title + "</text>\n";
  for (int k = 0; k <= 10; ++k) {
    const double v = k / 10.0;
    s += "<line x1=\"" + fixed(left, 1) + "\" x2=\"" + fixed(left + plot_w, 1) + "\" y1=\"" + fixed(py(v), 1) + "\" y2=\"" +
         fixed(py(v), 1) + "\" stroke=\"#ddd\"/>\n";
    s += "<text x=\"" + fixed(left - 6, 1) + "\" y=\"" + fixed(py(v) + 4, 1) + "\" text-anchor=\"end\">" + fixed(100 * v, 0) +
         "%</text>\n";
  }
  for (double v : x) {
    s += "<line x1=\"" + fixed(px(v), 1) + "\" x2=\"" + fixed(px(v), 1) + "\" y1=\"" + fixed(top, 1) + "\" y2=\"" +
         fixed(top + plot_h, 1) + "\" stroke=\"#eee\"/>\n";
    const std::string label = v >= 1e6 ? fixed(v / 1e6, 2) + "M" : v >= 1e3 ? fixed(v / 1e3, 0) + "k" : fixed(v, 0);
    s += "<text x=\"" + fixed(px(v), 1) + "\" y=\"" + fixed(top + plot_h + 18, 1) + "\" text-anchor=\"middle\">" + label +
         "</text>\n";
  }
  s += "<rect x=\"" + fixed(left, 1) + "\" y=\"" + fixed(top, 1) + "\" width=\"" + fixed(plot_w, 1) + "\" height=\"" +
       fixed(plot_h, 1) + "\" fill=\"none\" stroke=\"black\"/>\n";
  s += "<text x=\"" + fixed(left + plot_w / 2, 1) + "\" y=\"" + fixed(height - 18, 1) + "\" text-anchor=\"middle\">" + x_label +
       "</text>\n";
  s += "<text transform=\"translate(18," + fixed(top + plot_h / 2, 1) + ") rotate(-90)\" text-anchor=\"middle\">goodput</text>\n";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* colour = colours[i % 8];
    std::string points;
    for (size_t k = 0; k < x.size() && k < series[i].y.size(); ++k)
      points += fixed(px(x[k]), 1) + "," + fixed(py(series[i].y[k]), 1) + " ";
    s += "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"2\" points=\"" + points + "\"/>\n";
    for (size_t k = 0; k < x.size() && k < series[i].y.size(); ++k)
      s += "<circle cx=\"" + fixed(px(x[k]), 1) + "\" cy=\"" + fixed(py(series[i].y[k]), 1) + "\" r=\"3\" fill=\"" + colour +
           "\"/>\n";
    const double ly = top + 16 + 20.0 * i;
    s += "<line x1=\"" + fixed(left + plot_w + 12, 1) + "\" x2=\"" + fixed(left + plot_w + 36, 1) + "\" y1=\"" + fixed(ly, 1) +
         "\" y2=\"" + fixed(ly, 1) + "\" stroke=\"" + colour + "\" stroke-width=\"2\"/>\n";
    s += "<text x=\"" + fixed(left + plot_w + 42, 1) + "\" y=\"" + fixed(ly + 4, 1) + "\">" + series[i].label + "</text>\n";
  }
  s += "</svg>\n";
  return s;
}

}  // namespace archipelago::sim

// A small SVG line chart for benchmark reports: panels stacked vertically
// over one x axis (e.g. time), each with its own y axis from 0 and one or
// more series. Plain SVG 1.1 text, readable in a browser or a README.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "util/markup.h"

namespace moelsp::bench {

struct PlotSeries {
  std::string name, color;  // color: any SVG color
  std::vector<double> y;    // one value per x
};

struct PlotPanel {
  std::string y_label;
  std::vector<PlotSeries> series;
};

// The smallest of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 × 10^k that is ≥ v: an
// axis maximum whose quarters and fifths are round numbers.
inline double nice_ceiling(double v) {
  if (!(v > 0)) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(v)));
  for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0})
    if (m * p >= v * (1 - 1e-9)) return m * p;
  return 10 * p;
}

inline std::string line_chart_svg(const std::string& title, const std::vector<double>& x, const std::string& x_label,
                                  const std::vector<PlotPanel>& panels) {
  constexpr double kW = 760, kPanelH = 200, kLeft = 70, kRight = 150, kTop = 40, kGap = 50;
  const double plot_w = kW - kLeft - kRight;
  const double height = kTop + double(panels.size()) * (kPanelH + kGap) + 10;
  const double x_max = nice_ceiling(x.empty() ? 1 : *std::max_element(x.begin(), x.end()));
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" viewBox=\"0 0 {:.0f} {:.0f}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{:.0f}\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
      kW, height, kW, height, kW / 2, markup_escape(title));
  for (size_t p = 0; p < panels.size(); ++p) {
    const PlotPanel& panel = panels[p];
    const double top = kTop + double(p) * (kPanelH + kGap), bottom = top + kPanelH;
    double y_top = 0;
    for (const auto& s : panel.series)
      for (double v : s.y) y_top = std::max(y_top, v);
    y_top = nice_ceiling(y_top * 1.05);
    const auto px = [&](double v) { return kLeft + plot_w * v / x_max; };
    const auto py = [&](double v) { return bottom - kPanelH * v / y_top; };
    for (int t = 0; t <= 4; ++t) {  // y grid and labels
      const double v = y_top * t / 4;
      o += fmt::format("<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", kLeft,
                       py(v), kLeft + plot_w, py(v));
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\">{:g}</text>\n", kLeft - 6, py(v) + 4, v);
    }
    for (int t = 0; t <= 5; ++t) {  // x labels
      const double v = x_max * t / 5;
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{:g}</text>\n", px(v), bottom + 16, v);
    }
    o += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#444\"/>\n", kLeft,
        top, plot_w, kPanelH);
    o += fmt::format(
        "<text x=\"16\" y=\"{:.1f}\" transform=\"rotate(-90 16 {:.1f})\" text-anchor=\"middle\">{}</text>\n",
        (top + bottom) / 2, (top + bottom) / 2, markup_escape(panel.y_label));
    o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n", kLeft + plot_w / 2,
                     bottom + 32, markup_escape(x_label));
    for (size_t si = 0; si < panel.series.size(); ++si) {
      const PlotSeries& s = panel.series[si];
      std::string pts;
      for (size_t i = 0; i < std::min(x.size(), s.y.size()); ++i)
        pts += fmt::format("{:.1f},{:.1f} ", px(x[i]), py(s.y[i]));
      o += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"1.8\" points=\"{}\"/>\n", s.color, pts);
      const double ly = top + 14 + 18 * double(si);
      o += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"3\"/>\n",
          kLeft + plot_w + 10, ly - 4, kLeft + plot_w + 30, ly - 4, s.color);
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>\n", kLeft + plot_w + 36, ly, markup_escape(s.name));
    }
  }
  return o + "</svg>\n";
}

}  // namespace moelsp::bench

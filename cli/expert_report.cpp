#include "expert_report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/markup.h"

namespace moelsp::cli {

int64_t LayerUsage::total() const {
  int64_t t = 0;
  for (int64_t v : tokens) t += v;
  return t;
}

double LayerUsage::max_over_mean() const {
  const int64_t t = total();
  if (t == 0 || tokens.empty()) return 0;
  return double(*std::max_element(tokens.begin(), tokens.end())) * double(tokens.size()) / double(t);
}

int LayerUsage::dead() const { return int(std::count(tokens.begin(), tokens.end(), int64_t(0))); }

ExpertReport expert_report(const Model& model, std::string model_name, std::string source) {
  ExpertReport r;
  r.model = std::move(model_name);
  r.source = std::move(source);
  r.n_expert = model.config().n_expert;
  r.n_expert_used = model.config().n_expert_used;
  const auto& stats = model.moe_stats();
  for (size_t il = 0; il < stats.size(); ++il) {
    if (!model.config().is_moe_layer(int(il))) continue;
    LayerUsage u;
    u.layer = int(il);
    u.tokens = stats[il].expert_tokens;
    u.tokens.resize(size_t(r.n_expert), 0);  // a layer no token reached yet has no counts
    u.entropy = stats[il].entropy();
    u.thread_imbalance = stats[il].thread_imbalance();
    r.layers.push_back(std::move(u));
  }
  return r;
}

namespace {

// Colour of a cell: its share against the uniform share 1/n, on a log scale
// from 1/8 (blue) through even (white) to 8× (red); black for a dead expert.
// A diverging scale around "even" is what makes a hot or cold expert stand
// out whatever the number of experts.
std::string cell_color(double share, int n_expert) {
  if (share <= 0) return "#000000";
  const double x = std::clamp(std::log2(share * n_expert) / 3.0, -1.0, 1.0);  // −1 … 1
  const auto mix = [](double a, double b, double t) { return int(std::lround(a + (b - a) * t)); };
  int r, g, b;
  if (x < 0) r = mix(255, 33, -x), g = mix(255, 102, -x), b = mix(255, 172, -x);  // white → blue
  else r = mix(255, 178, x), g = mix(255, 24, x), b = mix(255, 43, x);            // white → red
  return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
}

// Where the heatmap's parts go: a cell per (layer, expert), the per-layer
// figures in columns right of the grid, the legend below.
struct HeatmapGeometry {
  int n_e, n_l, cw, ch, left = 70, top = 58, grid_w, grid_h, figures_x, legend_y;
  static constexpr int kColX[] = {0, 62, 128, 170};
  static constexpr const char* kColName[] = {"entropy", "max/mean", "dead", "thread imbalance"};
  explicit HeatmapGeometry(const ExpertReport& r)
      : n_e(std::max(1, r.n_expert)),
        n_l(int(r.layers.size())),
        cw(std::clamp(960 / n_e, 4, 18)),
        ch(std::clamp(560 / std::max(1, n_l), 10, 22)),
        grid_w(cw * n_e),
        grid_h(ch * std::max(1, n_l)),
        figures_x(left + grid_w + 14),
        legend_y(top + grid_h + 34) {}
};

// One layer's row: its label, a cell per expert, its figures (SVG collapses
// runs of spaces: one <text> each).
void heatmap_row(std::string& o, const HeatmapGeometry& g, const LayerUsage& u, int i) {
  const int y = g.top + i * g.ch;
  const int64_t total = u.total();
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">layer {}</text>\n", g.left - 6, y + g.ch / 2 + 4,
                   u.layer);
  o += fmt::format("<g data-layer=\"{}\">\n", u.layer);
  for (int e = 0; e < g.n_e; ++e) {
    const int64_t t = e < int(u.tokens.size()) ? u.tokens[size_t(e)] : 0;
    const double share = total > 0 ? double(t) / double(total) : 0.0;
    o += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" data-layer=\"{}\" data-expert=\"{}\" "
        "data-tokens=\"{}\" data-share=\"{:.6f}\"><title>layer {}, expert {}: {} tokens, {:.2f} % of the "
        "layer's</title></rect>\n",
        g.left + e * g.cw, y, g.cw, g.ch, total > 0 ? cell_color(share, g.n_e) : "#dddddd", u.layer, e, t, share,
        u.layer, e, t, share * 100);
  }
  o += "</g>\n";
  const std::string figures[] = {fmt::format("{:.3f}", u.entropy), fmt::format("{:.2f}", u.max_over_mean()),
                                 std::to_string(u.dead()), fmt::format("{:.3f}", u.thread_imbalance)};
  for (int c = 0; c < 4; ++c)
    o += fmt::format("<text x=\"{}\" y=\"{}\" font-family=\"monospace\">{}</text>\n", g.figures_x + g.kColX[c],
                     y + g.ch / 2 + 4, figures[c]);
}

// The legend: the colour scale, from 1/8 of an even share to 8×, and black.
void heatmap_legend(std::string& o, const HeatmapGeometry& g) {
  const int lw = 240, steps = 24, left = g.left, y = g.legend_y;
  for (int s = 0; s < steps; ++s) {
    const double ratio = std::pow(2.0, -3.0 + 6.0 * (s + 0.5) / steps);
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"12\" fill=\"{}\"/>\n", left + s * lw / steps, y,
                     lw / steps + 1, cell_color(ratio / g.n_e, g.n_e));
  }
  o += fmt::format(
      "<text x=\"{}\" y=\"{}\" font-size=\"10\">1/8</text><text x=\"{}\" y=\"{}\" font-size=\"10\" "
      "text-anchor=\"middle\">even (1/{})</text><text x=\"{}\" y=\"{}\" font-size=\"10\" "
      "text-anchor=\"end\">8×</text>\n",
      left, y + 26, left + lw / 2, y + 26, g.n_e, left + lw, y + 26);
  o += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"#000000\"/><text x=\"{}\" y=\"{}\" "
      "font-size=\"10\">no token (dead)</text>\n",
      left + lw + 20, y, left + lw + 36, y + 10);
}

}  // namespace

std::string heatmap_svg(const ExpertReport& r) {
  const HeatmapGeometry g(r);
  const int width = std::max(g.figures_x + 300, 640), height = g.legend_y + 46;
  std::string o = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n",
      width, height, width, height);
  o += fmt::format("<text x=\"{}\" y=\"20\" font-size=\"14\" font-weight=\"bold\">Expert usage: {}</text>\n", g.left,
                   markup_escape(r.model));
  o += fmt::format(
      "<text x=\"{}\" y=\"38\" fill=\"#444\">share of each MoE layer's routed tokens per expert ({} experts, {} per "
      "token){}</text>\n",
      g.left, r.n_expert, r.n_expert_used, r.source.empty() ? "" : ", on " + markup_escape(r.source));
  // Column headers: every expert when there is room, else every 4th or 16th.
  const int label_every = g.cw >= 16 ? 1 : g.cw >= 7 ? 4 : 16;
  for (int e = 0; e < g.n_e; e += label_every)
    o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{}</text>\n",
                     g.left + e * g.cw + g.cw / 2, g.top - 4, e);
  o +=
      fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" font-size=\"9\">expert</text>\n", g.left - 6, g.top - 4);
  for (int c = 0; c < 4; ++c)
    o += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"9\">{}</text>\n", g.figures_x + g.kColX[c], g.top - 4,
                     g.kColName[c]);
  for (int i = 0; i < g.n_l; ++i) heatmap_row(o, g, r.layers[size_t(i)], i);
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", g.left,
                   g.top, g.grid_w, g.grid_h);
  heatmap_legend(o, g);
  o += "</svg>\n";
  return o;
}

std::string report_csv(const ExpertReport& r) {
  std::string o = "layer,expert,tokens,share\n";
  for (const LayerUsage& u : r.layers) {
    const int64_t total = u.total();
    for (size_t e = 0; e < u.tokens.size(); ++e)
      o += fmt::format("{},{},{},{:.6f}\n", u.layer, e, u.tokens[e],
                       total > 0 ? double(u.tokens[e]) / double(total) : 0.0);
  }
  return o;
}

std::string report_json(const ExpertReport& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerUsage& u : r.layers)
    layers.push_back({{"layer", u.layer},
                      {"tokens", u.tokens},
                      {"total", u.total()},
                      {"entropy", u.entropy},
                      {"maxOverMean", u.max_over_mean()},
                      {"dead", u.dead()},
                      {"threadImbalance", u.thread_imbalance}});
  const nlohmann::json j = {
      {"model", r.model}, {"source", r.source}, {"experts", r.n_expert}, {"used", r.n_expert_used}, {"layers", layers}};
  return j.dump(1) + "\n";
}

}  // namespace moelsp::cli

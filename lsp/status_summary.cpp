// The status's texts. Fields that are missing (nothing loaded yet, a remote
// backend) leave their lines out; numbers a field lacks print as "?".
#include "status_summary.h"

#include <cmath>

#include <fmt/format.h>

namespace moelsp::lsp {

using json = nlohmann::json;

namespace {

// A number as `spec` formats it, or "?" when the field is missing.
std::string num(const json& j, const char* key, const char* spec = "{}") {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "?";
  if (it->is_number_integer()) return fmt::format(fmt::runtime(spec), it->get<int64_t>());
  return fmt::format(fmt::runtime(spec), it->get<double>());
}

std::string str(const json& j, const char* key, const std::string& fallback = "?") {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string mib(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "?";
  const double b = it->get<double>();
  return b >= 1024.0 * 1024 * 1024 ? fmt::format("{:.1f} GiB", b / (1024.0 * 1024 * 1024))
                                   : fmt::format("{:.1f} MiB", b / (1024.0 * 1024));
}

const json& field(const json& j, const char* key) {
  static const json empty = json::object();
  const auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : empty;
}

// "for 118 s more" while completions are snoozed, else "".
std::string snooze_left(const json& c) {
  const double left = c.value("snoozeLeftMs", 0.0);
  return left > 0 ? fmt::format("for {} s more", int64_t(std::ceil(left / 1000))) : "";
}

// What the user turned on or off: a snooze, manual mode.
std::string controls(const json& c) {
  if (const std::string left = snooze_left(c); !left.empty()) return "snoozed " + left;
  if (c.value("trigger", "automatic") == "manual") return "suggestions only when asked";
  return "";
}

void add_plan(std::string& out, const json& p) {
  const json& kv = field(p, "kvCache");
  out += fmt::format("plan:         {}, {} threads, weights {}, context {}, KV {} x {} tokens ({}){}, batch <= {}\n",
                     str(p, "backend", "cpu"), str(p, "threads"), str(p, "weights"), str(p, "contextSize"),
                     str(kv, "type"), str(kv, "tokens"), mib(kv, "bytes"),
                     kv.value("prefixCache", false) ? ", prefix cache" : "", str(field(p, "batch"), "max"));
  const json& ex = field(p, "experts");
  if (ex.value("prefetch", false) || ex.value("cacheExperts", 0) > 0)
    out += fmt::format("experts:      prefetch {} (distance {}), hot cache {} experts\n", str(ex, "prefetch"),
                       str(ex, "prefetchDistance"), str(ex, "cacheExperts"));
}

void add_completions(std::string& out, const json& c) {
  const json& lat = field(c, "latencyMs");
  out += fmt::format("completions:  {} requests, {} shown, {} accepted, {} partially, {} cancelled, {} from cache\n",
                     num(c, "requests"), num(c, "shown"), num(c, "accepted"), num(c, "partiallyAccepted"),
                     num(c, "cancelled"), num(c, "cacheHits"));
  out += fmt::format("              latency p50 {} ms, p95 {} ms ({} samples); prompt tokens {} ({} reused)\n",
                     num(lat, "p50", "{:.0f}"), num(lat, "p95", "{:.0f}"), num(lat, "samples"), num(c, "promptTokens"),
                     num(c, "promptTokensReused"));
  const json& b = field(c, "breakdown");
  const double n = b.value("answers", 0.0);
  if (n > 0) {
    const auto per = [&](const char* k) { return b.value(k, 0.0) / n; };
    out += fmt::format(
        "              per answer: {:.0f} ms = queue {:.0f} + prompt {:.0f} ({:.1f} new tokens) + decode {:.0f} "
        "({:.1f} tokens); other files' code found in {:.1f}\n",
        per("totalMs"), per("queueMs"), per("promptMs"), per("promptTokensNew"), per("generateMs"),
        per("generatedTokens"), per("contextMs"));
  }
  const std::string left = snooze_left(c);
  out += fmt::format("controls:     trigger {}, snoozed {}\n", c.value("trigger", "automatic"),
                     left.empty() ? "no" : left);
}

void add_engine(std::string& out, const json& st) {
  if (const json& k = field(st, "kvCache"); !k.empty())
    out += fmt::format("kv cache:     {}/{} blocks in use, {} cached, prefix hit rate {}\n", num(k, "blocksInUse"),
                       num(k, "blocksTotal"), num(k, "blocksCached"), num(k, "prefixHitRate", "{:.2f}"));
  if (const json& sc = field(st, "scheduler"); !sc.empty())
    out += fmt::format("scheduler:    {} requests, {} running, {} waiting, mean batch {}, {} preemptions\n",
                       num(sc, "requests"), num(sc, "running"), num(sc, "waiting"), num(sc, "meanBatch", "{:.2f}"),
                       num(sc, "preemptions"));
  if (const json& b = field(st, "backend"); !b.empty()) {
    const std::string err = str(b, "lastError", "");
    out += fmt::format("backend:      {} ({}){}\n", str(b, "url"), str(b, "api"),
                       err.empty() ? "" : ", last error: " + err);
  }
  if (const json& ix = field(st, "index"); !ix.empty())
    out +=
        fmt::format("index:        {}, {} files, {} chunks\n", str(ix, "state"), num(ix, "files"), num(ix, "chunks"));
}

}  // namespace

// A pull the `model` setting started: "REF pulling 45% (file 1.2/2.4 GiB)", "REF failed: why".
std::string pull_text(const json& st) {
  const json& p = field(st, "pull");
  if (p.empty()) return "";
  const std::string state = str(p, "state");
  if (state == "pulling") {
    const double done = p.value("done", 0.0), total = p.value("total", 0.0), gib = double(1u << 30);
    if (total <= 0) return str(p, "ref") + " pulling (listing the repository)";
    return fmt::format("{} pulling {:.0f}% ({} {:.2f}/{:.2f} GiB)", str(p, "ref"), 100 * done / total, str(p, "file"),
                       done / gib, total / gib);
  }
  return fmt::format("{} {}: {}", str(p, "ref"), state, str(p, "message"));
}

std::string status_line(const json& st) {
  const std::string state = str(st, "state");
  std::string out = "moelsp " + state;
  if (st.contains("model") && st["model"].is_string()) out += " (" + st["model"].get<std::string>() + ")";
  if (const double tps = st.value("tokensPerSecond", 0.0); tps > 0) out += fmt::format(", {:.1f} tokens/s", tps);
  const json& c = field(st, "completions");
  if (!c.empty()) {
    out += fmt::format("; completions: {} asked, {} shown, {} accepted", num(c, "requests"), num(c, "shown"),
                       num(c, "accepted"));
    if (const json& lat = field(c, "latencyMs"); lat.value("samples", 0) > 0)
      out += fmt::format(", p50 {} ms", num(lat, "p50", "{:.0f}"));
  }
  if (state != "ready" && state != "busy" && !str(st, "message", "").empty()) out += " (" + str(st, "message") + ")";
  if (const std::string ctl = controls(c); !ctl.empty()) out += " [" + ctl + "]";
  if (const json& p = field(st, "pull"); str(p, "state", "") == "pulling") out += "; " + pull_text(st);
  return out;
}

std::string status_summary(const json& st) {
  std::string out;
  const std::string message = str(st, "message", "");
  out += fmt::format("state:        {}{}\n", str(st, "state"), message.empty() ? "" : "  (" + message + ")");
  if (st.contains("model")) out += "model:        " + str(st, "model") + "\n";
  if (const std::string pull = pull_text(st); !pull.empty()) out += "pull:         " + pull + "\n";
  if (const json& cm = field(st, "completionModel"); !cm.empty()) {  // completion.model
    const std::string state = str(cm, "state");
    out += "compl. model: " +
           (state == "ready"
                ? fmt::format("{} ({:.1f} GiB planned)", str(cm, "file"), cm.value("ramBytes", 0.0) / double(1u << 30))
                : fmt::format("{} {} ({})", str(cm, "setting"), state, str(cm, "message"))) +
           "\n";
  }
  if (st.contains("tokensPerSecond"))
    out += "tokens/s:     " + num(st, "tokensPerSecond", "{:.1f}") + "  (last generation)\n";
  const json& p = field(st, "plan");
  if (!p.empty()) add_plan(out, p);
  if (const json& c = field(st, "completions"); !c.empty()) add_completions(out, c);
  add_engine(out, st);
  if (const auto r = p.find("reasons"); r != p.end() && r->is_array() && !r->empty()) {
    out += "\n## plan\n";
    for (const json& why : *r)
      if (why.is_object()) out += fmt::format("- {} = {}: {}\n", str(why, "key"), str(why, "value"), str(why, "why"));
  }
  return out;
}

}  // namespace moelsp::lsp

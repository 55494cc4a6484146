// Plan overrides from config files: JSON, or a TOML subset (what a settings
// file needs: [section] headers, key = string/integer/boolean, # comments).
// A full TOML parser is not in Debian 12 as a C++ library, and the subset is
// ~60 lines; anything outside it is an error naming the line, not a guess.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "engine/plan.h"

namespace moelsp {
using json = nlohmann::json;

namespace {

std::string trim(std::string s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// Strips a # comment that is not inside a string.
std::string strip_comment(const std::string& line) {
  bool in_str = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '"' && (i == 0 || line[i - 1] != '\\')) in_str = !in_str;
    if (line[i] == '#' && !in_str) return line.substr(0, i);
  }
  return line;
}

}  // namespace

std::string toml_to_json(const std::string& toml) {
  json root = json::object();
  json* section = &root;
  std::istringstream in(toml);
  int n = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++n;
    const std::string line = trim(strip_comment(raw));
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3) throw std::runtime_error(fmt::format("config line {}: bad section header", n));
      section = &root;
      std::istringstream parts(trim(line.substr(1, line.size() - 2)));
      for (std::string part; std::getline(parts, part, '.');) {
        part = trim(part);
        if (part.empty()) throw std::runtime_error(fmt::format("config line {}: empty section name", n));
        json& next = (*section)[part];
        if (next.is_null()) next = json::object();
        if (!next.is_object()) throw std::runtime_error(fmt::format("config line {}: '{}' is not a section", n, part));
        section = &next;
      }
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw std::runtime_error(fmt::format("config line {}: expected key = value", n));
    std::string key = trim(line.substr(0, eq));
    const std::string val = trim(line.substr(eq + 1));
    if (key.size() >= 2 && key.front() == '"' && key.back() == '"') key = key.substr(1, key.size() - 2);
    if (key.empty() || val.empty()) throw std::runtime_error(fmt::format("config line {}: expected key = value", n));
    json v;
    if (val.front() == '"') {
      if (val.size() < 2 || val.back() != '"') throw std::runtime_error(fmt::format("config line {}: unterminated string", n));
      v = json::parse(val, nullptr, false);  // TOML basic strings escape like JSON's
      if (v.is_discarded()) throw std::runtime_error(fmt::format("config line {}: bad string", n));
    } else if (val == "true" || val == "false") {
      v = val == "true";
    } else {
      std::string digits = val;
      std::erase(digits, '_');
      char* end = nullptr;
      const long long i = std::strtoll(digits.c_str(), &end, 10);
      if (end && *end == '\0' && !digits.empty()) {
        v = i;
      } else {
        const double d = std::strtod(digits.c_str(), &end);
        if (!end || *end != '\0') throw std::runtime_error(fmt::format("config line {}: unsupported value '{}'", n, val));
        v = d;
      }
    }
    (*section)[key] = v;
  }
  return root.dump();
}

PlanOverrides overrides_from_json(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("config must be a JSON object");
  // "experts": {"prefetch": true} and "experts.prefetch": true are the same setting.
  const auto get = [&](const char* group, const char* key) -> const json* {
    if (group) {
      if (auto g = j.find(group); g != j.end() && g->is_object())
        if (auto v = g->find(key); v != g->end()) return &*v;
      auto v = j.find(std::string(group) + "." + key);
      return v == j.end() ? nullptr : &*v;
    }
    auto v = j.find(key);
    return v == j.end() ? nullptr : &*v;
  };
  const auto name = [](const char* g, const char* k) { return (g ? std::string(g) + "." : "") + k; };
  PlanOverrides o;
  const auto integer = [&](const char* g, const char* k, auto& out) {  // out: optional<int> or optional<int64_t>
    if (const json* v = get(g, k)) {
      if (!v->is_number_integer()) throw std::runtime_error("setting " + name(g, k) + " must be an integer");
      out = v->get<typename std::decay_t<decltype(out)>::value_type>();
    }
  };

  const auto boolean = [&](const char* g, const char* k, std::optional<bool>& out) {
    if (const json* v = get(g, k)) {
      if (!v->is_boolean()) throw std::runtime_error("setting " + name(g, k) + " must be true or false");
      out = v->get<bool>();
    }
  };
  const auto string = [&](const char* g, const char* k, std::optional<std::string>& out) {
    if (const json* v = get(g, k)) {
      if (!v->is_string()) throw std::runtime_error("setting " + name(g, k) + " must be a string");
      out = v->get<std::string>();
    }
  };
  integer(nullptr, "threads", o.threads);
  integer(nullptr, "contextSize", o.n_ctx);
  string(nullptr, "weights", o.weights);
  string("kvCache", "type", o.kv_type);
  integer("kvCache", "tokens", o.kv_tokens);
  integer("kvCache", "blockSize", o.block_size);
  boolean("kvCache", "paged", o.paged);
  integer("experts", "cacheMb", o.expert_cache_mb);
  boolean("experts", "prefetch", o.prefetch);
  integer("experts", "prefetchDistance", o.prefetch_distance);
  integer("batch", "max", o.max_batch);
  integer("gpu", "device", o.gpu);
  integer("gpu", "expertsPerLayer", o.gpu_experts_per_layer);
  if (o.threads && *o.threads == 0) o.threads.reset();  // 0 means "automatic", as on the command line
  if (o.weights && *o.weights != "ram" && *o.weights != "stream")
    throw std::runtime_error("setting weights must be \"ram\" or \"stream\", not \"" + *o.weights + "\"");
  if (o.kv_type) (void)kv_type_from_name(*o.kv_type);  // throws naming the bad value
  if (o.block_size && *o.block_size < 1) throw std::runtime_error("setting kvCache.blockSize must be ≥ 1");
  if (o.prefetch_distance && *o.prefetch_distance < 1) throw std::runtime_error("setting experts.prefetchDistance must be ≥ 1");
  return o;
}

PlanOverrides overrides_from_config(const std::string& text, bool toml) {
  return overrides_from_json(toml ? toml_to_json(text) : text);
}

std::string user_config_path() {
  std::string dir;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) dir = std::string(x) + "/moelsp";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.config/moelsp";
  if (dir.empty()) return "";
  for (const char* f : {"/config.toml", "/config.json"})
    if (std::filesystem::exists(dir + f)) return dir + f;
  return "";
}

PlanOverrides read_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  try {
    return overrides_from_config(ss.str(), path.ends_with(".toml"));
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

PlanOverrides read_config_files(const std::string& extra) {
  PlanOverrides o;
  for (const std::string& path : {user_config_path(), extra})
    if (!path.empty()) merge_overrides(o, read_config_file(path));
  return o;
}

void merge_overrides(PlanOverrides& b, const PlanOverrides& o) {
  const auto take = [](auto& dst, const auto& src) {
    if (src) dst = src;
  };
  take(b.threads, o.threads);
  take(b.n_ctx, o.n_ctx);
  take(b.weights, o.weights);
  take(b.kv_type, o.kv_type);
  take(b.kv_tokens, o.kv_tokens);
  take(b.block_size, o.block_size);
  take(b.paged, o.paged);
  take(b.expert_cache_mb, o.expert_cache_mb);
  take(b.prefetch, o.prefetch);
  take(b.prefetch_distance, o.prefetch_distance);
  take(b.max_batch, o.max_batch);
  take(b.gpu, o.gpu);
  take(b.gpu_experts_per_layer, o.gpu_experts_per_layer);
}

}  // namespace moelsp

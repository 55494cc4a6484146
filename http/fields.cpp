#include "fields.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

#include <fmt/format.h>

#include "util/json_limits.h"

namespace moelsp::http {

json parse_body(const std::string& body) {
  // No size limit here: the transport's --max-body-mb already bounds it (413).
  if (const std::string problem = json_limit_problem(body, {.max_depth = kJsonLimits.max_depth, .max_bytes = SIZE_MAX});
      !problem.empty())
    throw BadField("invalid JSON: " + problem);
  json j = json::parse(body);  // a syntax error throws json::parse_error: 400 "invalid JSON"
  if (!j.is_object()) throw BadField("the body must be a JSON object");
  return j;
}

bool has(const json& j, const char* name) {
  const auto it = j.find(name);
  return it != j.end() && !it->is_null();
}

namespace {
const char* type_of(const json& v) {
  if (v.is_number_float()) return "a decimal number";
  if (v.is_number()) return "an integer";
  return v.type_name();
}
}  // namespace

json field_or(const json& j, const char* name, json fallback) {
  return j.is_object() && has(j, name) ? j[name] : fallback;
}

std::string kind_of(const json& j, const char* name) {
  return j.is_object() && j.contains(name) && j[name].is_string() ? j[name].get<std::string>() : "";
}

int64_t int_field(const json& j, const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  if (!has(j, name)) return fallback;
  const json& v = j[name];
  const auto out_of_range = [&](const std::string& shown) {
    return BadField(fmt::format("field '{}' must be an integer within [{}, {}], not {}", name, lo, hi, shown), name);
  };
  if (!v.is_number_integer())
    throw BadField(fmt::format("field '{}' must be an integer, not {}", name, type_of(v)), name);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) throw out_of_range(v.dump());
  const int64_t n = v.get<int64_t>();
  if (n < lo || n > hi) throw out_of_range(std::to_string(n));
  return n;
}

double number_field(const json& j, const char* name, double fallback, double lo, double hi) {
  if (!has(j, name)) return fallback;
  const json& v = j[name];
  if (!v.is_number()) throw BadField(fmt::format("field '{}' must be a number, not {}", name, type_of(v)), name);
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi))
    throw BadField(fmt::format("field '{}' must be within [{}, {}], not {}", name, lo, hi, v.dump()), name);
  return d;
}

bool bool_field(const json& j, const char* name, bool fallback) {
  if (!has(j, name)) return fallback;
  if (!j[name].is_boolean())
    throw BadField(fmt::format("field '{}' must be true or false, not {}", name, type_of(j[name])), name);
  return j[name].get<bool>();
}

std::string string_field(const json& j, const char* name, const std::string& fallback) {
  if (!has(j, name)) return fallback;
  if (!j[name].is_string())
    throw BadField(fmt::format("field '{}' must be a string, not {}", name, type_of(j[name])), name);
  return j[name].get<std::string>();
}

std::vector<TokenId> token_ids(const json& a, const char* name) {
  std::vector<TokenId> ids;
  ids.reserve(a.size());
  for (const auto& v : a) {
    const bool ok =
        v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT32_MAX)
                                                         : v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX);
    if (!ok)
      throw BadField(fmt::format("field '{}': token ids must be integers within [0, {}], not {}", name, INT32_MAX,
                                 v.dump(-1, ' ', false, json::error_handler_t::replace)),
                     name);
    ids.push_back(TokenId(v.get<int64_t>()));
  }
  return ids;
}

std::vector<std::string> stops(const json& j) {
  if (!has(j, "stop")) return {};
  if (j["stop"].is_string()) return {j["stop"].get<std::string>()};
  if (j["stop"].is_array() && j["stop"].size() <= 16) {
    std::vector<std::string> v;
    for (const auto& s : j["stop"]) {
      if (!s.is_string()) throw BadField("field 'stop' must be a string or an array of strings", "stop");
      v.push_back(s);
    }
    return v;
  }
  throw BadField("field 'stop' must be a string or an array of at most 16 strings", "stop");
}

SamplingParams sampling(const json& j, const SamplingParams& defaults) {
  SamplingParams p = defaults;
  p.temperature = float(number_field(j, "temperature", defaults.temperature, 0, 10));
  p.top_p = float(number_field(j, "top_p", defaults.top_p, 0, 1));
  if (!(p.top_p > 0)) throw BadField("field 'top_p' must be within (0, 1]", "top_p");
  p.top_k = int(std::max<int64_t>(0, int_field(j, "top_k", defaults.top_k, -1, 1 << 20)));  // -1 (vLLM's "off") as 0
  p.min_p = float(number_field(j, "min_p", defaults.min_p, 0, 1));
  p.presence_penalty = float(number_field(j, "presence_penalty", defaults.presence_penalty, -2, 2));
  p.frequency_penalty = float(number_field(j, "frequency_penalty", defaults.frequency_penalty, -2, 2));
  p.repeat_penalty = float(number_field(j, "repeat_penalty", defaults.repeat_penalty, 0, 10));
  if (has(j, "seed") && j["seed"].is_number_integer() && !j["seed"].is_number_unsigned() &&
      j["seed"].get<int64_t>() == -1) {
    p.seed = std::random_device{}();
  } else if (has(j, "seed")) {
    if (!j["seed"].is_number_integer() || (!j["seed"].is_number_unsigned() && j["seed"].get<int64_t>() < 0))
      throw BadField("field 'seed' must be an integer within [0, 2^64) or -1 (random)", "seed");
    p.seed = j["seed"].get<uint64_t>();
  }
  return p;
}

void refuse_unsupported(const json& j) {
  for (const char* name : {"n", "best_of"})
    if (int_field(j, name, 1, 1, 128) != 1)
      throw BadField(fmt::format("field '{}': only 1 is supported (send the request again for more answers)", name),
                     name);
  if (bool_field(j, "echo", false)) throw BadField("field 'echo' is not supported", "echo");
  if (has(j, "logit_bias")) {
    if (!j["logit_bias"].is_object()) throw BadField("field 'logit_bias' must be an object", "logit_bias");
    if (!j["logit_bias"].empty()) throw BadField("field 'logit_bias' is not supported", "logit_bias");
  }
}

}  // namespace moelsp::http

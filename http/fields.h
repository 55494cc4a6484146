// Request fields of the HTTP API read strictly, as the settings table reads
// LSP settings: a value of the wrong JSON type, a number outside its range
// or one that would wrap (2^32 + 1 as a 32-bit int, 3.9 as an int, true as
// 1) is a 400 naming the field, never silently converted. Absent and null
// fields take their default. Internal to http/ (it includes
// nlohmann/json, which stays out of api.h).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampling_params.h"
#include "engine/tokenizer.h"

namespace moelsp::http {

using json = nlohmann::json;

// A client mistake in the body: 400 invalid_request_error, with the field
// in OpenAI's `param` when one is to blame.
struct BadField : std::runtime_error {
  BadField(const std::string& message, std::string param = "") : std::runtime_error(message), param(std::move(param)) {}
  std::string param;
};

// Parses a request body: the nesting and size limits are checked on the
// text first (json_limits.h), then it must be a JSON object.
json parse_body(const std::string& body);

// Whether `name` is present and not null.
bool has(const json& j, const char* name);

// `name` when present and not null, else `fallback` (echoing settings back).
json field_or(const json& j, const char* name, json fallback);
// A string member used to tell kinds apart ("type", "role"): "" when absent
// or not a string, so the caller refuses the kind by name.
std::string kind_of(const json& j, const char* name);

int64_t int_field(const json& j, const char* name, int64_t fallback, int64_t lo, int64_t hi);
double number_field(const json& j, const char* name, double fallback, double lo, double hi);
bool bool_field(const json& j, const char* name, bool fallback);
std::string string_field(const json& j, const char* name, const std::string& fallback = "");

// Token ids as a client sends them: integers within [0, 2^31); the
// vocabulary check is the backend's.
std::vector<TokenId> token_ids(const json& a, const char* name);

// `stop`: a string or an array of strings.
std::vector<std::string> stops(const json& j);

// temperature, top_p, top_k, min_p, the penalties and seed (-1: random,
// as llama.cpp's clients send it).
// The request's sampler settings; a field it leaves out takes its value from
// `defaults` (the API's own, or the model's recommendation).
SamplingParams sampling(const json& j, const SamplingParams& defaults);

// OpenAI fields this server does not implement, refused instead of ignored:
// n and best_of above 1, echo, a non-empty logit_bias.
void refuse_unsupported(const json& j);

}  // namespace moelsp::http

// The API's core (routing, keys, the queue, health and metrics) and
// OpenAI's endpoints; llama.cpp's are in api_llama.cpp.
#include "api.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "api_internal.h"
#include "engine/json_limits.h"

namespace moelsp::http {

namespace {

// A "model" this server does not serve.
struct UnknownModel {
  std::string requested, served;
};

// More generations in flight than --max-queue.
struct Busy {
  int retry_after_s;
  size_t queued;
};

// max_tokens and its aliases: at least one token, at most 2^20.
int max_tokens(const json& j, const char* name, int fallback) { return int(int_field(j, name, fallback, 1, 1 << 20)); }

// `logprobs` of /v1/completions: an integer 0..20 (OpenAI allows 5, vLLM 20),
// the alternatives per token; absent or null: none.
int completion_logprobs_field(const json& j) {
  if (!has(j, "logprobs")) return -1;
  if (j["logprobs"].is_boolean()) return j["logprobs"].get<bool>() ? 0 : -1;
  return int(int_field(j, "logprobs", -1, 0, kMaxTopLogprobs));
}

// `logprobs: true` and `top_logprobs` of /v1/chat/completions.
int chat_logprobs_field(const json& j) {
  if (!bool_field(j, "logprobs", false)) {
    if (has(j, "top_logprobs")) throw BadField("field 'top_logprobs' needs 'logprobs': true", "top_logprobs");
    return -1;
  }
  return int(int_field(j, "top_logprobs", 0, 0, kMaxTopLogprobs));
}

// stream_options {"include_usage": true}: a last chunk with empty choices
// and the usage, before [DONE] (OpenAI's; agents read their token counts
// from it).
bool usage_chunk_asked(const json& j, bool stream) {
  if (!has(j, "stream_options")) return false;
  const json& o = j["stream_options"];
  if (!o.is_object()) throw BadField("field 'stream_options' must be an object", "stream_options");
  if (!stream) throw BadField("field 'stream_options' needs 'stream': true", "stream_options");
  return bool_field(o, "include_usage", false);
}

// The legacy completions shape: parallel arrays; text_offset counts bytes
// from the start of the generated text, continuing across stream chunks.
json completion_logprobs(const std::vector<TokenLogprob>& lps, size_t& offset) {
  json tokens = json::array(), values = json::array(), top = json::array(), offsets = json::array();
  for (const auto& lp : lps) {
    tokens.push_back(lp.text);
    values.push_back(lp.logprob);
    json alts = json::object();
    for (const auto& a : lp.top) alts[a.text] = a.logprob;
    top.push_back(alts);
    offsets.push_back(offset);
    offset += lp.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", values}, {"top_logprobs", top}, {"text_offset", offsets}};
}

// The chat shape: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
json chat_logprobs(const std::vector<TokenLogprob>& lps) {
  const auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
  };
  json content = json::array();
  for (const auto& lp : lps) {
    json alts = json::array();
    for (const auto& a : lp.top) alts.push_back({{"token", a.text}, {"logprob", a.logprob}, {"bytes", bytes(a.text)}});
    content.push_back({{"token", lp.text}, {"logprob", lp.logprob}, {"bytes", bytes(lp.text)}, {"top_logprobs", alts}});
  }
  return {{"content", content}};
}

const char* openai_reason(FinishReason r) {
  return r == FinishReason::Length || r == FinishReason::Timeout ? "length" : "stop";
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json usage(const Timings& t) {
  return {{"prompt_tokens", t.n_prompt},
          {"completion_tokens", t.n_generated},
          {"total_tokens", t.n_prompt + t.n_generated}};
}

// The chunk stream_options.include_usage asks for.
std::string usage_chunk(const std::string& id, const char* object, const std::string& model, const Timings& t) {
  return json{{"id", id},       {"object", object},         {"created", now_s()},
              {"model", model}, {"choices", json::array()}, {"usage", usage(t)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

// Constant-time comparison: the time taken does not say how much of the key matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= (unsigned char)(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

std::string error_json(const std::string& message, const std::string& type, const std::string& code,
                       const std::string& param) {
  return json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? json() : json(param)},
                {"code", code.empty() ? json() : json(code)}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

Api::Api(assist::Service& service, ApiOptions opt) : service_(service), opt_(std::move(opt)) {}

std::string Api::model_id() const {
  std::lock_guard lock(mu_);
  return model_.id;
}

void Api::check_model(const std::string& requested) const {
  if (requested.empty()) return;
  std::lock_guard lock(mu_);
  const std::string base = model_.file.substr(model_.file.find_last_of('/') + 1);
  const std::string stem = base.ends_with(".gguf") ? base.substr(0, base.size() - 5) : base;
  if (requested == model_.id || requested == base || requested == stem || requested == model_.file) return;
  if (std::find(opt_.served_names.begin(), opt_.served_names.end(), requested) != opt_.served_names.end()) return;
  throw UnknownModel{requested, model_.id};
}

void Api::set_model(ModelState m) {
  std::lock_guard lock(mu_);
  model_ = std::move(m);
}

std::shared_ptr<assist::Ticket> Api::ticket() {
  auto t = std::make_shared<assist::Ticket>();
  std::lock_guard lock(mu_);
  if (in_flight_.size() >= opt_.max_queue) {
    ++rejected_;
    throw Busy{std::clamp(int(std::ceil(mean_request_s_)), 1, 60), in_flight_.size()};
  }
  if (stopping_) t->cancel();  // shutting down: nothing new starts
  in_flight_.push_back({t, std::chrono::steady_clock::now()});
  return t;
}

void Api::done(const std::shared_ptr<assist::Ticket>& t) {
  std::lock_guard lock(mu_);
  const auto it = std::find_if(in_flight_.begin(), in_flight_.end(), [&](const InFlight& f) { return f.ticket == t; });
  if (it == in_flight_.end()) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->start).count();
  mean_request_s_ = 0.8 * mean_request_s_ + 0.2 * s;
  in_flight_.erase(it);
}

void Api::cancel_all() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  for (auto& f : in_flight_) f.ticket->cancel();
}

bool Api::stopping() const {
  std::lock_guard lock(mu_);
  return stopping_;
}

namespace {
// The Host header's name without its port: "[::1]:8080" → "[::1]".
std::string host_name(const std::string& host) {
  if (!host.empty() && host.front() == '[') return host.substr(0, host.find(']') + 1);
  return host.substr(0, host.find(':'));
}

bool is_json_type(const std::string& content_type) {
  std::string t = content_type.substr(0, content_type.find(';'));
  while (!t.empty() && t.back() == ' ') t.pop_back();
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return t == "application/json";
}
}  // namespace

std::optional<HttpResponse> Api::refused(const HttpRequest& req) const {
  if (opt_.loopback_hosts_only && !req.host.empty()) {
    std::string name = host_name(req.host);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    if (name != "127.0.0.1" && name != "localhost" && name != "[::1]")
      return error(403,
                   "Host '" + req.host +
                       "' is not a loopback name: without --api-key this server answers only requests for "
                       "127.0.0.1, localhost or [::1], so that web pages cannot reach it (DNS rebinding)",
                   "invalid_request_error", "host_not_allowed");
  }
  if (opt_.api_key.empty() && req.method == "POST" && !is_json_type(req.content_type))
    return error(415,
                 "POST bodies must be sent with 'Content-Type: application/json' (curl: -H 'Content-Type: "
                 "application/json'), not '" +
                     req.content_type + "': without --api-key this keeps web pages from reaching the model",
                 "invalid_request_error", "unsupported_media_type");
  return std::nullopt;
}

void Api::count(const std::string& endpoint, const Timings& t) {
  std::lock_guard lock(mu_);
  auto& c = counts_[endpoint];
  c[0] += 1, c[1] += t.n_prompt, c[2] += t.n_generated;
  if (t.n_generated > 0) {  // a generation ran (not a cache hit, not an error before it)
    ttft_ms_.add(t.queue_ms + t.prompt_ms);
    token_ms_.add(t.generate_ms / t.n_generated);
  }
}

void Api::Histogram::add(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++n;
}

std::string Api::Histogram::render(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    const std::string le = i < bounds.size() ? fmt::format("{}", bounds[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + fmt::format("{:.3f}", sum) + "\n" + name + "_count " + std::to_string(n) + "\n";
  return out;
}

HttpResponse Api::handle(const HttpRequest& req, const std::function<EventStream*()>& open_stream) {
  try {
    if (auto no = refused(req)) return *no;
    return route(req, open_stream);
  } catch (const std::exception& e) {  // a bug must cost one request, not the server
    return error(500, std::string("internal error: ") + e.what(), "server_error");
  }
}

HttpResponse Api::route(const HttpRequest& req, const std::function<EventStream*()>& open_stream) {
  const std::string path = req.target.substr(0, req.target.find('?'));
  if (path == "/health" || path == "/v1/health") return health();
  if (stopping()) return error(503, "the server is shutting down", "server_error", "shutting_down");
  if (!opt_.api_key.empty()) {
    const std::string want = "Bearer " + opt_.api_key;
    if (!same_secret(req.authorization, want))
      return error(401, "missing or wrong API key (Authorization: Bearer KEY)", "invalid_request_error",
                   "invalid_api_key");
  }
  const bool get = req.method == "GET", post = req.method == "POST";
  struct Route {
    const char* path;
    bool post;
  };
  static const Route routes[] = {
      {"/v1/models", false},          {"/metrics", false},     {"/v1/status", false}, {"/v1/completions", true},
      {"/v1/chat/completions", true}, {"/infill", true},       {"/completion", true}, {"/apply-template", true},
      {"/experts.svg", false},        {"/experts.json", false}};
  const auto route = std::find_if(std::begin(routes), std::end(routes), [&](const Route& r) { return path == r.path; });
  if (route == std::end(routes)) return error(404, "no such endpoint: " + path, "invalid_request_error", "not_found");
  if ((route->post && !post) || (!route->post && !get))
    return error(405, std::string("use ") + (route->post ? "POST" : "GET") + " for " + path);
  if (path == "/v1/models") return models();
  if (path == "/metrics") return metrics();
  ModelState m;
  {
    std::lock_guard lock(mu_);
    m = model_;
  }
  if (path == "/v1/status") {
    json s = {{"state", m.phase == ModelState::Phase::Ready     ? "ready"
                        : m.phase == ModelState::Phase::Loading ? "loading"
                                                                : "error"},
              {"model", m.id},
              {"message", m.message}};
    if (m.status_json) s["engine"] = json::parse(m.status_json(), nullptr, false);
    if (m.experts) s["expertUsage"] = {{"svg", "/experts.svg"}, {"json", "/experts.json"}};
    return ok(s);
  }
  if (m.phase == ModelState::Phase::Loading) {
    HttpResponse r = error(503, "the model is loading: " + m.message, "server_error", "loading");
    r.headers.push_back({"Retry-After", "2"});
    return r;
  }
  if (m.phase == ModelState::Phase::Error) return error(503, "the model failed to load: " + m.message, "server_error");
  if (path == "/experts.svg" || path == "/experts.json") {
    if (!m.experts) return error(404, "the model '" + m.id + "' has no routed experts", "invalid_request_error");
    const bool svg = path == "/experts.svg";
    HttpResponse r;
    r.content_type = svg ? "image/svg+xml" : "application/json";
    r.body = m.experts(svg);
    return r;
  }
  try {
    if (path == "/v1/completions") return completions(req, open_stream);
    if (path == "/v1/chat/completions") return chat_completions(req, open_stream);
    if (path == "/infill") return infill(req, open_stream);
    if (path == "/apply-template") return apply_template(req.body);
    return llama_completion(req, open_stream);
  } catch (const BadField& e) {
    return error(400, e.what(), "invalid_request_error", "", e.param);
  } catch (const json::parse_error& e) {
    return error(400, std::string("invalid JSON: ") + e.what());
  } catch (const json::exception& e) {  // our own handling of a valid body: a fault of ours
    return error(500, std::string("internal error: ") + e.what(), "server_error");
  } catch (const UnknownModel& u) {
    return error(404,
                 "the model '" + u.requested + "' is not served here; this server serves '" + u.served +
                     "' (GET /v1/models; --served-model-name adds names)",
                 "invalid_request_error", "model_not_found");
  } catch (const Busy& b) {
    HttpResponse r =
        error(429, "too many requests: " + std::to_string(b.queued) + " are generating or waiting; retry later",
              "rate_limit_error", "queue_full");
    r.headers.push_back({"Retry-After", std::to_string(b.retry_after_s)});
    return r;
  }
}

HttpResponse Api::health() {
  std::lock_guard lock(mu_);
  if (model_.phase == ModelState::Phase::Ready) return ok({{"status", "ok"}});
  HttpResponse r = ok({{"status", model_.phase == ModelState::Phase::Loading ? "loading model" : "error"},
                       {"message", model_.message}});
  r.status = 503;
  return r;
}

HttpResponse Api::models() {
  std::lock_guard lock(mu_);
  json data = json::array();
  if (model_.phase == ModelState::Phase::Ready)
    data.push_back({{"id", model_.id}, {"object", "model"}, {"created", 0}, {"owned_by", "moelsp"}});
  return ok({{"object", "list"}, {"data", data}});
}

HttpResponse Api::metrics() {
  std::string out;
  const assist::TelemetrySnapshot t = service_.telemetry();
  out += "# HELP moelsp_http_requests_total Requests by endpoint.\n# TYPE moelsp_http_requests_total counter\n";
  std::string tokens =
      "# HELP moelsp_http_generated_tokens_total Generated tokens by endpoint.\n"
      "# TYPE moelsp_http_generated_tokens_total counter\n";
  std::string prompts =
      "# HELP moelsp_http_prompt_tokens_total Prompt tokens by endpoint.\n"
      "# TYPE moelsp_http_prompt_tokens_total counter\n";
  ModelState m;
  {
    std::lock_guard lock(mu_);
    for (const auto& [ep, c] : counts_) {
      out += "moelsp_http_requests_total{endpoint=\"" + ep + "\"} " + std::to_string(c[0]) + "\n";
      prompts += "moelsp_http_prompt_tokens_total{endpoint=\"" + ep + "\"} " + std::to_string(c[1]) + "\n";
      tokens += "moelsp_http_generated_tokens_total{endpoint=\"" + ep + "\"} " + std::to_string(c[2]) + "\n";
    }
    m = model_;
    out += "# HELP moelsp_requests_in_flight Generations running or waiting.\n# TYPE moelsp_requests_in_flight gauge\n";
    out += "moelsp_requests_in_flight " + std::to_string(in_flight_.size()) + "\n";
    out +=
        "# HELP moelsp_requests_rejected_total Requests answered 429 because --max-queue were in flight.\n"
        "# TYPE moelsp_requests_rejected_total counter\n";
    out += "moelsp_requests_rejected_total " + std::to_string(rejected_) + "\n";
    out += ttft_ms_.render("moelsp_time_to_first_token_ms", "Queue and prompt time of each generation, in ms.");
    out += token_ms_.render("moelsp_time_per_output_token_ms", "Generation time per token of each generation, in ms.");
  }
  out += prompts + tokens;
  out +=
      "# HELP moelsp_completion_latency_ms Completion latency percentiles (service).\n"
      "# TYPE moelsp_completion_latency_ms gauge\n";
  out += "moelsp_completion_latency_ms{quantile=\"0.5\"} " + std::to_string(t.latency_p50_ms) + "\n";
  out += "moelsp_completion_latency_ms{quantile=\"0.95\"} " + std::to_string(t.latency_p95_ms) + "\n";
  out += "# HELP moelsp_ready 1 when the model is loaded.\n# TYPE moelsp_ready gauge\n";
  out += std::string("moelsp_ready ") + (m.phase == ModelState::Phase::Ready ? "1" : "0") + "\n";
  if (m.metrics_text) out += m.metrics_text();
  if (m.experts) out += "# Expert usage per MoE layer as a heatmap: GET /experts.svg (data: /experts.json)\n";
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4";
  r.body = out;
  return r;
}

// POST /v1/completions: prompt (text or token ids), `suffix` for fill in the
// middle, sampling, stop, stream.
HttpResponse Api::completions(const HttpRequest& req, const std::function<EventStream*()>& open_stream) {
  const json j = parse_body(req.body);
  check_model(string_field(j, "model"));
  refuse_unsupported(j);
  assist::TextInput in;
  if (!has(j, "prompt")) throw BadField("field 'prompt' is required", "prompt");
  const json& prompt = j["prompt"];
  if (prompt.is_string()) in.prompt = prompt;
  else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number())
    in.prompt_tokens = token_ids(prompt, "prompt");
  else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) in.prompt = prompt[0];
  else throw BadField("field 'prompt' must be a string, one string in an array, or an array of token ids", "prompt");
  if (has(j, "suffix")) in.suffix = string_field(j, "suffix");
  in.max_tokens = max_tokens(j, "max_tokens", 16);
  in.sampling = sampling(j, 1.0f);
  in.stop = stops(j);
  in.logprobs.top = completion_logprobs_field(j);
  in.ignore_eos = bool_field(j, "ignore_eos", false);  // llama.cpp's extension
  const bool stream = bool_field(j, "stream", false);
  const bool include_usage = usage_chunk_asked(j, stream);
  const std::string id = "cmpl-" + std::to_string(next_id_++);
  const std::string model_id = this->model_id();
  const Slot s = slot();
  LazyStream lazy{open_stream};
  LazyStream* const es = stream ? &lazy : nullptr;
  const auto chunk = [&](const std::string& text, const json& reason, const json& logprobs = nullptr) {
    return json{{"id", id},
                {"object", "text_completion"},
                {"created", now_s()},
                {"model", model_id},
                {"choices", {{{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", reason}}}}}
        .dump(-1, ' ', false, json::error_handler_t::replace);
  };
  // Streamed with logprobs: each chunk carries its tokens' logprobs, so it
  // is formatted where both are known (the generating thread), in order.
  const bool stream_lp = es && in.logprobs.top >= 0;
  std::vector<TokenLogprob> pending;
  size_t offset = 0;
  if (stream_lp) in.logprobs.on_logprob = [&](const TokenLogprob& lp) { pending.push_back(lp); };
  const assist::Generation g = pump<assist::Generation>(
      es, *s.ticket, req.client_gone, [&](const std::string& text) { return stream_lp ? text : chunk(text, nullptr); },
      [&](const OnText& on_text) {
        if (!stream_lp) return service_.text(in, on_text, *s.ticket);
        return service_.text(
            in,
            [&](const std::string& text) {
              const json lp = completion_logprobs(pending, offset);
              pending.clear();
              on_text(chunk(text, nullptr, lp));
            },
            *s.ticket);
      });
  count("/v1/completions", g.timings);
  if (auto f = failure(es, stopping(), g.reason, g.error, g.error_kind, true)) return *f;
  if (es) {
    es->get()->send(chunk("", openai_reason(g.reason)));
    if (include_usage) es->get()->send(usage_chunk(id, "text_completion", model_id, g.timings));
    es->get()->send("[DONE]");
    return streamed();
  }
  size_t offset0 = 0;
  const json logprobs = in.logprobs.top >= 0 ? completion_logprobs(g.logprobs, offset0) : json();
  return ok({{"id", id},
             {"object", "text_completion"},
             {"created", now_s()},
             {"model", model_id},
             {"choices",
              {{{"text", g.text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", openai_reason(g.reason)}}}},
             {"usage", usage(g.timings)}});
}

namespace {
// A message's text: a string, null (an assistant's tool-call turn: ""), or
// OpenAI's parts [{type: "text", text}]. Anything else — an object, a
// number, an image part this text-only model cannot see — is refused.
std::string message_text(const json& m, const std::string& at) {
  if (!m.contains("content") || m["content"].is_null()) return "";
  const json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array())
    throw BadField(at + ".content must be a string, null or an array of text parts, not " + c.type_name(), "messages");
  std::string text;
  for (const auto& part : c) {
    std::string type;
    if (part.is_object() && part.contains("type") && part["type"].is_string()) type = part["type"];
    if (type == "text" && part.contains("text") && part["text"].is_string()) text += part["text"].get<std::string>();
    else if (type == "text") throw BadField(at + ".content: a text part needs a string 'text'", "messages");
    else
      throw BadField(at + ".content: parts of type '" + type + "' are not supported (this model reads text only)",
                     "messages");
  }
  return text;
}
}  // namespace

// POST /v1/chat/completions: the conversation through the model's chat template.
// The conversation of an OpenAI chat request as the chat template sees it:
// `messages` with every field the client sent (tool_calls, tool_call_id,
// name, reasoning_content, …), their text parts joined into one string and a
// null content as "" (most templates concatenate it), a tool call's `arguments` given as a JSON
// string parsed into an object (templates iterate it; one that prints it with
// tojson gets the same JSON back); `tools`; chat_template_kwargs
// (enable_thinking and any other template variable) and reasoning_effort
// (gpt-oss's templates read it).
assist::ChatQuery Api::chat_query(const json& j) const {
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    throw BadField("field 'messages' must be a non-empty array of {role, content}", "messages");
  assist::ChatQuery q;
  q.as_given = true;
  json messages = json::array();
  for (size_t i = 0; i < j["messages"].size(); ++i) {
    const json& m = j["messages"][i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw BadField(at + " needs a string 'role'", "messages");
    json msg = m;
    std::string content = message_text(m, at);
    msg["content"] = content;  // null (an assistant's tool-call turn) as "", which every template can concatenate
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array())
      for (auto& call : msg["tool_calls"])
        if (call.is_object() && call.contains("function") && call["function"].is_object()) {
          json& args = call["function"]["arguments"];
          if (args.is_string() && json_limit_problem(args.get_ref<const std::string&>()).empty()) {
            json parsed = json::parse(args.get<std::string>(), nullptr, false);
            if (parsed.is_object()) args = std::move(parsed);
          }
        }
    q.messages.push_back({m["role"], content});
    messages.push_back(std::move(msg));
  }
  q.messages_json = messages.dump(-1, ' ', false, json::error_handler_t::replace);
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (!j["tools"].is_array()) throw BadField("field 'tools' must be an array of tool schemas", "tools");
    if (!j["tools"].empty())
      q.template_options.tools_json = j["tools"].dump(-1, ' ', false, json::error_handler_t::replace);
  }
  json extra = json::object();
  if (j.contains("chat_template_kwargs") && !j["chat_template_kwargs"].is_null()) {
    if (!j["chat_template_kwargs"].is_object())
      throw BadField("field 'chat_template_kwargs' must be an object", "chat_template_kwargs");
    for (const auto& [k, v] : j["chat_template_kwargs"].items()) {
      if (k == "enable_thinking") {
        if (!v.is_boolean())
          throw BadField("chat_template_kwargs.enable_thinking must be true or false", "chat_template_kwargs");
        q.template_options.enable_thinking = v.get<bool>();
      } else {
        extra[k] = v;
      }
    }
  }
  if (has(j, "reasoning_effort") && !extra.contains("reasoning_effort"))
    extra["reasoning_effort"] = string_field(j, "reasoning_effort");
  if (!extra.empty()) q.template_options.extra_json = extra.dump(-1, ' ', false, json::error_handler_t::replace);
  q.template_override = opt_.chat_template;
  return q;
}

// POST /apply-template (llama.cpp's): the prompt a chat request would
// generate from, without generating: {"prompt": "..."}.
HttpResponse Api::apply_template(const std::string& body) {
  const json j = parse_body(body);
  const assist::ChatQuery q = chat_query(j);
  try {
    const auto prompt = service_.chat_prompt(q);
    if (!prompt) return error(501, "the chat template is applied by the remote backend, not here", "server_error");
    return ok({{"prompt", *prompt}});
  } catch (const ChatTemplateError& e) {
    return error(400, e.what());
  }
}

namespace {
// tool_choice: "auto" (or absent) and "none" are honoured; forcing a call
// ("required", a named function) needs constrained decoding, not here yet.
bool tools_allowed(const json& j) {
  bool_field(j, "parallel_tool_calls", true);  // every call the model writes is returned
  if (!has(j, "tool_choice")) return true;
  const json& c = j["tool_choice"];
  if (c == "auto") return true;
  if (c == "none") return false;
  throw BadField("field 'tool_choice': only \"auto\" and \"none\" are supported (forcing a call is not yet)",
                 "tool_choice");
}

// What the parser found in a piece of output, as a chat delta's fields
// (empty when nothing); calls are numbered across the answer by `n_calls`.
json delta_fields(const assist::OutputDelta& d, int& n_calls, const std::string& id) {
  json delta = json::object();
  if (!d.content.empty()) delta["content"] = d.content;
  if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
  if (!d.calls.empty()) {
    json calls = json::array();
    for (const auto& c : d.calls) {
      calls.push_back({{"index", n_calls},
                       {"id", "call_" + id.substr(id.find('-') + 1) + "_" + std::to_string(n_calls)},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
      ++n_calls;
    }
    delta["tool_calls"] = calls;
  }
  return delta;
}
}  // namespace

HttpResponse Api::chat_completions(const HttpRequest& req, const std::function<EventStream*()>& open_stream) {
  const json j = parse_body(req.body);
  check_model(string_field(j, "model"));
  refuse_unsupported(j);
  assist::ChatQuery q = chat_query(j);
  q.max_tokens = max_tokens(j, has(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens", 1024);
  q.sampling = sampling(j, 1.0f);
  q.stop = stops(j);
  q.logprobs.top = chat_logprobs_field(j);
  const bool stream = bool_field(j, "stream", false);
  const bool include_usage = usage_chunk_asked(j, stream);
  const std::string id = "chatcmpl-" + std::to_string(next_id_++);
  const std::string model_id = this->model_id();
  // Tool calls in the model's own syntax and <think> reasoning, parsed out
  // of the text as it streams (assist/tool_calls.h).
  const bool with_tools = !q.template_options.tools_json.empty() && tools_allowed(j);
  const assist::ToolSyntax syntax = with_tools ? service_.tool_syntax(q.template_override) : assist::ToolSyntax::None;
  assist::OutputParser parser(syntax, q.template_options.tools_json);
  int n_calls = 0;
  const auto chunk = [&](const json& delta, const json& reason, const json& logprobs = nullptr) {
    json choice = {{"index", 0}, {"delta", delta}, {"finish_reason", reason}};
    if (!logprobs.is_null()) choice["logprobs"] = logprobs;
    return json{{"id", id},
                {"object", "chat.completion.chunk"},
                {"created", now_s()},
                {"model", model_id},
                {"choices", {choice}}}
        .dump(-1, ' ', false, json::error_handler_t::replace);
  };
  const Slot place = slot();
  assist::Ticket& t = *place.ticket;
  LazyStream lazy{[&] {
    EventStream* opened = open_stream();
    opened->send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
    return opened;
  }};
  LazyStream* const es = stream ? &lazy : nullptr;
  const bool stream_lp = es && q.logprobs.top >= 0;  // as in completions()
  std::vector<TokenLogprob> pending;
  if (stream_lp) q.logprobs.on_logprob = [&](const TokenLogprob& lp) { pending.push_back(lp); };
  const assist::ChatAnswer a = pump<assist::ChatAnswer>(
      es, t, req.client_gone,
      [&](const std::string& s) {
        if (stream_lp) return s;
        const json delta = delta_fields(parser.push(s), n_calls, id);
        return delta.empty() ? std::string() : chunk(delta, nullptr);
      },
      [&](const OnText& on_text) {
        if (!stream_lp) return service_.chat(q, on_text, t);
        return service_.chat(
            q,
            [&](const std::string& s) {
              const json delta = delta_fields(parser.push(s), n_calls, id);
              if (delta.empty()) return;  // held back: its logprobs go with the next chunk
              const json lp = chat_logprobs(pending);
              pending.clear();
              on_text(chunk(delta, nullptr, lp));
            },
            t);
      });
  count("/v1/chat/completions", a.timings);
  if (auto f = failure(es, stopping(), a.reason, a.error, a.error_kind, true)) return *f;
  if (es) {
    if (const json rest = delta_fields(parser.finish(), n_calls, id); !rest.empty())
      es->get()->send(chunk(rest, nullptr));
    es->get()->send(chunk(json::object(), n_calls > 0 ? "tool_calls" : openai_reason(a.reason)));
    if (include_usage) es->get()->send(usage_chunk(id, "chat.completion.chunk", model_id, a.timings));
    es->get()->send("[DONE]");
    return streamed();
  }
  assist::OutputDelta whole = parser.push(a.text);
  const assist::OutputDelta tail = parser.finish();
  whole.content += tail.content;
  whole.reasoning += tail.reasoning;
  whole.calls.insert(whole.calls.end(), tail.calls.begin(), tail.calls.end());
  json fields = delta_fields(whole, n_calls, id);
  // gpt-oss's analysis channel, or <think>, where llama.cpp's server puts reasoning.
  json message{{"role", "assistant"}, {"content", fields.value("content", n_calls > 0 ? json() : json(""))}};
  if (const std::string r = a.reasoning + whole.reasoning; !r.empty()) message["reasoning_content"] = r;
  if (fields.contains("tool_calls")) message["tool_calls"] = fields["tool_calls"];
  return ok({{"id", id},
             {"object", "chat.completion"},
             {"created", now_s()},
             {"model", model_id},
             {"choices",
              {{{"index", 0},
                {"message", message},
                {"logprobs", q.logprobs.top >= 0 ? chat_logprobs(a.logprobs) : json()},
                {"finish_reason", n_calls > 0 ? "tool_calls" : openai_reason(a.reason)}}}},
             {"usage", usage(a.timings)}});
}

}  // namespace moelsp::http

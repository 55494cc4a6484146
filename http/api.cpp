// The API's core: routing, keys, the queue, the model's names, /health,
// /metrics, /v1/status and /v1/models. The endpoints are in one file per
// protocol family (api.h).
#include "api.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "api_internal.h"

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

SamplingParams Api::sampling_defaults(float api_temperature) const {
  RecommendedSampling rec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rec = model_.sampling;
  }
  SamplingParams d;  // the OpenAI and Anthropic APIs' defaults: temperature as given, every filter off
  d.temperature = rec.temperature.value_or(api_temperature);
  d.top_p = rec.top_p.value_or(1.0f);
  d.top_k = rec.top_k.value_or(0);
  d.min_p = rec.min_p.value_or(0.0f);
  d.presence_penalty = d.frequency_penalty = 0;
  d.repeat_penalty = 1;
  return d;
}

std::string Api::served_as(const std::string& requested) const {
  std::lock_guard lock(mu_);
  if (requested.empty()) return model_.id;
  const std::string base = model_.file.substr(model_.file.find_last_of('/') + 1);
  const std::string stem = base.ends_with(".gguf") ? base.substr(0, base.size() - 5) : base;
  if (requested == model_.id || requested == base || requested == stem || requested == model_.file) return requested;
  if (std::find(opt_.served_names.begin(), opt_.served_names.end(), requested) != opt_.served_names.end())
    return requested;
  if (!opt_.served_names.empty()) throw UnknownModel{requested, model_.id};
  static std::atomic<int> logged{0};  // a few lines, not one per request
  if (logged.fetch_add(1) < 8)
    spdlog::info("a request asks for the model '{}': answered by '{}' (--served-model-name makes other names a 404)",
                 requested, model_.id);
  return requested;
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

namespace {
// Anthropic's error body, {"type": "error", "error": {"type", "message"}},
// for the errors the core makes in OpenAI's shape (/v1/messages' clients
// read only theirs).
HttpResponse anthropic_error(HttpResponse r) {
  const json e = json::parse(r.body, nullptr, false);
  if (e.is_discarded() || !e.contains("error")) return r;
  const char* type = r.status == 401   ? "authentication_error"
                     : r.status == 403 ? "permission_error"
                     : r.status == 404 ? "not_found_error"
                     : r.status == 413 ? "request_too_large"
                     : r.status == 429 ? "rate_limit_error"
                     : r.status == 503 ? "overloaded_error"
                     : r.status >= 500 ? "api_error"
                                       : "invalid_request_error";
  const std::string message = anthropic_wording(e["error"]);
  r.body = json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  return r;
}

struct Route {
  const char* path;
  bool post;
};
constexpr Route kRoutes[] = {{"/v1/models", false},
                             {"/metrics", false},
                             {"/v1/status", false},
                             {"/v1/completions", true},
                             {"/v1/chat/completions", true},
                             {"/v1/responses", true},
                             {"/v1/messages", true},
                             {"/v1/messages/count_tokens", true},
                             {"/infill", true},
                             {"/completion", true},
                             {"/apply-template", true},
                             {"/experts.svg", false},
                             {"/experts.json", false}};
}  // namespace

HttpResponse Api::handle(const HttpRequest& req, const std::function<EventStream*()>& open_stream) {
  const std::string path = req.target.substr(0, req.target.find('?'));
  HttpResponse r;
  try {
    if (auto no = refused(req)) r = *no;
    else r = route(req, open_stream);
  } catch (const std::exception& e) {  // a bug must cost one request, not the server
    r = error(500, std::string("internal error: ") + e.what(), "server_error");
  }
  if (path.starts_with("/v1/messages") && r.status >= 400) return anthropic_error(std::move(r));
  return r;
}

HttpResponse Api::route(const HttpRequest& req, const OpenStream& open_stream) {
  const std::string path = req.target.substr(0, req.target.find('?'));
  if (path == "/health" || path == "/v1/health") return health();
  if (stopping()) return error(503, "the server is shutting down", "server_error", "shutting_down");
  // Either header: OpenAI's clients send a bearer token, Anthropic's x-api-key.
  if (!opt_.api_key.empty() && !same_secret(req.authorization, "Bearer " + opt_.api_key) &&
      !same_secret(req.x_api_key, opt_.api_key))
    return error(401, "missing or wrong API key (Authorization: Bearer KEY, or x-api-key: KEY)",
                 "invalid_request_error", "invalid_api_key");
  const auto route =
      std::find_if(std::begin(kRoutes), std::end(kRoutes), [&](const Route& r) { return path == r.path; });
  if (route == std::end(kRoutes)) return error(404, "no such endpoint: " + path, "invalid_request_error", "not_found");
  if ((route->post && req.method != "POST") || (!route->post && req.method != "GET"))
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
    HttpResponse r;
    r.content_type = path == "/experts.svg" ? "image/svg+xml" : "application/json";
    r.body = m.experts(path == "/experts.svg");
    return r;
  }
  return generate(path, req, open_stream);
}

// The endpoints that read a body and may generate; a client's mistake in
// the body is its 400, naming the field.
HttpResponse Api::generate(const std::string& path, const HttpRequest& req, const OpenStream& open_stream) {
  try {
    if (path == "/v1/completions") return completions(req, open_stream);
    if (path == "/v1/chat/completions") return chat_completions(req, open_stream);
    if (path == "/v1/responses") return responses(req, open_stream);
    if (path == "/v1/messages") return messages(req, open_stream);
    if (path == "/v1/messages/count_tokens") return count_tokens(req);
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
                     "' (GET /v1/models; --served-model-name lists the names it answers to)",
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

}  // namespace moelsp::http

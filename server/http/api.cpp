#include "api.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace moelsp::http {

using json = nlohmann::json;

namespace {

HttpResponse error(int status, const std::string& message, const std::string& type = "invalid_request_error",
                   const std::string& code = "") {
  HttpResponse r;
  r.status = status;
  r.body = error_json(message, type, code);
  return r;
}

HttpResponse ok(const json& j) {
  HttpResponse r;
  r.body = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// A "model" this server does not serve.
struct UnknownModel {
  std::string requested, served;
};

// More generations in flight than --max-queue.
struct Busy {
  int retry_after_s;
  size_t queued;
};

struct BadField : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A request field of the expected type, or a 400 that names it.
template <class T>
T field(const json& j, const char* name, T fallback) {
  if (!j.contains(name) || j[name].is_null()) return fallback;
  try {
    return j[name].get<T>();
  } catch (const json::exception&) {
    throw BadField(std::string("field '") + name + "' has the wrong type");
  }
}

std::vector<std::string> stops(const json& j) {
  if (!j.contains("stop") || j["stop"].is_null()) return {};
  if (j["stop"].is_string()) return {j["stop"].get<std::string>()};
  if (j["stop"].is_array()) {
    std::vector<std::string> v;
    for (const auto& s : j["stop"]) {
      if (!s.is_string()) throw BadField("field 'stop' must be a string or an array of strings");
      v.push_back(s);
    }
    return v;
  }
  throw BadField("field 'stop' must be a string or an array of strings");
}

SamplingParams sampling(const json& j, float default_temperature) {
  SamplingParams p;
  p.temperature = field<float>(j, "temperature", default_temperature);
  p.top_p = field<float>(j, "top_p", 1.0f);
  p.top_k = field<int>(j, "top_k", 0);
  p.min_p = field<float>(j, "min_p", 0.0f);
  p.presence_penalty = field<float>(j, "presence_penalty", 0.0f);
  p.frequency_penalty = field<float>(j, "frequency_penalty", 0.0f);
  p.repeat_penalty = field<float>(j, "repeat_penalty", 1.0f);
  p.seed = field<uint64_t>(j, "seed", 0);
  if (!(p.temperature >= 0 && p.temperature <= 10)) throw BadField("field 'temperature' must be within [0, 10]");
  if (!(p.top_p > 0 && p.top_p <= 1)) throw BadField("field 'top_p' must be within (0, 1]");
  if (!(p.min_p >= 0 && p.min_p <= 1)) throw BadField("field 'min_p' must be within [0, 1]");
  return p;
}

int max_tokens(const json& j, const char* name, int fallback) {
  const int n = field<int>(j, name, fallback);
  if (n < 1 || n > 1 << 20) throw BadField(std::string("field '") + name + "' must be within [1, 1048576]");
  return n;
}

// `logprobs` of /v1/completions: an integer 0..20 (OpenAI allows 5, vLLM 20),
// the alternatives per token; absent or null: none.
int completion_logprobs_field(const json& j) {
  if (!j.contains("logprobs") || j["logprobs"].is_null()) return -1;
  if (j["logprobs"].is_boolean()) return j["logprobs"].get<bool>() ? 0 : -1;
  const int n = field<int>(j, "logprobs", -1);
  if (n < 0 || n > kMaxTopLogprobs) throw BadField("field 'logprobs' must be within [0, 20]");
  return n;
}

// `logprobs: true` and `top_logprobs` of /v1/chat/completions.
int chat_logprobs_field(const json& j) {
  if (!field<bool>(j, "logprobs", false)) {
    if (j.contains("top_logprobs") && !j["top_logprobs"].is_null())
      throw BadField("field 'top_logprobs' needs 'logprobs': true");
    return -1;
  }
  const int n = field<int>(j, "top_logprobs", 0);
  if (n < 0 || n > kMaxTopLogprobs) throw BadField("field 'top_logprobs' must be within [0, 20]");
  return n;
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

// Streams without making the engine wait on a client: `generate` runs on a
// thread of its own and hands its text over through a queue; this thread
// (the connection's) writes it, and a failed write cancels the request. So a
// client that stops reading holds only its own connection, never the
// engine's scheduler thread that every other request shares.
using OnText = std::function<void(const std::string&)>;
template <class Result>
Result pump(EventStream* es, assist::Ticket& t, const std::function<std::string(const std::string&)>& event,
            const std::function<Result(const OnText&)>& generate) {
  if (!es) return generate(nullptr);
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::string> queue;
  bool finished = false;
  Result result;
  std::thread worker([&] {
    Result out;
    try {
      out = generate([&](const std::string& s) {
        {
          std::lock_guard lock(m);
          queue.push_back(s);
        }
        cv.notify_one();
      });
    } catch (const std::exception& e) {
      out.reason = FinishReason::Error;
      out.error = e.what();
    }
    {
      std::lock_guard lock(m);
      result = std::move(out);
      finished = true;
    }
    cv.notify_one();
  });
  bool open = true;
  for (;;) {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return finished || !queue.empty(); });
    if (queue.empty() && finished) break;
    std::deque<std::string> batch;
    batch.swap(queue);
    lock.unlock();
    for (const auto& s : batch)
      if (open && !es->send(event(s))) {
        open = false;
        t.cancel();  // the client left: stop generating
      }
  }
  worker.join();
  return result;
}

// What handle() returns once a response went out as a stream.
HttpResponse streamed() {
  HttpResponse r;
  r.status = 0;
  return r;
}

int64_t now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json usage(const Timings& t) {
  return {{"prompt_tokens", t.n_prompt},
          {"completion_tokens", t.n_generated},
          {"total_tokens", t.n_prompt + t.n_generated}};
}

// Constant-time comparison: the time taken does not say how much of the key matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= (unsigned char)(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

std::string error_json(const std::string& message, const std::string& type, const std::string& code) {
  return json{{"error", {{"message", message}, {"type", type}, {"code", code.empty() ? json() : json(code)}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
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
    return route(req, open_stream);
  } catch (const std::exception& e) {  // a bug must cost one request, not the server
    return error(500, std::string("internal error: ") + e.what(), "server_error");
  }
}

HttpResponse Api::route(const HttpRequest& req, const std::function<EventStream*()>& open_stream) {
  const std::string path = req.target.substr(0, req.target.find('?'));
  if (path == "/health" || path == "/v1/health") return health();
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
    if (path == "/v1/completions") return completions(req.body, open_stream);
    if (path == "/v1/chat/completions") return chat_completions(req.body, open_stream);
    if (path == "/infill") return infill(req.body, open_stream);
    if (path == "/apply-template") return apply_template(req.body);
    return llama_completion(req.body, open_stream);
  } catch (const BadField& e) {
    return error(400, e.what());
  } catch (const json::exception& e) {
    return error(400, std::string("invalid JSON: ") + e.what());
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
HttpResponse Api::completions(const std::string& body, const std::function<EventStream*()>& open_stream) {
  const json j = json::parse(body);
  if (!j.is_object()) throw BadField("the body must be a JSON object");
  check_model(field<std::string>(j, "model", ""));
  assist::TextInput in;
  const json prompt = j.value("prompt", json(""));
  if (prompt.is_string()) in.prompt = prompt;
  else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number_integer())
    in.prompt_tokens = prompt.get<std::vector<TokenId>>();
  else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) in.prompt = prompt[0];
  else throw BadField("field 'prompt' must be a string, one string in an array, or an array of token ids");
  if (j.contains("suffix") && !j["suffix"].is_null()) in.suffix = field<std::string>(j, "suffix", "");
  in.max_tokens = max_tokens(j, "max_tokens", 16);
  in.sampling = sampling(j, 1.0f);
  in.stop = stops(j);
  in.logprobs.top = completion_logprobs_field(j);
  in.ignore_eos = field<bool>(j, "ignore_eos", false);  // llama.cpp's extension
  const bool stream = field<bool>(j, "stream", false);
  const std::string id = "cmpl-" + std::to_string(next_id_++);
  const std::string model_id = this->model_id();
  auto t = ticket();
  EventStream* es = stream ? open_stream() : nullptr;
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
      es, *t, [&](const std::string& s) { return stream_lp ? s : chunk(s, nullptr); },
      [&](const OnText& on_text) {
        if (!stream_lp) return service_.text(in, on_text, *t);
        return service_.text(
            in,
            [&](const std::string& s) {
              const json lp = completion_logprobs(pending, offset);
              pending.clear();
              on_text(chunk(s, nullptr, lp));
            },
            *t);
      });
  done(t);
  count("/v1/completions", g.timings);
  if (g.reason == FinishReason::Error) {
    if (es) return es->send(error_json(g.error, "server_error")), streamed();
    const bool client = g.error.find("outside the vocabulary") != std::string::npos;
    return error(client ? 400 : 500, g.error, client ? "invalid_request_error" : "server_error");
  }
  if (es) {
    es->send(chunk("", openai_reason(g.reason)));
    es->send("[DONE]");
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
    throw BadField("field 'messages' must be a non-empty array of {role, content}");
  assist::ChatQuery q;
  q.as_given = true;
  json messages = json::array();
  for (const auto& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw BadField("each message needs a string 'role'");
    json msg = m;
    std::string content;
    if (m.contains("content") && m["content"].is_string()) content = m["content"];
    else if (m.contains("content") && m["content"].is_array())  // [{type: text, text}]
      for (const auto& part : m["content"])
        if (part.is_object() && part.value("type", "") == "text") content += part.value("text", "");
    msg["content"] = content;  // null (an assistant's tool-call turn) as "", which every template can concatenate
    if (msg.contains("tool_calls") && msg["tool_calls"].is_array())
      for (auto& call : msg["tool_calls"])
        if (call.is_object() && call.contains("function") && call["function"].is_object()) {
          json& args = call["function"]["arguments"];
          if (args.is_string()) {
            json parsed = json::parse(args.get<std::string>(), nullptr, false);
            if (parsed.is_object()) args = std::move(parsed);
          }
        }
    q.messages.push_back({m["role"], content});
    messages.push_back(std::move(msg));
  }
  q.messages_json = messages.dump(-1, ' ', false, json::error_handler_t::replace);
  if (j.contains("tools") && !j["tools"].is_null()) {
    if (!j["tools"].is_array()) throw BadField("field 'tools' must be an array of tool schemas");
    if (!j["tools"].empty())
      q.template_options.tools_json = j["tools"].dump(-1, ' ', false, json::error_handler_t::replace);
  }
  json extra = json::object();
  if (j.contains("chat_template_kwargs") && !j["chat_template_kwargs"].is_null()) {
    if (!j["chat_template_kwargs"].is_object()) throw BadField("field 'chat_template_kwargs' must be an object");
    for (const auto& [k, v] : j["chat_template_kwargs"].items()) {
      if (k == "enable_thinking") {
        if (!v.is_boolean()) throw BadField("chat_template_kwargs.enable_thinking must be true or false");
        q.template_options.enable_thinking = v.get<bool>();
      } else {
        extra[k] = v;
      }
    }
  }
  if (j.contains("reasoning_effort") && j["reasoning_effort"].is_string() && !extra.contains("reasoning_effort"))
    extra["reasoning_effort"] = j["reasoning_effort"];
  if (!extra.empty()) q.template_options.extra_json = extra.dump(-1, ' ', false, json::error_handler_t::replace);
  q.template_override = opt_.chat_template;
  return q;
}

// POST /apply-template (llama.cpp's): the prompt a chat request would
// generate from, without generating: {"prompt": "..."}.
HttpResponse Api::apply_template(const std::string& body) {
  const json j = json::parse(body);
  if (!j.is_object()) throw BadField("the body must be a JSON object");
  const assist::ChatQuery q = chat_query(j);
  try {
    const auto prompt = service_.chat_prompt(q);
    if (!prompt) return error(501, "the chat template is applied by the remote backend, not here", "server_error");
    return ok({{"prompt", *prompt}});
  } catch (const ChatTemplateError& e) {
    return error(400, e.what());
  }
}

HttpResponse Api::chat_completions(const std::string& body, const std::function<EventStream*()>& open_stream) {
  const json j = json::parse(body);
  if (!j.is_object()) throw BadField("the body must be a JSON object");
  check_model(field<std::string>(j, "model", ""));
  assist::ChatQuery q = chat_query(j);
  q.max_tokens = max_tokens(j, j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens", 1024);
  q.sampling = sampling(j, 1.0f);
  q.stop = stops(j);
  q.logprobs.top = chat_logprobs_field(j);
  const bool stream = field<bool>(j, "stream", false);
  const std::string id = "chatcmpl-" + std::to_string(next_id_++);
  const std::string model_id = this->model_id();
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
  auto t = ticket();
  EventStream* es = nullptr;
  if (stream) {
    es = open_stream();
    es->send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
  }
  const bool stream_lp = es && q.logprobs.top >= 0;  // as in completions()
  std::vector<TokenLogprob> pending;
  if (stream_lp) q.logprobs.on_logprob = [&](const TokenLogprob& lp) { pending.push_back(lp); };
  const assist::ChatAnswer a = pump<assist::ChatAnswer>(
      es, *t,
      [&](const std::string& s) {
        return stream_lp ? s : chunk({{"content", s}}, nullptr);
      },
      [&](const OnText& on_text) {
        if (!stream_lp) return service_.chat(q, on_text, *t);
        return service_.chat(
            q,
            [&](const std::string& s) {
              const json lp = chat_logprobs(pending);
              pending.clear();
              on_text(chunk({{"content", s}}, nullptr, lp));
            },
            *t);
      });
  done(t);
  count("/v1/chat/completions", a.timings);
  if (a.reason == FinishReason::Error) {
    if (es) return es->send(error_json(a.error, "server_error")), streamed();
    return error(a.error.find("chat.template") != std::string::npos ? 400 : 500, a.error, "server_error");
  }
  if (es) {
    es->send(chunk(json::object(), openai_reason(a.reason)));
    es->send("[DONE]");
    return streamed();
  }
  // gpt-oss's analysis channel, where llama.cpp's server puts reasoning.
  json message{{"role", "assistant"}, {"content", a.text}};
  if (!a.reasoning.empty()) message["reasoning_content"] = a.reasoning;
  return ok({{"id", id},
             {"object", "chat.completion"},
             {"created", now_s()},
             {"model", model_id},
             {"choices",
              {{{"index", 0},
                {"message", message},
                {"logprobs", q.logprobs.top >= 0 ? chat_logprobs(a.logprobs) : json()},
                {"finish_reason", openai_reason(a.reason)}}}},
             {"usage", usage(a.timings)}});
}

// POST /infill (llama.cpp's, as llama.vim and llama.vscode send it): the
// editor pipeline — FIM prompt with input_extra ahead of the prefix, the
// cache and type-through, post-processing.
HttpResponse Api::infill(const std::string& body, const std::function<EventStream*()>& open_stream) {
  const json j = json::parse(body);
  if (!j.is_object()) throw BadField("the body must be a JSON object");
  // Fields llama.vim and llama.vscode send that change nothing here: model
  // (llama.vscode sends its chat model's name), id_slot, samplers, n_indent,
  // cache_prompt (the prefix cache is always on), time of input_extra chunks.
  const std::string prefix = field<std::string>(j, "input_prefix", ""),
                    suffix = field<std::string>(j, "input_suffix", "");
  const std::string typed = field<std::string>(j, "prompt", "");  // the cursor line's text before the cursor
  assist::CompletionQuery q;
  q.text = prefix + typed + suffix;
  q.cursor = prefix.size() + typed.size();
  if (j.contains("input_extra") && j["input_extra"].is_array())
    for (const auto& chunk : j["input_extra"]) {
      if (!chunk.is_object()) throw BadField("field 'input_extra' must be an array of {filename, text}");
      q.extra += "// " + chunk.value("filename", std::string("(unnamed)")) + "\n" + chunk.value("text", std::string());
      if (!q.extra.empty() && q.extra.back() != '\n') q.extra += '\n';
    }
  // n_predict 0 is the plugins' warm-up: the context is processed (its KV
  // stays in the prefix cache for the next keystroke) and nothing is returned.
  const int n_predict = field<int>(j, "n_predict", 64);
  if (n_predict < 0 || n_predict > 1 << 20) throw BadField("field 'n_predict' must be within [0, 1048576]");
  const bool warm_up = n_predict == 0;
  q.settings.max_tokens = warm_up ? 1 : n_predict;
  q.settings.time_budget_ms = field<int>(j, "t_max_predict_ms", 1500);
  if (q.settings.time_budget_ms <= 0) q.settings.time_budget_ms = 1500;
  // n_cmpl (llama.vscode): that many suggestions, the first greedy; an array is returned when > 1.
  const int n_cmpl = field<int>(j, "n_cmpl", 1);
  if (n_cmpl < 1 || n_cmpl > 8) throw BadField("Field 'n_cmpl': Value must be between 1 and 8");
  q.alternatives = n_cmpl;
  auto t = ticket();
  const auto t0 = std::chrono::steady_clock::now();
  const assist::CompletionAnswer a = service_.complete(q, *t);
  done(t);
  const Timings& tm = a.timings;
  count("/infill", tm);
  if (!a.error.empty()) return error(500, a.error, "server_error");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  int n_ctx = 0;
  {
    std::lock_guard lock(mu_);
    n_ctx = model_.n_ctx;
  }
  // What llama.cpp's server answers and the plugins read: content, the
  // cache, and timings (llama.vscode's status bar reads them as numbers).
  const int prompt_n = tm.n_prompt - tm.n_prompt_cached;
  const double predict_ms = a.from_cache ? ms : tm.generate_ms;
  const auto result = [&](const std::string& content) {
    return json{{"content", warm_up ? "" : content},
                {"stop", true},
                {"truncated", tm.n_prompt_cut > 0},
                {"tokens_cached", tm.n_prompt_cached},
                {"tokens_evaluated", tm.n_prompt},
                {"model", model_id()},
                {"cached", a.from_cache},
                {"generation_settings", {{"n_ctx", n_ctx}, {"n_predict", n_predict}}},
                {"timings",
                 {{"prompt_n", prompt_n},
                  {"prompt_ms", tm.prompt_ms},
                  {"prompt_per_token_ms", prompt_n > 0 ? tm.prompt_ms / prompt_n : 0.0},
                  {"prompt_per_second", tm.prompt_tps()},
                  {"predicted_n", tm.n_generated},
                  {"predicted_ms", predict_ms},
                  {"predicted_per_token_ms", tm.n_generated > 0 ? predict_ms / tm.n_generated : 0.0},
                  {"predicted_per_second", tm.generate_tps()}}}};
  };
  // response_fields (llama.vim): a flat object of the paths asked for, "timings/prompt_n" → value.
  const auto shaped = [&](const json& r) {
    if (!j.contains("response_fields") || !j["response_fields"].is_array()) return r;
    json flat = json::object();
    for (const auto& f : j["response_fields"]) {
      if (!f.is_string() || f.get<std::string>().empty()) continue;
      const std::string path = f;
      const json* cur = &r;
      for (size_t at = 0; cur && at <= path.size();) {
        const size_t slash = std::min(path.find('/', at), path.size());
        const std::string key = path.substr(at, slash - at);
        cur = cur->is_object() && cur->contains(key) ? &(*cur)[key] : nullptr;
        at = slash + 1;
      }
      if (cur) flat[path] = *cur;
    }
    return flat;
  };
  std::vector<std::string> texts = a.texts;
  if (texts.empty()) texts.push_back("");
  if (field<bool>(j, "stream", false)) {
    EventStream* es = open_stream();
    es->send(json{{"content", warm_up ? "" : texts.front()}, {"stop", false}}.dump(-1, ' ', false,
                                                                                   json::error_handler_t::replace));
    json last = result("");  // as llama.cpp ends a stream
    es->send(shaped(last).dump(-1, ' ', false, json::error_handler_t::replace));
    return streamed();
  }
  if (n_cmpl == 1) return ok(shaped(result(texts.front())));
  json all = json::array();
  for (int k = 0; k < n_cmpl && k < int(texts.size()); ++k) all.push_back(shaped(result(texts[size_t(k)])));
  return ok(all);
}

// POST /completion (llama.cpp's): prompt, n_predict, samplers, stream.
HttpResponse Api::llama_completion(const std::string& body, const std::function<EventStream*()>& open_stream) {
  const json j = json::parse(body);
  if (!j.is_object()) throw BadField("the body must be a JSON object");
  assist::TextInput in;
  const json prompt = j.value("prompt", json(""));
  if (prompt.is_string()) in.prompt = prompt;
  else if (prompt.is_array() && (prompt.empty() || prompt[0].is_number_integer()))
    in.prompt_tokens = prompt.get<std::vector<TokenId>>();
  else throw BadField("field 'prompt' must be a string or an array of token ids");
  in.max_tokens = max_tokens(j, "n_predict", 128);
  in.sampling = sampling(j, 0.8f);
  in.stop = stops(j);
  in.t_max_predict_ms = field<int64_t>(j, "t_max_predict_ms", 0);
  const bool stream = field<bool>(j, "stream", false);
  auto t = ticket();
  EventStream* es = stream ? open_stream() : nullptr;
  const assist::Generation g = pump<assist::Generation>(
      es, *t,
      [&](const std::string& s) {
        return json{{"content", s}, {"stop", false}}.dump(-1, ' ', false, json::error_handler_t::replace);
      },
      [&](const OnText& on_text) { return service_.text(in, on_text, *t); });
  done(t);
  count("/completion", g.timings);
  if (g.reason == FinishReason::Error) {
    if (es) return es->send(error_json(g.error, "server_error")), streamed();
    return error(500, g.error, "server_error");
  }
  const json timings = {{"prompt_n", g.timings.n_prompt},
                        {"prompt_ms", g.timings.prompt_ms},
                        {"predicted_n", g.timings.n_generated},
                        {"predicted_ms", g.timings.generate_ms},
                        {"predicted_per_second", g.timings.generate_tps()}};
  const json final = {{"content", es ? "" : g.text},
                      {"stop", true},
                      {"stop_type", to_string(g.reason)},
                      {"tokens_predicted", g.timings.n_generated},
                      {"tokens_evaluated", g.timings.n_prompt},
                      {"tokens_cached", g.timings.n_prompt_cached},
                      {"timings", timings}};
  if (es) {
    es->send(final.dump());
    return streamed();
  }
  return ok(final);
}

}  // namespace moelsp::http

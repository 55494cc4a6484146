// The HTTP API of `moelsp serve`, without the transport: a request in, a
// response (or a stream of server-sent events) out. One file per protocol
// family over one conversation model (conversation.h) and one place that
// shapes answers (answer.h):
//   api.cpp            routing, keys, the queue, /health, /metrics, /v1/status, /v1/models
//   api_openai.cpp     /v1/completions, /v1/chat/completions, /apply-template
//   api_responses.cpp  /v1/responses (OpenAI Responses: Codex CLI)
//   api_anthropic.cpp  /v1/messages, /v1/messages/count_tokens (Claude Code)
//   api_llama.cpp      /infill, /completion (llama.vim, llama.vscode)
// http_server.cpp carries it over Boost.Beast.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "assist/model_host.h"
#include "assist/service.h"

namespace moelsp::http {

class AnswerShape;
struct Conversation;
struct LazyStream;
struct Sse;

struct HttpRequest {
  std::string method;  // GET, POST, ...
  std::string target;  // path (and query)
  std::string body;
  std::string authorization;  // the Authorization header, as sent
  std::string x_api_key;      // the x-api-key header (Anthropic's clients), as sent
  std::string host;           // the Host header, as sent
  std::string content_type;   // the Content-Type header, as sent
  // True once the client has closed or reset its connection: a generation
  // it asked for is then cancelled (checked while the request runs).
  std::function<bool()> client_gone;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A response sent as server-sent events. send_event() writes one event —
// `event: NAME` (when not empty) and `data: …` — and returns false once the
// client has gone (the generation then stops).
class EventStream {
 public:
  virtual ~EventStream() = default;
  virtual bool send_event(const std::string& name, const std::string& data) = 0;
  bool send(const std::string& data) { return send_event("", data); }
  // False once the client has gone (the headers could not be written).
  virtual bool ok() const { return true; }
};

// OpenAI's error body, {"error": {"message", "type", "param", "code"}}; safe for any
// bytes in `message` (a client's path or a parse error may quote them).
std::string error_json(const std::string& message, const std::string& type = "invalid_request_error",
                       const std::string& code = "", const std::string& param = "");

struct ApiOptions {
  std::string api_key;  // empty: no key needed (loopback by default)
  // Closed to web pages: without a key every POST must say Content-Type:
  // application/json (a cross-site "simple" request cannot, without a CORS
  // preflight), and with this set (no key, a loopback address) a Host that
  // is not 127.0.0.1, localhost or [::1] is refused (a page that rebinds
  // its own name to 127.0.0.1 cannot read answers).
  bool loopback_hosts_only = false;
  std::string chat_template;  // when the model's own is missing or unknown
  // Generations running or waiting for the engine at most; beyond, 429 with
  // Retry-After (the mean duration of recent requests, in whole seconds).
  size_t max_queue = 64;
  // The names the model answers to in requests' "model" field besides its
  // id, the file name and "". Empty: any name is answered by the loaded
  // model and echoed (as llama-server does: coding agents ask for their own
  // vendor's names, Claude Code for claude-… models), with a log line. Not
  // empty: any other name is a 404. llama.cpp's endpoints ignore the field.
  std::vector<std::string> served_names;
};

// The sampler settings the model's author recommends, from the GGUF's
// general.sampling.* keys (as llama.cpp reads them): the defaults for a
// request that does not set its own, in place of the API's (temperature 1).
struct RecommendedSampling {
  std::optional<float> temperature, top_p, min_p;
  std::optional<int> top_k;
};

// What the model host's hooks tell the API about the model (cli/cmd_serve.cpp).
struct ModelState {
  using Phase = assist::ModelPhase;
  Phase phase = Phase::Loading;
  std::string id;                             // the model's name, for /v1/models and responses
  int n_ctx = 0;                              // tokens per sequence (llama.cpp clients read generation_settings.n_ctx)
  std::string file;                           // the GGUF path: its name and stem are accepted as the model's name
  std::string message;                        // loading progress or the error
  std::function<std::string()> status_json;   // the plan, hardware and engine metrics (/v1/status)
  std::function<std::string()> metrics_text;  // engine metrics as Prometheus lines (/metrics)
  // Expert usage since load (/experts.svg and /experts.json): the heatmap
  // when `svg`, else its data; null for a model without routed experts.
  std::function<std::string(bool svg)> experts = nullptr;
  RecommendedSampling sampling = {};
};

class Api {
 public:
  Api(assist::Service& service, ApiOptions opt);
  void set_model(ModelState m);

  // Answers `req`. For a streaming request it calls `open_stream`, sends
  // the events through it and returns {status 0}: the response has been sent.
  HttpResponse handle(const HttpRequest& req, const std::function<EventStream*()>& open_stream);

  // Ends every generation in flight and refuses new ones (shutdown): a
  // stream ends with an error event and [DONE], a waiting request gets 503.
  void cancel_all();

 private:
  using OpenStream = std::function<EventStream*()>;
  std::string model_id() const;
  // The name a response gives the model: `requested` when the server
  // answers to it (logged when only because no names were listed), the
  // model's id when empty. Throws (404 model_not_found) when names are
  // listed and `requested` is not among them.
  std::string served_as(const std::string& requested) const;
  // What a request's sampler settings are where it sets none: the model's
  // recommendation, else the API's default (`api_temperature`, no filters).
  SamplingParams sampling_defaults(float api_temperature) const;
  HttpResponse route(const HttpRequest& req, const OpenStream& open_stream);
  HttpResponse generate(const std::string& path, const HttpRequest& req, const OpenStream& open_stream);
  HttpResponse models();
  HttpResponse completions(const HttpRequest& req, const OpenStream& open_stream);
  HttpResponse chat_completions(const HttpRequest& req, const OpenStream& open_stream);
  HttpResponse responses(const HttpRequest& req, const OpenStream& open_stream);
  HttpResponse messages(const HttpRequest& req, const OpenStream& open_stream);
  HttpResponse count_tokens(const HttpRequest& req);
  HttpResponse apply_template(const std::string& body);
  HttpResponse infill(const HttpRequest& req, const OpenStream& open_stream);
  HttpResponse llama_completion(const HttpRequest& req, const OpenStream& open_stream);
  // A chat through the conversation model, whatever the protocol: the
  // template's query built from `c`, the model's tool calls and reasoning
  // parsed out of its text and handed to `shape` (answer.h), streamed or
  // as one body. `endpoint` names it in /metrics.
  struct ChatRun {
    const HttpRequest& req;
    const OpenStream& open_stream;
    const Conversation& conversation;
    assist::ChatQuery query;  // sampling, limits and stops set; the rest from `conversation`
    bool stream = false;
    AnswerShape& shape;
    const char* endpoint;
  };
  HttpResponse run_chat(ChatRun run);
  void allow_reasoning(assist::ChatQuery& q);  // answer.cpp
  assist::ChatAnswer pump_chat(assist::ChatQuery& q, assist::Ticket& t, LazyStream* es,
                               const std::function<bool()>& client_gone,
                               const std::function<std::vector<Sse>(const std::string&)>& events, AnswerShape& shape);
  HttpResponse health();
  HttpResponse metrics();
  // A request's place in the queue (429 Busy beyond --max-queue), given
  // back when the Slot is destroyed, whatever ended the request.
  struct Slot {
    Api& api;
    std::shared_ptr<assist::Ticket> ticket;
    ~Slot() { api.done(ticket); }
  };
  Slot slot() { return {*this, ticket()}; }
  std::shared_ptr<assist::Ticket> ticket();
  void done(const std::shared_ptr<assist::Ticket>& t);
  bool stopping() const;
  // A refusal by the transport rules (Host, Content-Type), or nullopt.
  std::optional<HttpResponse> refused(const HttpRequest& req) const;
  void count(const std::string& endpoint, const Timings& t);

  assist::Service& service_;
  ApiOptions opt_;
  mutable std::mutex mu_;
  ModelState model_;
  struct InFlight {
    std::shared_ptr<assist::Ticket> ticket;
    std::chrono::steady_clock::time_point start;
  };
  std::vector<InFlight> in_flight_;
  double mean_request_s_ = 1.0;  // moving average, for Retry-After
  uint64_t rejected_ = 0;        // 429s
  bool stopping_ = false;
  std::map<std::string, std::array<int64_t, 3>> counts_;  // endpoint → requests, prompt tokens, generated tokens
  // Prometheus histograms (cumulative at render time): time to first token
  // (queue + prompt, server side) and time per generated token, in ms.
  struct Histogram {
    std::vector<double> bounds;
    std::vector<int64_t> counts;  // per bucket, the last one +Inf
    double sum = 0;
    int64_t n = 0;
    explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
    void add(double v);
    std::string render(const std::string& name, const std::string& help) const;
  };
  Histogram ttft_ms_{{10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000}};
  Histogram token_ms_{{1, 2, 5, 10, 20, 50, 100, 250, 1000}};
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace moelsp::http

#include "server.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "completion.h"
#include "documents.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "transport.h"

namespace moelsp::lsp {

using json = nlohmann::json;

// JSON-RPC / LSP error codes.
enum ErrorCode : int {
  kParseError = -32700,
  kInvalidRequest = -32600,
  kMethodNotFound = -32601,
  kInvalidParams = -32602,
  kInternalError = -32603,
  kServerNotInitialized = -32002,
  kRequestCancelled = -32800,
};

// ---- settings ------------------------------------------------------------------

void Settings::merge_from(const Settings& o) {
  if (o.model) model = o.model;
  if (o.threads) threads = o.threads;
  if (o.context_size) context_size = o.context_size;
  if (o.completion_max_tokens) completion_max_tokens = o.completion_max_tokens;
  if (o.completion_time_budget_ms) completion_time_budget_ms = o.completion_time_budget_ms;
  if (o.completion_debounce_ms) completion_debounce_ms = o.completion_debounce_ms;
  if (o.chat_max_tokens) chat_max_tokens = o.chat_max_tokens;
}

namespace {
Settings settings_from(const json& j) {
  Settings s;
  if (!j.is_object()) return s;
  const auto get = [&](const char* group, const char* key) -> const json* {
    if (group) {
      if (auto g = j.find(group); g != j.end() && g->is_object())
        if (auto v = g->find(key); v != g->end()) return &*v;
      if (auto v = j.find(std::string(group) + "." + key); v != j.end()) return &*v;
      return nullptr;
    }
    auto v = j.find(key);
    return v == j.end() ? nullptr : &*v;
  };
  const auto num = [&](const char* group, const char* key, std::optional<int>& out) {
    if (const json* v = get(group, key)) {
      if (!v->is_number_integer()) throw std::runtime_error(std::string("setting ") + (group ? std::string(group) + "." : "") + key + " must be an integer");
      out = v->get<int>();
    }
  };
  if (const json* v = get(nullptr, "model")) {
    if (!v->is_string()) throw std::runtime_error("setting model must be a string (path to a GGUF file)");
    s.model = v->get<std::string>();
  }
  num(nullptr, "threads", s.threads);
  num(nullptr, "contextSize", s.context_size);
  num("completion", "maxTokens", s.completion_max_tokens);
  num("completion", "timeBudgetMs", s.completion_time_budget_ms);
  num("completion", "debounceMs", s.completion_debounce_ms);
  num("chat", "maxTokens", s.chat_max_tokens);
  return s;
}
}  // namespace

Settings Settings::from_json_text(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("settings must be a JSON object");
  return settings_from(j);
}

// ---- server ----------------------------------------------------------------------

struct Server::Impl {
  Transport& t;
  ServerOptions opt;
  Settings init_options;

  enum class Phase { Uninitialized, Running, ShutDown } phase = Phase::Uninitialized;
  bool client_inline = false, client_completion = false, client_progress = false;

  DocumentStore docs;

  // Model and engine, loaded in the background after initialize.
  std::mutex model_mu;
  std::shared_ptr<Model> model;
  std::unique_ptr<Engine> engine;
  std::string state = "loading", state_message;
  double last_tps = 0;

  // In-flight requests, by JSON id (dumped), for $/cancelRequest.
  struct Pending {
    std::atomic<bool> cancelled{false};
    std::mutex mu;
    std::optional<Handle> handle;
    void cancel() {
      cancelled = true;
      std::lock_guard lock(mu);
      if (handle) handle->cancel();
    }
  };
  std::mutex pending_mu;
  std::unordered_map<std::string, std::shared_ptr<Pending>> pending;
  std::map<std::string, std::shared_ptr<Pending>> latest_completion;  // per document

  // Worker threads for requests.
  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  std::vector<std::thread> workers;
  std::thread loader;

  Impl(Transport& tr, ServerOptions o) : t(tr), opt(std::move(o)) {
    for (int i = 0; i < 4; ++i)
      workers.emplace_back([this] {
        for (;;) {
          std::function<void()> job;
          {
            std::unique_lock lock(q_mu);
            q_cv.wait(lock, [&] { return stopping || !queue.empty(); });
            if (queue.empty()) return;
            job = std::move(queue.front());
            queue.pop_front();
          }
          job();
        }
      });
  }

  ~Impl() {
    {
      std::lock_guard lock(q_mu);
      stopping = true;
    }
    q_cv.notify_all();
    {
      std::lock_guard lock(pending_mu);
      for (auto& [id, p] : pending) p->cancel();
    }
    for (auto& w : workers) w.join();
    if (loader.joinable()) loader.join();
    std::lock_guard lock(model_mu);
    engine.reset();
  }

  Settings effective() const {
    Settings s;
    s.threads = 0;
    s.context_size = 4096;
    s.completion_max_tokens = 64;
    s.completion_time_budget_ms = 1500;
    s.completion_debounce_ms = 0;
    s.chat_max_tokens = 1024;
    s.merge_from(opt.config_file);
    s.merge_from(opt.flags);
    s.merge_from(init_options);
    return s;
  }

  // ---- output --------------------------------------------------------------------
  void send(const json& j) { t.write(j.dump(-1, ' ', false, json::error_handler_t::replace)); }
  void reply(const json& id, json result) { send({{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}); }
  void reply_error(const json& id, int code, const std::string& message) {
    send({{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}});
  }
  void notify(const std::string& method, json params) {
    send({{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}});
  }
  void log_message(int type, const std::string& text) {
    spdlog::info("{}", text);
    notify("window/logMessage", {{"type", type}, {"message", text}});
  }
  json status_json() {
    std::lock_guard lock(model_mu);
    json s = {{"state", state}, {"message", state_message}, {"tokensPerSecond", last_tps}};
    if (model) {
      s["model"] = model->config().name.empty() ? model->config().arch : model->config().name;
      s["plan"] = {{"backend", "cpu"}, {"threads", model->threads()}, {"contextSize", engine ? engine->n_ctx() : 0}};
    }
    return s;
  }
  void send_status() { notify("moelsp/status", status_json()); }

  // ---- model loading --------------------------------------------------------------
  void start_loading() {
    const Settings s = effective();
    if (!s.model || s.model->empty()) {
      const std::string msg = "no model configured: set initializationOptions.model or start with --model FILE";
      {
        std::lock_guard lock(model_mu);
        state = "error";
        state_message = msg;
      }
      log_message(1, msg);
      send_status();
      return;
    }
    send_status();
    loader = std::thread([this, s] {
      try {
        auto m = std::shared_ptr<Model>(Model::load(*s.model, {.threads = *s.threads}));
        auto e = std::make_unique<Engine>(m, EngineOptions{.n_ctx = *s.context_size});
        std::lock_guard lock(model_mu);
        model = m;
        engine = std::move(e);
        state = "ready";
        state_message = "model loaded: " + *s.model;
      } catch (const std::exception& ex) {
        std::lock_guard lock(model_mu);
        state = "error";
        state_message = ex.what();
      }
      std::string st, msg;
      {
        std::lock_guard lock(model_mu);
        st = state;
        msg = state_message;
      }
      log_message(st == "ready" ? 3 : 1, msg);
      send_status();
    });
  }

  // ---- dispatch -------------------------------------------------------------------
  void handle(const std::string& body) {
    const json msg = json::parse(body, nullptr, false);
    if (msg.is_discarded()) return reply_error(nullptr, kParseError, "parse error: the body is not valid JSON");
    if (!msg.is_object()) return reply_error(nullptr, kInvalidRequest, "invalid request: not a JSON object");
    const bool has_id = msg.contains("id");
    const json id = has_id ? msg["id"] : json();
    if (has_id && !id.is_number_integer() && !id.is_string())
      return reply_error(nullptr, kInvalidRequest, "invalid request: id must be an integer or a string");
    if (!msg.contains("method")) {
      if (has_id) return;  // a response to something we sent; nothing to do
      return reply_error(nullptr, kInvalidRequest, "invalid request: no method");
    }
    if (!msg["method"].is_string()) return reply_error(has_id ? id : json(), kInvalidRequest, "invalid request: method must be a string");
    const std::string method = msg["method"];
    const json params = msg.value("params", json::object());

    if (method == "exit") {
      exiting = true;
      return;
    }
    if (phase == Phase::Uninitialized && method != "initialize") {
      if (has_id) reply_error(id, kServerNotInitialized, "server not initialized: send initialize first");
      return;
    }
    if (phase == Phase::ShutDown) {
      if (has_id) reply_error(id, kInvalidRequest, "the server is shutting down (shutdown was received)");
      return;
    }
    try {
      if (has_id) request(method, id, params);
      else notification(method, params);
    } catch (const std::exception& e) {
      if (has_id) reply_error(id, kInvalidParams, std::string("invalid params: ") + e.what());
      else spdlog::warn("{}: {}", method, e.what());
    }
  }

  bool exiting = false;
  bool shutdown_received = false;

  void request(const std::string& method, const json& id, const json& params) {
    if (method == "initialize") {
      if (phase != Phase::Uninitialized) return reply_error(id, kInvalidRequest, "initialize was already received");
      const json caps = params.value("capabilities", json::object());
      const json td = caps.value("textDocument", json::object());
      client_completion = td.contains("completion");
      client_inline = td.contains("inlineCompletion");
      client_progress = caps.value("window", json::object()).value("workDoneProgress", false);
      if (params.contains("initializationOptions") && params["initializationOptions"].is_object())
        init_options = settings_from(params["initializationOptions"]);
      json server_caps = {{"textDocumentSync", {{"openClose", true}, {"change", 2}, {"save", {{"includeText", false}}}}}};
      if (client_completion) server_caps["completionProvider"] = {{"resolveProvider", false}, {"triggerCharacters", {".", "(", " "}}};
      if (client_inline) server_caps["inlineCompletionProvider"] = json::object();
      reply(id, {{"capabilities", server_caps}, {"serverInfo", {{"name", "moelsp"}, {"version", "0.1.0"}}}});
      phase = Phase::Running;
      start_loading();
      return;
    }
    if (method == "shutdown") {
      phase = Phase::ShutDown;
      shutdown_received = true;
      {
        std::lock_guard lock(pending_mu);
        for (auto& [k, p] : pending) p->cancel();
      }
      return reply(id, nullptr);
    }
    if (method == "moelsp/status") return reply(id, status_json());
    if (method == "textDocument/completion" || method == "textDocument/inlineCompletion")
      return complete(id, params, method == "textDocument/inlineCompletion");
    reply_error(id, kMethodNotFound, "method not found: " + method);
  }

  void notification(const std::string& method, const json& params) {
    if (method == "initialized") return;
    if (method == "$/cancelRequest") {
      const std::string key = params.at("id").dump();
      std::lock_guard lock(pending_mu);
      if (auto it = pending.find(key); it != pending.end()) it->second->cancel();
      return;
    }
    if (method == "textDocument/didOpen") {
      const json& d = params.at("textDocument");
      docs.open(d.at("uri"), d.value("languageId", ""), d.value("version", 0), d.at("text"));
      return;
    }
    if (method == "textDocument/didChange") {
      const json& d = params.at("textDocument");
      for (const auto& c : params.at("contentChanges")) {
        std::optional<Range> r;
        if (c.contains("range")) {
          const auto& rr = c["range"];
          r = Range{{rr["start"]["line"], rr["start"]["character"]}, {rr["end"]["line"], rr["end"]["character"]}};
        }
        if (!docs.change(d.at("uri"), d.value("version", 0), r, c.at("text")))
          spdlog::warn("didChange for a document that is not open: {}", d.at("uri").get<std::string>());
      }
      return;
    }
    if (method == "textDocument/didClose") return docs.close(params.at("textDocument").at("uri"));
    if (method == "textDocument/didSave") return;
    if (method == "workspace/didChangeConfiguration") {
      json s = params.value("settings", json::object());
      if (s.contains("moelsp")) s = s["moelsp"];
      init_options.merge_from(settings_from(s));
      return;
    }
    if (method.rfind("$/", 0) == 0) return;  // optional notifications: ignored silently
    spdlog::info("ignoring unknown notification {}", method);
  }

  // ---- completion -----------------------------------------------------------------
  void complete(const json& id, const json& params, bool inline_kind) {
    const std::string uri = params.at("textDocument").at("uri");
    const Position pos{params.at("position").at("line"), params.at("position").at("character")};
    auto p = std::make_shared<Pending>();
    {
      std::lock_guard lock(pending_mu);
      pending[id.dump()] = p;
      // A newer completion for the same document makes the older one moot.
      if (auto it = latest_completion.find(uri); it != latest_completion.end()) it->second->cancel();
      latest_completion[uri] = p;
    }
    const Settings s = effective();
    enqueue([this, id, uri, pos, p, s, inline_kind] {
      json result = inline_kind ? json{{"items", json::array()}} : json{{"isIncomplete", false}, {"items", json::array()}};
      std::string error;
      try {
        if (*s.completion_debounce_ms > 0)
          std::this_thread::sleep_for(std::chrono::milliseconds(*s.completion_debounce_ms));
        const auto doc = docs.get(uri);
        Engine* eng = nullptr;
        {
          std::lock_guard lock(model_mu);
          eng = engine.get();
        }
        if (doc && eng && !p->cancelled) {
          const size_t cursor = offset_of(doc->text, pos);
          const CompletionContext ctx = make_context(doc->text, cursor, 6000, 2000);
          Request req;
          req.prompt_tokens = fim_prompt(eng->model().tokenizer(), ctx);
          req.max_tokens = *s.completion_max_tokens;
          req.t_max_predict_ms = *s.completion_time_budget_ms;
          req.t_max_prompt_ms = *s.completion_time_budget_ms * 4;
          req.sampling = SamplingParams::greedy();
          req.priority = 10;  // completions before chat
          if (ctx.single_line) req.stop = {"\n"};
          {
            std::lock_guard lock(p->mu);
            p->handle = eng->submit(std::move(req));
          }
          if (p->cancelled) p->cancel();
          const Result r = p->handle->wait();
          if (r.reason == FinishReason::Error) error = r.error;
          {
            std::lock_guard lock(model_mu);
            if (r.timings.generate_tps() > 0) last_tps = r.timings.generate_tps();
          }
          const std::string text = postprocess(r.text, ctx);
          if (!text.empty() && !p->cancelled) {
            const json range = {{"start", {{"line", pos.line}, {"character", pos.character}}},
                                {"end", {{"line", pos.line}, {"character", pos.character}}}};
            if (inline_kind) {
              result["items"].push_back({{"insertText", text}, {"range", range}});
            } else {
              std::string label = text.substr(0, text.find('\n'));
              if (label.empty()) label = text;
              result["items"].push_back({{"label", label}, {"kind", 1}, {"insertText", text},
                                         {"textEdit", {{"range", range}, {"newText", text}}}, {"detail", "moelsp"}});
            }
          }
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
      {
        std::lock_guard lock(pending_mu);
        pending.erase(id.dump());
        if (auto it = latest_completion.find(uri); it != latest_completion.end() && it->second == p)
          latest_completion.erase(it);
      }
      if (p->cancelled) reply_error(id, kRequestCancelled, "request cancelled");
      else if (!error.empty()) reply_error(id, kInternalError, error);
      else reply(id, result);
    });
  }

  void enqueue(std::function<void()> job) {
    {
      std::lock_guard lock(q_mu);
      queue.push_back(std::move(job));
    }
    q_cv.notify_one();
  }
};

Server::Server(Transport& t, ServerOptions opt) : impl_(std::make_unique<Impl>(t, std::move(opt))) {}
Server::~Server() = default;

int Server::run() {
  while (!impl_->exiting) {
    auto m = impl_->t.read();
    if (!m) break;  // end of input without exit
    if (!m->error.empty()) {
      spdlog::warn("skipping a malformed message: {}", m->error);
      continue;
    }
    impl_->handle(m->body);
  }
  return impl_->exiting && impl_->shutdown_received ? 0 : 1;
}

}  // namespace moelsp::lsp

// Transport loop, dispatch table, lifecycle, documents, settings and status.
#include "server.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "engine/default_model.h"
#include "server_impl.h"

namespace moelsp::lsp {

// ---- settings ------------------------------------------------------------------

void Settings::merge_from(const Settings& o) {
  if (o.model) model = o.model;
  if (o.completion_max_tokens) completion_max_tokens = o.completion_max_tokens;
  if (o.completion_time_budget_ms) completion_time_budget_ms = o.completion_time_budget_ms;
  if (o.completion_debounce_ms) completion_debounce_ms = o.completion_debounce_ms;
  if (o.chat_max_tokens) chat_max_tokens = o.chat_max_tokens;
  if (o.chat_template) chat_template = o.chat_template;
  if (o.backend_url) backend_url = o.backend_url;
  if (o.backend_api_key) backend_api_key = o.backend_api_key;
  if (o.backend_model) backend_model = o.backend_model;
  if (o.backend_api) backend_api = o.backend_api;
  if (o.backend_fim_template) backend_fim_template = o.backend_fim_template;
  merge_overrides(plan, o.plan);
}

Settings settings_from(const json& j) {
  Settings s;
  if (!j.is_object()) return s;
  // "completion": {"maxTokens": 8} and "completion.maxTokens": 8 are the same setting.
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
  const auto name = [](const char* group, const char* key) { return (group ? std::string(group) + "." : "") + key; };
  const auto num = [&](const char* group, const char* key, std::optional<int>& out) {
    if (const json* v = get(group, key)) {
      if (!v->is_number_integer()) throw std::runtime_error("setting " + name(group, key) + " must be an integer");
      out = v->get<int>();
    }
  };
  const auto str = [&](const char* group, const char* key, std::optional<std::string>& out) {
    if (const json* v = get(group, key)) {
      if (!v->is_string()) throw std::runtime_error("setting " + name(group, key) + " must be a string");
      out = v->get<std::string>();
    }
  };
  str(nullptr, "model", s.model);
  num("completion", "maxTokens", s.completion_max_tokens);
  num("completion", "timeBudgetMs", s.completion_time_budget_ms);
  num("completion", "debounceMs", s.completion_debounce_ms);
  num("chat", "maxTokens", s.chat_max_tokens);
  str("chat", "template", s.chat_template);
  str("backend", "url", s.backend_url);
  str("backend", "apiKey", s.backend_api_key);
  str("backend", "model", s.backend_model);
  str("backend", "api", s.backend_api);
  str("backend", "fimTemplate", s.backend_fim_template);
  s.plan = overrides_from_json(j.dump());
  return s;
}

Settings Settings::from_json_text(const std::string& text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("settings must be a JSON object");
  return settings_from(j);
}

// ---- server ----------------------------------------------------------------------

Server::Impl::Impl(Transport& tr, ServerOptions o) : t(tr), opt(std::move(o)) {
  // Editors show busy / ready (and the last tokens/s) from these.
  service.on_busy_change = [this] { send_status(); };
  requests = {
      {"initialize", &Impl::on_initialize},
      {"shutdown", &Impl::on_shutdown},
      {"moelsp/status", &Impl::on_status},
      {"textDocument/completion", &Impl::on_completion},
      {"textDocument/inlineCompletion", &Impl::on_inline_completion},
      {"workspace/executeCommand", &Impl::on_execute_command},
      {"moelsp/chat", &Impl::on_chat},
  };
  notifications = {
      {"initialized", &Impl::on_initialized},
      {"$/cancelRequest", &Impl::on_cancel},
      {"textDocument/didOpen", &Impl::on_did_open},
      {"textDocument/didChange", &Impl::on_did_change},
      {"textDocument/didClose", &Impl::on_did_close},
      {"textDocument/didSave", &Impl::on_did_save},
      {"workspace/didChangeConfiguration", &Impl::on_did_change_configuration},
      {"moelsp/didShowCompletion", &Impl::on_did_show},
      {"textDocument/didShowCompletion", &Impl::on_did_show},
      {"moelsp/didAcceptCompletion", &Impl::on_did_accept},
      {"textDocument/didPartiallyAcceptCompletion", &Impl::on_did_partially_accept},
  };
  // Request handlers that wait on the engine run here, never on the reader.
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

Server::Impl::~Impl() {
  {
    std::lock_guard lock(pending_mu);
    for (auto& [id, p] : pending) p->cancel();
  }
  {
    std::lock_guard lock(q_mu);
    stopping = true;
  }
  q_cv.notify_all();
  for (auto& w : workers) w.join();
  if (loader.joinable()) loader.join();
  service.set_backend(nullptr);
  std::lock_guard lock(model_mu);
  backend.reset();
}

Settings Server::Impl::effective() {
  Settings s;
  s.completion_max_tokens = 64;
  s.completion_time_budget_ms = 1500;
  s.completion_debounce_ms = 0;
  s.chat_max_tokens = 1024;
  s.merge_from(opt.config_file);
  s.merge_from(opt.flags);
  std::lock_guard lock(settings_mu);
  s.merge_from(init_options);
  return s;
}

void Server::Impl::send(const json& j) { t.write(j.dump(-1, ' ', false, json::error_handler_t::replace)); }
void Server::Impl::reply(const json& id, json result) {
  send({{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}});
}
void Server::Impl::reply_error(const json& id, int code, const std::string& message) {
  send({{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}});
}
void Server::Impl::notify(const std::string& method, json params) {
  send({{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}});
}
void Server::Impl::log_message(int type, const std::string& text) {
  spdlog::info("{}", text);
  notify("window/logMessage", {{"type", type}, {"message", text}});
}
void Server::Impl::progress(const json& token, json value) {
  if (!token.is_null()) notify("$/progress", {{"token", token}, {"value", std::move(value)}});
}

json Server::Impl::status_json() {
  json s;
  {
    std::lock_guard lock(model_mu);
    s = {{"state", state == "ready" && service.busy() ? "busy" : state}, {"message", state_message},
         {"tokensPerSecond", service.last_tokens_per_second()}};
    if (model) {
      s["model"] = model->config().name.empty() ? model->config().arch : model->config().name;
      s["plan"] = plan_json;
      s["hardware"] = hw_json;
      if (backend) {
        const Engine& engine = backend->engine();
        const EngineMetrics m = engine.metrics();
        const ExpertMetrics em = model->expert_metrics();
        s["experts"] = {{"predictionAccuracy", em.accuracy()}, {"previousTokenAccuracy", em.baseline_accuracy()},
                        {"prefetchDistance", em.distance}, {"prefetchRequests", em.prefetch_requests},
                        {"prefetchBytes", em.prefetch_bytes}, {"prefetchReadBytes", em.prefetch_missing_bytes},
                        {"cacheExperts", em.cache_experts}, {"cachePinned", em.cache_pinned},
                        {"cacheHitRate", em.cache_hit_rate()}, {"cacheSwaps", em.cache_swaps},
                        {"majorFaults", em.major_faults}, {"minorFaults", em.minor_faults}};
        s["plan"]["kvCache"]["bytes"] = m.kv.bytes;
        s["plan"]["kvCache"]["prefixCache"] = engine.options().prefix_cache;
        s["kvCache"] = {{"blocksTotal", m.kv.blocks_total}, {"blocksInUse", m.kv.blocks_in_use},
                        {"blocksCached", m.kv.blocks_cached}, {"blocksFree", m.kv.blocks_free},
                        {"evictions", m.kv.evictions}, {"prefixHitRate", m.prefix_hit_rate},
                        {"prefixHitTokens", m.kv.hit_tokens}};
        s["scheduler"] = {{"steps", m.steps}, {"meanBatch", m.mean_batch()}, {"lastBatch", m.last_batch},
                          {"maxBatch", m.max_batch}, {"requests", m.requests}, {"preemptions", m.preemptions},
                          {"meanQueueMs", m.mean_queue_ms()}, {"maxQueueMs", m.queue_ms_max},
                          {"running", m.running}, {"waiting", m.waiting}};
      }
    }
  }
  {
    std::lock_guard lock(model_mu);
    if (remote) {
      const auto& o = remote->options();
      s["model"] = o.model.empty() ? o.url : o.model;
      s["backend"] = {{"url", o.url}, {"api", o.api}, {"model", o.model}, {"fimTemplate", o.fim_template},
                      {"lastError", remote->last_error()}};
    }
  }
  const assist::TelemetrySnapshot t = service.telemetry();
  s["completions"] = {{"requests", t.requests}, {"cancelled", t.cancelled}, {"shown", t.shown},
                      {"accepted", t.accepted}, {"partiallyAccepted", t.partially_accepted},
                      {"cacheHits", t.cache_hits}, {"promptTokens", t.prompt_tokens},
                      {"promptTokensReused", t.prompt_tokens_reused},
                      {"latencyMs", {{"p50", t.latency_p50_ms}, {"p95", t.latency_p95_ms}, {"samples", t.latency_samples}}}};
  return s;
}
void Server::Impl::send_status() { notify("moelsp/status", status_json()); }

void Server::Impl::enqueue(std::function<void()> job) {
  {
    std::lock_guard lock(q_mu);
    queue.push_back(std::move(job));
  }
  q_cv.notify_one();
}

std::shared_ptr<Pending> Server::Impl::track(const json& id) {
  auto p = std::make_shared<Pending>();
  std::lock_guard lock(pending_mu);
  pending[id.dump()] = p;
  return p;
}

void Server::Impl::untrack(const json& id) {
  std::lock_guard lock(pending_mu);
  pending.erase(id.dump());
}

// The model a setting names, or the embedded default when it names none.
static std::optional<std::string> model_or_default(std::optional<std::string> m) {
  if (!m || m->empty())
    if (std::string def = default_model_path(); !def.empty()) m = def;
  return m;
}

void Server::Impl::start_loading() {
  Settings s = effective();
  loaded_backend_url = s.backend_url;
  if (s.backend_url && !s.backend_url->empty()) return start_remote(s);
  s.model = model_or_default(s.model);
  loaded_model = s.model;
  loaded_plan = s.plan;
  if (!s.model || s.model->empty()) {
    const std::string msg =
        "no model configured and the default model (models/moelsp-default.gguf) is not found: set "
        "initializationOptions.model, start with --model FILE or set MOELSP_MODEL";
    {
      std::lock_guard lock(model_mu);
      state = "error";
      state_message = msg;
    }
    log_message(1, msg);
    send_status();
    return;
  }
  {
    std::lock_guard lock(model_mu);
    state = "loading";
    state_message = "loading " + *s.model;
  }
  send_status();
  json token;
  if (client_progress) {
    token = "moelsp/load";
    send({{"jsonrpc", "2.0"}, {"id", "moelsp-" + std::to_string(next_server_request_id++)},
          {"method", "window/workDoneProgress/create"}, {"params", {{"token", token}}}});
    progress(token, {{"kind", "begin"}, {"title", "moelsp: loading model"}, {"message", *s.model}});
  }
  loader = std::thread([this, s, token] {
    try {
      PlanRequest req;
      req.over = s.plan;
      // The plan: threads, KV size and layout, expert prefetch/cache, batch
      // limits, each with its reason (moelsp/status "plan").
      PlannedModel pm = load_planned(*s.model, req);
      auto m = pm.model;
      const EngineOptions eo = pm.plan.engine_options();
      log_message(3, "plan: " + pm.plan.to_text());
      auto b = std::make_shared<assist::EngineBackend>(std::make_unique<Engine>(m, eo));
      service.set_backend(b);
      std::lock_guard lock(model_mu);
      model = m;
      backend = b;
      plan_json = json::parse(pm.plan.to_json());
      hw_json = json::parse(pm.hw.to_json());
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
    progress(token, {{"kind", "end"}, {"message", msg}});
    log_message(st == "ready" ? 3 : 1, msg);
    send_status();
  });
}

// A remote server generates: nothing to load here. Its health shows in
// moelsp/status (backend.lastError) once requests go to it.
void Server::Impl::start_remote(const Settings& s) {
  assist::RemoteOptions o;
  o.url = *s.backend_url;
  o.api_key = s.backend_api_key.value_or("");
  o.model = s.backend_model.value_or("");
  if (s.backend_api) o.api = *s.backend_api;
  if (s.backend_fim_template) o.fim_template = *s.backend_fim_template;
  try {
    auto b = std::make_shared<assist::RemoteBackend>(o);
    service.set_backend(b);
    std::lock_guard lock(model_mu);
    remote = b;
    state = "ready";
    state_message = "remote backend " + o.url + " (" + o.api + ")";
  } catch (const std::exception& e) {
    std::lock_guard lock(model_mu);
    state = "error";
    state_message = e.what();
  }
  std::string msg;
  {
    std::lock_guard lock(model_mu);
    msg = state_message;
  }
  log_message(remote ? 3 : 1, msg);
  send_status();
}

void Server::Impl::handle(const std::string& body) {
  const json msg = json::parse(body, nullptr, false);
  if (msg.is_discarded()) return reply_error(nullptr, kParseError, "parse error: the body is not valid JSON");
  if (!msg.is_object()) return reply_error(nullptr, kInvalidRequest, "invalid request: not a JSON object");
  const bool has_id = msg.contains("id");
  const json id = has_id ? msg["id"] : json();
  if (has_id && !id.is_number_integer() && !id.is_string())
    return reply_error(nullptr, kInvalidRequest, "invalid request: id must be an integer or a string");
  if (!msg.contains("method")) {
    if (has_id) return;  // the client's answer to one of our requests
    return reply_error(nullptr, kInvalidRequest, "invalid request: no method");
  }
  if (!msg["method"].is_string()) return reply_error(id, kInvalidRequest, "invalid request: method must be a string");
  const std::string method = msg["method"];
  const json params = msg.contains("params") ? msg["params"] : json::object();

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
    if (has_id) {
      auto it = requests.find(method);
      if (it == requests.end()) return reply_error(id, kMethodNotFound, "method not found: " + method);
      (this->*(it->second))(id, params);
    } else {
      auto it = notifications.find(method);
      if (it != notifications.end()) (this->*(it->second))(params);
      else if (method.rfind("$/", 0) != 0) spdlog::info("ignoring unknown notification {}", method);
    }
  } catch (const std::exception& e) {
    if (has_id) reply_error(id, kInvalidParams, "invalid params for " + method + ": " + e.what());
    else spdlog::warn("{}: invalid params: {}", method, e.what());
  }
}

// ---- lifecycle -------------------------------------------------------------------

void Server::Impl::on_initialize(const json& id, const json& params) {
  if (phase != Phase::Uninitialized) return reply_error(id, kInvalidRequest, "initialize was already received");
  const json caps = params.value("capabilities", json::object());
  const json td = caps.value("textDocument", json::object());
  const json ws = caps.value("workspace", json::object());
  client_completion = td.contains("completion");
  client_inline = td.contains("inlineCompletion");
  client_execute = ws.contains("executeCommand");
  client_dyn_config = ws.value("didChangeConfiguration", json::object()).value("dynamicRegistration", false);
  client_progress = caps.value("window", json::object()).value("workDoneProgress", false);
  if (params.contains("initializationOptions") && params["initializationOptions"].is_object()) {
    std::lock_guard lock(settings_mu);
    init_options = settings_from(params["initializationOptions"]);
  }
  // Declare only what the client can use.
  json sc = {{"textDocumentSync", {{"openClose", true}, {"change", 2}, {"save", {{"includeText", false}}}}}};
  // A capability the client registers dynamically is registered in
  // `initialized` instead of being declared here (LSP: not both).
  const auto dynamic = [&](const char* cap) { return td.value(cap, json::object()).value("dynamicRegistration", false); };
  client_dyn_completion = client_completion && dynamic("completion");
  client_dyn_inline = client_inline && dynamic("inlineCompletion");
  if (client_completion && !client_dyn_completion) sc["completionProvider"] = completion_options();
  if (client_inline && !client_dyn_inline) sc["inlineCompletionProvider"] = json::object();
  if (client_execute)
    sc["executeCommandProvider"] = {{"commands", commands()}};
  reply(id, {{"capabilities", sc}, {"serverInfo", {{"name", "moelsp"}, {"version", "0.1.0"}}}});
  phase = Phase::Running;
  start_loading();
}

json Server::Impl::completion_options() {
  return {{"resolveProvider", false}, {"triggerCharacters", {".", "(", " "}}};
}

void Server::Impl::on_initialized(const json&) {
  json regs = json::array();
  if (client_dyn_config) regs.push_back({{"id", "moelsp-config"}, {"method", "workspace/didChangeConfiguration"}});
  if (client_dyn_completion) {
    json opts = completion_options();
    opts["documentSelector"] = nullptr;
    regs.push_back({{"id", "moelsp-completion"}, {"method", "textDocument/completion"}, {"registerOptions", opts}});
  }
  if (client_dyn_inline)
    regs.push_back({{"id", "moelsp-inline"}, {"method", "textDocument/inlineCompletion"},
                    {"registerOptions", {{"documentSelector", nullptr}}}});
  if (!regs.empty())
    send({{"jsonrpc", "2.0"}, {"id", "moelsp-" + std::to_string(next_server_request_id++)},
          {"method", "client/registerCapability"}, {"params", {{"registrations", regs}}}});
}

void Server::Impl::on_shutdown(const json& id, const json&) {
  phase = Phase::ShutDown;
  shutdown_received = true;
  {
    std::lock_guard lock(pending_mu);
    for (auto& [k, p] : pending) p->cancel();
  }
  reply(id, nullptr);
}

void Server::Impl::on_status(const json& id, const json&) { reply(id, status_json()); }

void Server::Impl::on_cancel(const json& params) {
  const std::string key = params.at("id").dump();
  std::lock_guard lock(pending_mu);
  if (auto it = pending.find(key); it != pending.end()) it->second->cancel();
}

void Server::Impl::on_did_change_configuration(const json& params) {
  json s = params.value("settings", json::object());
  if (s.is_object() && s.contains("moelsp")) s = s["moelsp"];
  const Settings in = settings_from(s);
  {
    std::lock_guard lock(settings_mu);
    init_options.merge_from(in);
  }
  // The engine is built from these at start; changing them under running
  // requests would mean rebuilding it mid-flight. Say so rather than ignore.
  // Editors (Helix, Neovim) often repeat their initial settings right after
  // `initialized`: only a real change to what the engine was built with counts.
  const Settings now = effective();
  const bool engine_level = (in.model && model_or_default(now.model) != loaded_model) ||
                            (in.backend_url && now.backend_url != loaded_backend_url) ||
                            (!(in.plan == PlanOverrides{}) && !(now.plan == loaded_plan));
  if (engine_level)
    log_message(2, "moelsp: model, backend.*, threads, contextSize, kvCache.*, weights, experts.*, batch.* and gpu.* are read when "
                   "the server starts; restart it to apply the new values (the other settings apply now)");
}

// ---- documents -------------------------------------------------------------------

void Server::Impl::on_did_open(const json& params) {
  const json& d = params.at("textDocument");
  docs.open(d.at("uri"), d.value("languageId", ""), d.value("version", 0), d.at("text"));
}

void Server::Impl::on_did_change(const json& params) {
  const json& d = params.at("textDocument");
  for (const auto& c : params.at("contentChanges")) {
    std::optional<Range> r;
    if (c.contains("range")) {
      const auto& rr = c.at("range");
      r = Range{{rr.at("start").at("line"), rr.at("start").at("character")},
                {rr.at("end").at("line"), rr.at("end").at("character")}};
    }
    if (!docs.change(d.at("uri"), d.value("version", 0), r, c.at("text")))
      spdlog::warn("didChange for a document that is not open: {}", d.at("uri").get<std::string>());
  }
}

void Server::Impl::on_did_close(const json& params) { docs.close(params.at("textDocument").at("uri")); }
void Server::Impl::on_did_save(const json&) {}

// ---- telemetry notifications ------------------------------------------------------

void Server::Impl::on_did_show(const json&) { service.count_shown(); }
void Server::Impl::on_did_accept(const json&) { service.count_accepted(); }
void Server::Impl::on_did_partially_accept(const json&) { service.count_partially_accepted(); }

// ---- public ------------------------------------------------------------------------

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

// Transport loop, dispatch table, lifecycle, documents, settings and status.
#include "server.h"

#include <algorithm>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "engine/default_model.h"
#include "engine/hw.h"
#include "server_impl.h"
#include "status_summary.h"
#include "util/json_limits.h"

namespace moelsp::lsp {

namespace {
constexpr size_t kLargeMessageBytes = size_t(1) << 20;

// moelsp tells glibc to keep freed memory (keep_freed_memory(), so that the
// engine's per-step buffers are reused without page faults). After a large
// message (a whole-file didOpen or didChange) or closing a large document,
// the transient copies — the body, the parsed JSON, the params — or the text
// would then stay in RSS. An explicit trim gives them back (a few ms, only
// after such messages).
void release_free_memory() { release_freed_memory(); }
}  // namespace

// ---- replies ------------------------------------------------------------------------

struct Reply::State {
  State(json i, Send s, std::string m) : id(std::move(i)), send(std::move(s)), method(std::move(m)) {}
  json id;
  Send send;
  std::string method;
  std::atomic<bool> sent{false};
  ~State() {
    if (sent.exchange(true)) return;
    spdlog::error("{} (id {}) ended without an answer", method, id.dump());
    send(jsonrpc::error(id, kInternalError, "internal error: " + method + " ended without an answer"));
  }
};

Reply::Reply(json id, Send send, std::string method)
    : s_(std::make_shared<State>(std::move(id), std::move(send), std::move(method))) {}

void Reply::operator()(json result) const {
  if (s_->sent.exchange(true))
    return spdlog::warn("{} (id {}): a second answer was dropped", s_->method, s_->id.dump());
  s_->send(jsonrpc::response(s_->id, std::move(result)));
}

void Reply::error(int code, const std::string& message) const {
  if (s_->sent.exchange(true))
    return spdlog::warn("{} (id {}): a second answer was dropped", s_->method, s_->id.dump());
  s_->send(jsonrpc::error(s_->id, code, message));
}

const json& Reply::id() const { return s_->id; }
bool Reply::sent() const { return s_->sent; }

template <class P>
void Server::Impl::on_request(const std::string& method, void (Impl::*handler)(const P&, Reply)) {
  requests[method] = [this, method, handler](const json& params, Reply reply) {
    P p;
    try {
      p = parse_params<P>(params);
    } catch (const ParamError& e) {
      return reply.error(kInvalidParams, "invalid params for " + method + ": " + e.what());
    }
    try {
      (this->*handler)(p, reply);
    } catch (const std::exception& e) {
      reply.error(kInternalError, method + ": " + e.what());
    }
  };
}

template <class P>
void Server::Impl::on_notification(const std::string& method, void (Impl::*handler)(const P&)) {
  notifications[method] = [this, method, handler](const json& params) {
    try {
      (this->*handler)(parse_params<P>(params));
    } catch (const std::exception& e) {
      spdlog::warn("{}: {}", method, e.what());
    }
  };
}

// ---- server ----------------------------------------------------------------------

Server::Impl::Impl(Transport& tr, ServerOptions o)
    : t(tr),
      opt(std::move(o)),
      host(service, {.loading = [this](const auto& st) { load_started(st); },
                     .done = [this](const auto& st) { load_done(st); }}),
      completion_host(
          service,
          {.loading = [this](const auto&) { send_status(); }, .done = [this](const auto& st) { completion_done(st); }},
          assist::ModelHost::Slot::Completion) {
  // Editors show busy / ready (and the last tokens/s) from these.
  service.on_busy_change = [this] { send_status(); };
  on_request("initialize", &Impl::on_initialize);
  on_request("shutdown", &Impl::on_shutdown);
  on_request("moelsp/status", &Impl::on_status);
  on_request("textDocument/completion", &Impl::on_completion);
  on_request("textDocument/inlineCompletion", &Impl::on_inline_completion);
  on_request("workspace/executeCommand", &Impl::on_execute_command);
  on_request("moelsp/chat", &Impl::on_chat);
  on_request("moelsp/models", &Impl::on_models);
  on_notification("initialized", &Impl::on_initialized);
  on_notification("$/cancelRequest", &Impl::on_cancel);
  on_notification("$/setTrace", &Impl::on_set_trace);
  on_notification("textDocument/didOpen", &Impl::on_did_open);
  on_notification("textDocument/didChange", &Impl::on_did_change);
  on_notification("textDocument/didClose", &Impl::on_did_close);
  on_notification("textDocument/didSave", &Impl::on_did_save);
  on_notification("workspace/didChangeConfiguration", &Impl::on_did_change_configuration);
  on_notification("workspace/didChangeWatchedFiles", &Impl::on_did_change_watched_files);
  on_notification("workspace/didChangeWorkspaceFolders", &Impl::on_did_change_workspace_folders);
  on_notification("moelsp/didResolveDefinitions", &Impl::on_did_resolve_definitions);
  on_notification("moelsp/didChangeVisibleRanges", &Impl::on_did_change_visible_ranges);
  on_notification("moelsp/didShowCompletion", &Impl::on_did_show);
  on_notification("textDocument/didShowCompletion", &Impl::on_did_show);
  on_notification("moelsp/didAcceptCompletion", &Impl::on_did_accept);
  on_notification("textDocument/didPartiallyAcceptCompletion", &Impl::on_did_partially_accept);
  commands = {{"moelsp.accepted", &Impl::accepted_command},
              {"moelsp.chat", &Impl::chat_command},
              {"moelsp.explain", &Impl::chat_command},
              {"moelsp.fix", &Impl::chat_command},
              {"moelsp.document", &Impl::chat_command},
              {"moelsp.reload", &Impl::reload_command},
              {"moelsp.snooze", &Impl::snooze},
              {"moelsp.resume", &Impl::snooze}};
  // Request handlers that wait on the engine run here, never on the reader.
  // Completions: 2 workers (one running, one for the next keystroke, which
  // supersedes it); chats: 4 (each holds its worker for the whole answer).
  const auto worker = [this](Lane lane) {
    Worklane& w = lanes[int(lane)];
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(q_mu);
        w.cv.wait(lock, [&] { return stopping || !w.queue.empty(); });
        if (w.queue.empty()) return;
        job = std::move(w.queue.front());
        w.queue.pop_front();
      }
      job();
    }
  };
  for (int i = 0; i < 2; ++i) workers.emplace_back(worker, Lane::Completion);
  for (int i = 0; i < 4; ++i) workers.emplace_back(worker, Lane::Chat);
}

Server::Impl::~Impl() {
  puller.stop();  // its hook reloads: not once the rest is going away
  {
    std::lock_guard lock(pending_mu);
    for (auto& [id, p] : pending) p->cancel();
  }
  {
    std::lock_guard lock(q_mu);
    stopping = true;
  }
  for (auto& lane : lanes) lane.cv.notify_all();
  for (auto& w : workers) w.join();
  host.unload();  // (its end starts the completion model's load: joined first)
  completion_host.unload();
}

Settings Server::Impl::effective() {
  Settings s = assist::default_settings();
  s.merge_from(opt.config_file);
  s.merge_from(opt.flags);
  std::lock_guard lock(settings_mu);
  s.merge_from(init_options);
  return s;
}

Settings Server::Impl::editor_settings(const json& j) {
  std::vector<std::string> errors;
  Settings s = assist::settings_from_json_text(j.dump(), &errors);
  for (const auto& e : errors) show_message(MessageType::Error, "moelsp: " + e + "; the setting is ignored");
  return s;
}

void Server::Impl::send(const json& j) {
  if (!t.write(j.dump(-1, ' ', false, json::error_handler_t::replace)) && !output_closed.exchange(true))
    spdlog::error("the client closed moelsp's output (stdout): nothing more can be answered; exiting");
}
void Server::Impl::notify(const std::string& method, json params) {
  send(jsonrpc::notification(method, std::move(params)));
}
void Server::Impl::request_client(const std::string& method, json params) {
  send(jsonrpc::request("moelsp-" + std::to_string(next_server_request_id++), method, std::move(params)));
}
void Server::Impl::log_message(MessageType type, const std::string& text) {
  // The same level on stderr / --log-file.
  const auto level = type == MessageType::Error     ? spdlog::level::err
                     : type == MessageType::Warning ? spdlog::level::warn
                     : type == MessageType::Info    ? spdlog::level::info
                                                    : spdlog::level::debug;
  spdlog::log(level, "{}", text);
  notify("window/logMessage", to_json(MessageParams{type, text}));
  if (trace != TraceValue::Off) notify("$/logTrace", {{"message", text}});
}
void Server::Impl::show_message(MessageType type, const std::string& text) {
  spdlog::warn("{}", text);
  notify("window/showMessage", to_json(MessageParams{type, text}));
}
void Server::Impl::progress(const json& token, json value) {
  if (!token.is_null()) notify("$/progress", {{"token", token}, {"value", std::move(value)}});
}

json Server::Impl::status_json() {
  const assist::ModelHost::Snapshot st = host.snapshot();
  json s = {{"state", st.phase == assist::ModelPhase::Ready && service.busy() ? "busy" : to_string(st.phase)},
            {"message", st.message},
            {"tokensPerSecond", service.last_tokens_per_second()}};
  s.update(host.status());
  if (const auto ps = puller.state(); ps.phase != assist::BackgroundPull::Phase::Idle)
    s["pull"] = {{"ref", ps.ref},     {"state", to_string(ps.phase)}, {"file", ps.file}, {"done", ps.done},
                 {"total", ps.total}, {"message", ps.message}};
  if (json c = completion_status(); !c.is_null()) s["completionModel"] = std::move(c);
  s["index"] = index_status();
  const assist::TelemetrySnapshot t = service.telemetry();
  s["completions"] = {
      {"requests", t.requests},
      {"cancelled", t.cancelled},
      {"shown", t.shown},
      {"accepted", t.accepted},
      {"partiallyAccepted", t.partially_accepted},
      {"cacheHits", t.cache_hits},
      {"promptTokens", t.prompt_tokens},
      {"promptTokensReused", t.prompt_tokens_reused},
      {"snoozeLeftMs", snooze_left_ms()},
      {"trigger", effective().completion_trigger.value_or("automatic")},
      {"latencyMs", {{"p50", t.latency_p50_ms}, {"p95", t.latency_p95_ms}, {"samples", t.latency_samples}}},
      // Sums over `answers`, to be divided by it: where the time went.
      {"breakdown",
       {{"answers", t.timed},
        {"promptTokensNew", t.timed_prompt_new},
        {"generatedTokens", t.timed_generated},
        {"queueMs", t.timed_queue_ms},
        {"promptMs", t.timed_prompt_ms},
        {"generateMs", t.timed_generate_ms},
        {"contextMs", t.timed_context_ms},
        {"totalMs", t.timed_total_ms}}}};
  // Rendered here so that every editor shows the same words.
  s["summary"] = status_summary(s);
  s["summaryLine"] = status_line(s);
  return s;
}
void Server::Impl::send_status() { notify("moelsp/status", status_json()); }

void Server::Impl::enqueue(Lane lane, Reply reply, std::function<void()> job) {
  {
    std::lock_guard lock(q_mu);
    lanes[int(lane)].queue.push_back([reply, job = std::move(job)] {
      try {
        job();
      } catch (const std::exception& e) {
        reply.error(kInternalError, e.what());
      }
    });
  }
  lanes[int(lane)].cv.notify_one();
}

std::shared_ptr<assist::Ticket> Server::Impl::track(const json& id) {
  auto p = std::make_shared<assist::Ticket>();
  std::lock_guard lock(pending_mu);
  pending.emplace(id.dump(), p);
  return p;
}

void Server::Impl::untrack(const json& id, const std::shared_ptr<assist::Ticket>& ticket) {
  std::lock_guard lock(pending_mu);
  auto [a, b] = pending.equal_range(id.dump());
  for (auto it = a; it != b; ++it)
    if (it->second == ticket) {
      pending.erase(it);
      return;
    }
}

// The model a setting names, or the embedded default when it names none.
static std::optional<std::string> model_or_default(std::optional<std::string> m) {
  if (!m || m->empty())
    if (std::string def = default_model_path(); !def.empty()) m = def;
  return m;
}

void Server::Impl::start_loading() {
  Settings s = effective();
  s.model = model_or_default(s.model);
  requested_model = s.model;
  const bool remote = s.backend_url && !s.backend_url->empty();
  const bool ref = !remote && s.model && assist::looks_like_model_ref(*s.model);
  if (!ref) puller.cancel();  // the setting moved away from a reference being pulled
  if (ref && !resolve_model_ref(s)) return;
  if (!remote && (!s.model || s.model->empty())) {
    const std::string msg =
        "no model configured and the default model (models/moelsp-default.gguf) is not found: set "
        "initializationOptions.model, start with --model FILE or set MOELSP_MODEL";
    host.fail(msg);
    log_message(MessageType::Error, msg);
    show_message(MessageType::Error, "moelsp: " + msg);
    send_status();
    return;
  }
  host.load(s);
}

bool Server::Impl::resolve_model_ref(Settings& s) {
  const std::string ref = *s.model;
  assist::ModelRef parsed;
  try {
    parsed = assist::parse_model_ref(ref);
  } catch (const std::invalid_argument& e) {
    host.fail(std::string("model: ") + e.what());
    show_message(MessageType::Error, std::string("moelsp: model: ") + e.what());
    send_status();
    return false;
  }
  const std::string dir = assist::models_dir();
  // The files a finished pull fetched (what it chose may differ from what
  // the cache's own listing would choose: several quants there, no quant named).
  if (const auto done = puller.state(); done.ref == ref && done.phase == assist::BackgroundPull::Phase::Done &&
                                        !done.paths.empty() && std::filesystem::exists(done.paths.front())) {
    s.model = done.paths.front();
    return true;
  }
  if (const auto paths = assist::cached_paths(dir, parsed); !paths.empty()) {
    s.model = paths.front();
    return true;
  }
  // Not here yet: the embedded model serves while the pull runs (a pull
  // of gigabytes takes minutes; completions should not wait for it).
  puller.start(ref, {.dir = dir});
  s.model = embedded_model_path();
  log_message(MessageType::Info,
              fmt::format("model {} is not in {}: pulling it; the embedded model serves until it is there", ref, dir));
  return true;
}

void Server::Impl::pull_changed(const assist::BackgroundPull::State& st) {
  using Phase = assist::BackgroundPull::Phase;
  const auto mib = [](uint64_t b) { return double(b) / double(1 << 20); };
  const int pct = st.total ? int(100 * st.done / st.total) : 0;
  if (st.phase == Phase::Pulling) {
    const std::string msg = st.file.empty() ? "listing the repository"
                                            : fmt::format("{} {:.0f}/{:.0f} MiB", st.file, mib(st.done), mib(st.total));
    if (pull_token.is_null() && client.work_done_progress) {
      pull_token = "moelsp/pull";
      request_client("window/workDoneProgress/create", {{"token", pull_token}});
      progress(pull_token,
               to_json(WorkDoneProgressBegin{.title = "moelsp: pulling " + st.ref, .message = msg, .percentage = pct}));
    } else if (!pull_token.is_null()) {
      progress(pull_token, to_json(WorkDoneProgressReport{.message = msg, .percentage = pct}));
    }
    return send_status();
  }
  if (!pull_token.is_null()) progress(pull_token, to_json(WorkDoneProgressEnd{st.message}));
  pull_token = nullptr;
  if (st.phase == Phase::Done) {
    log_message(MessageType::Info, fmt::format("pulled {}: {}", st.ref, st.message));
    bool wanted;  // the setting (or $MOELSP_MODEL) still names it
    {
      std::lock_guard lock(reload_mu);
      wanted = requested_model == st.ref;
    }
    if (wanted) reload();  // loads the file now in the cache
  } else if (st.phase == Phase::Failed && st.message != "cancelled") {
    log_message(MessageType::Error, fmt::format("pulling {} failed: {}", st.ref, st.message));
    show_message(MessageType::Error, fmt::format("moelsp: pulling {} failed: {}. The embedded model serves meanwhile; "
                                                 "`moelsp pull {}` in a terminal says more.",
                                                 st.ref, st.message, st.ref));
  }
  send_status();
}

void Server::Impl::load_started(const assist::ModelHost::Snapshot& st) {
  send_status();
  load_token = nullptr;
  if (client.work_done_progress) {
    load_token = "moelsp/load";
    request_client("window/workDoneProgress/create", {{"token", load_token}});
    progress(load_token, to_json(WorkDoneProgressBegin{.title = "moelsp: loading model", .message = st.file}));
  }
}

void Server::Impl::load_done(const assist::ModelHost::Snapshot& st) {
  if (!st.plan_text.empty()) log_message(MessageType::Info, "plan: " + st.plan_text);
  if (st.backend_url.empty()) progress(load_token, to_json(WorkDoneProgressEnd{st.message}));
  log_message(st.phase == assist::ModelPhase::Ready ? MessageType::Info : MessageType::Error, st.message);
  // Once per failed load, with the fix: completions then answer an empty
  // (incomplete) list rather than an error per keystroke, which Neovim and
  // Emacs would echo on every key while VS Code only logs it.
  if (st.phase == assist::ModelPhase::Error && st.backend_url.empty())
    show_message(MessageType::Error,
                 "moelsp: the model could not be loaded: " + st.message +
                     ". Set moelsp.model (or --model) to a GGUF file; the server reloads when the setting changes.");
  send_status();
  start_completion_model();  // in the memory the model left
}

void Server::Impl::reload() {
  // A load still running finishes first; requests on the old engine are
  // cancelled, and it is freed when the last of them lets go.
  {
    std::lock_guard lock(pending_mu);
    for (auto& [id, p] : pending) p->cancel();
  }
  std::lock_guard lock(reload_mu);
  host.unload();
  log_message(MessageType::Info, "moelsp: reloading with the new settings");
  start_loading();
}

void Server::Impl::handle(const std::string& body) {
  const auto error_to = [this](const json& id, int code, const std::string& message) {
    send(jsonrpc::error(id, code, message));
  };
  // Before parsing: a value nested 300,000 deep would overflow the stack
  // wherever it is later copied or dumped.
  if (const std::string problem =
          json_limit_problem(body, {.max_depth = kJsonLimits.max_depth, .max_bytes = Transport::kMaxBodyBytes});
      !problem.empty())
    return error_to(nullptr, kParseError, "parse error: " + problem);
  json msg = json::parse(body, nullptr, false);
  if (msg.is_discarded()) msg = json::parse(repair_json_text(body), nullptr, false);  // bad UTF-8, lone surrogates
  if (msg.is_discarded()) return error_to(nullptr, kParseError, "parse error: the body is not valid JSON");
  if (!msg.is_object()) return error_to(nullptr, kInvalidRequest, "invalid request: not a JSON object");
  const bool has_id = msg.contains("id");
  const json id = has_id ? msg["id"] : json();
  if (has_id && !id.is_number_integer() && !id.is_string())
    return error_to(nullptr, kInvalidRequest, "invalid request: id must be an integer or a string");
  if (!msg.contains("method")) {
    if (has_id) return;  // the client's answer to one of our requests
    return error_to(nullptr, kInvalidRequest, "invalid request: no method");
  }
  if (!msg["method"].is_string()) return error_to(id, kInvalidRequest, "invalid request: method must be a string");
  const std::string method = msg["method"];
  const json params = msg.contains("params") && !msg["params"].is_null() ? msg["params"] : json::object();

  if (method == "exit") {
    exiting = true;
    return;
  }
  if (phase == Phase::Uninitialized && method != "initialize") {
    if (has_id) error_to(id, kServerNotInitialized, "server not initialized: send initialize first");
    return;
  }
  if (phase == Phase::ShutDown) {
    if (has_id) error_to(id, kInvalidRequest, "the server is shutting down (shutdown was received)");
    return;
  }
  if (has_id) {
    auto it = requests.find(method);
    if (it == requests.end()) return error_to(id, kMethodNotFound, "method not found: " + method);
    it->second(params, Reply(
                           id, [this](const json& j) { send(j); }, method));
  } else {
    auto it = notifications.find(method);
    if (it != notifications.end()) it->second(params);
    else if (method.rfind("$/", 0) != 0) spdlog::info("ignoring unknown notification {}", method);
  }
}

// ---- lifecycle -------------------------------------------------------------------

void Server::Impl::on_initialize(const InitializeParams& p, Reply reply) {
  if (phase != Phase::Uninitialized) return reply.error(kInvalidRequest, "initialize was already received");
  client = p.capabilities;
  trace = p.trace;
  {
    std::lock_guard lock(roots_mu);
    for (const auto& r : p.roots) roots.push_back(assist::path_of_uri(r));
  }
  if (p.initialization_options.is_object()) {
    Settings in = editor_settings(p.initialization_options);
    std::lock_guard lock(settings_mu);
    init_options = std::move(in);
  }
  // Declare only what the client can use. A capability the client
  // registers dynamically is registered in `initialized` instead of being
  // declared here (LSP: not both).
  ServerCapabilities sc;
  if (client.completion && !client.dynamic_completion) sc.completion = completion_options();
  sc.inline_completion = client.inline_completion && !client.dynamic_inline;
  if (client.execute_command) sc.commands = command_names();
  reply(to_json(InitializeResult{.capabilities = sc}));
  phase = Phase::Running;
  {
    std::lock_guard lock(reload_mu);
    start_loading();
  }
  start_index(effective());  // the walk runs beside the model's loading
}

CompletionOptions Server::Impl::completion_options() {
  return {.resolve_provider = false, .trigger_characters = {".", "(", " "}};
}

void Server::Impl::on_initialized(const NoParams&) {
  RegistrationParams regs;
  if (client.dynamic_configuration)
    regs.registrations.push_back({"moelsp-config", "workspace/didChangeConfiguration", nullptr});
  if (client.dynamic_completion) {
    json opts = to_json(completion_options());
    opts["documentSelector"] = nullptr;
    regs.registrations.push_back({"moelsp-completion", "textDocument/completion", opts});
  }
  if (client.dynamic_inline)
    regs.registrations.push_back({"moelsp-inline", "textDocument/inlineCompletion", {{"documentSelector", nullptr}}});
  // The index follows files changed outside the editor (git checkout, a
  // formatter, a build) when the client watches them for us.
  if (client.dynamic_watch)
    regs.registrations.push_back(
        {"moelsp-watch", "workspace/didChangeWatchedFiles", {{"watchers", {{{"globPattern", "**/*"}}}}}});
  if (!regs.registrations.empty()) request_client("client/registerCapability", to_json(regs));
}

void Server::Impl::on_shutdown(const NoParams&, Reply reply) {
  phase = Phase::ShutDown;
  shutdown_received = true;
  {
    std::lock_guard lock(pending_mu);
    for (auto& [k, p] : pending) p->cancel();
  }
  reply(nullptr);
}

void Server::Impl::on_status(const NoParams&, Reply reply) { reply(status_json()); }

void Server::Impl::on_cancel(const CancelParams& p) {
  std::lock_guard lock(pending_mu);
  auto [a, b] = pending.equal_range(p.id.dump());
  for (auto it = a; it != b; ++it) it->second->cancel();
}

void Server::Impl::on_set_trace(const SetTraceParams& p) { trace = p.value; }

void Server::Impl::on_did_change_configuration(const DidChangeConfigurationParams& p) {
  const Settings in = editor_settings(p.settings);
  {
    std::lock_guard lock(settings_mu);
    init_options.merge_from(in);
  }
  // The engine is built from these at start; changing them under running
  // requests would mean rebuilding it mid-flight. Say so rather than ignore.
  // Editors (Helix, Neovim) often repeat their initial settings right after
  // `initialized`: only a real change to what the engine was built with counts.
  const Settings now = effective();
  start_index(now);  // restarts the walk only when its folders or settings changed
  const assist::LoadKey loaded = host.loaded();
  std::optional<std::string> requested;
  {
    std::lock_guard lock(reload_mu);
    requested = requested_model;
  }
  const bool engine_level = (in.model && model_or_default(now.model) != requested) ||
                            (in.backend_url && now.backend_url != loaded.backend_url) ||
                            (!(in.plan == PlanOverrides{}) && !(now.plan == loaded.plan)) ||
                            (in.prompt_cache_dir && assist::prompt_cache_options(now).dir != loaded.prompt_cache);
  // The model, the backend and the plan are what the engine is built from: a
  // change to them (or a model that failed to load) reloads it in place.
  const bool failed = host.phase() == assist::ModelPhase::Error;
  const bool touched = in.model || in.backend_url || in.prompt_cache_dir || !(in.plan == PlanOverrides{});
  if (engine_level || (failed && touched)) return reload();  // (its end loads the completion model)
  if (in.completion_model) start_completion_model();
}

// ---- documents -------------------------------------------------------------------

void Server::Impl::on_did_open(const DidOpenParams& p) {
  const auto& d = p.text_document;
  docs.open(d.uri, d.language_id, d.version, d.text);
  // (A document over the index's size limit is not handed over: its snapshot
  // held there would make the store copy it on every keystroke.)
  if (const auto doc = docs.get(d.uri); doc && doc->text->size() <= assist::IndexOptions{}.max_file_bytes)
    index.document_text(assist::path_of_uri(d.uri), doc->text);
}

void Server::Impl::on_did_change(const DidChangeParams& p) {
  for (const auto& c : p.changes)
    if (!docs.change(p.uri, p.version, c.range, c.text))
      return spdlog::warn("didChange for a document that is not open: {}", p.uri);
  if (!p.changes.empty() && p.changes.back().range) {  // (a whole-text change says not where)
    std::lock_guard lock(recent_mu);
    std::erase_if(recent_edits, [&](const RecentEdit& e) { return e.uri == p.uri; });
    recent_edits.push_back({p.uri, p.changes.back().range->start.line});
    if (recent_edits.size() > 8) recent_edits.pop_front();
  }
  if (const auto doc = docs.get(p.uri); doc && doc->text->size() <= assist::IndexOptions{}.max_file_bytes)
    index.document_text(assist::path_of_uri(p.uri), doc->text, true);
  else if (doc) index.close_document(assist::path_of_uri(p.uri));  // grown past the limit: its last text goes
}

void Server::Impl::on_did_close(const DocumentParams& p) {
  index.close_document(assist::path_of_uri(p.uri));
  {
    std::lock_guard lock(sticky_mu);
    sticky.erase(p.uri);
  }
  {
    std::lock_guard lock(editor_defs_mu);
    editor_defs.erase(p.uri);
  }
  {
    std::lock_guard lock(recent_mu);
    std::erase_if(recent_edits, [&](const RecentEdit& e) { return e.uri == p.uri; });
    std::erase_if(viewed, [&](const Viewed& v) { return v.uri == p.uri; });
  }
  if (docs.close(p.uri) >= kLargeMessageBytes) release_free_memory();
}
void Server::Impl::on_did_save(const DocumentParams& p) { index.file_changed(assist::path_of_uri(p.uri)); }

// ---- telemetry notifications ------------------------------------------------------

void Server::Impl::on_did_show(const NoParams&) { service.count_shown(); }
void Server::Impl::on_did_accept(const NoParams&) { service.count_accepted(); }
void Server::Impl::on_did_partially_accept(const NoParams&) { service.count_partially_accepted(); }

// ---- public ------------------------------------------------------------------------

Server::Server(Transport& t, ServerOptions opt) : impl_(std::make_unique<Impl>(t, std::move(opt))) {}
Server::~Server() = default;

int Server::run() {
  while (!impl_->exiting && !impl_->output_closed) {
    auto m = impl_->t.read();
    if (!m) break;  // end of input without exit
    if (!m->error.empty()) {
      spdlog::warn("skipping a malformed message: {}", m->error);
      continue;
    }
    const bool large = m->body.size() >= kLargeMessageBytes;
    impl_->handle(m->body);
    if (large) {
      m.reset();
      release_free_memory();
    }
  }
  return impl_->exiting && impl_->shutdown_received ? 0 : 1;
}

}  // namespace moelsp::lsp

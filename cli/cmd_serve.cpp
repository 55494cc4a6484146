// `moelsp serve`: the assistant service over HTTP (http/). The model
// loads in the background so /health answers 503 with progress meanwhile;
// SIGINT/SIGTERM stop accepting, end what is generating (streams with an
// error event and [DONE], waiting requests with 503) and exit 0; SIGHUP is
// ignored.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "assist/model_host.h"
#include "assist/service.h"
#include "commands.h"
#include "engine/default_model.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "expert_report.h"
#include "http/api.h"
#include "http/http_server.h"
#include "options.h"

namespace moelsp::cli {

namespace {

// The sampler settings the model's author recommends: llama.cpp's
// general.sampling.* keys. A value of the wrong type or out of range is
// logged and left out, never fatal: the API's defaults serve instead.
http::RecommendedSampling recommended_sampling(const gguf::File& f) {
  http::RecommendedSampling r;
  const auto number = [&](const char* key, double lo, double hi) -> std::optional<double> {
    const gguf::Value* v = f.find(key);
    if (!v) return std::nullopt;
    const std::optional<double> x = v->as<double>();
    if (x && *x >= lo && *x <= hi) return x;
    spdlog::warn("{}: {} = {} is not a number within [{}, {}]; ignored", f.path(), key, v->to_string(), lo, hi);
    return std::nullopt;
  };
  if (auto x = number("general.sampling.temp", 0, 10)) r.temperature = float(*x);
  if (auto x = number("general.sampling.top_p", 1e-6, 1)) r.top_p = float(*x);
  if (auto x = number("general.sampling.min_p", 0, 1)) r.min_p = float(*x);
  if (auto x = number("general.sampling.top_k", -1, 1 << 20)) r.top_k = std::max(0, int(*x));
  return r;
}

// The recommendation as /v1/status and the log show it: only the keys the model sets.
nlohmann::json to_json(const http::RecommendedSampling& r) {
  nlohmann::json j = nlohmann::json::object();
  if (r.temperature) j["temperature"] = *r.temperature;
  if (r.top_p) j["top_p"] = *r.top_p;
  if (r.top_k) j["top_k"] = *r.top_k;
  if (r.min_p) j["min_p"] = *r.min_p;
  return j;
}

// The API's view of a model that loaded: its names, context, status
// (the host's and the sampling defaults), metrics, expert report and the
// sampling defaults it recommends.
http::ModelState ready_state(const assist::ModelHost& host, const assist::ModelHost::Snapshot& st) {
  const auto model = st.model;
  const std::string id = model->config().name.empty() ? model->config().arch : model->config().name;
  const http::RecommendedSampling rec = recommended_sampling(model->file());
  const std::string sampling_json = to_json(rec).dump();  // what requests that set none get
  if (sampling_json != "{}") spdlog::info("sampling defaults from the model (general.sampling.*): {}", sampling_json);
  std::function<std::string(bool)> experts;
  if (model->config().n_expert > 0)
    experts = [model](bool svg) {
      // Read without a lock, as /metrics does: the counts only grow.
      const cli::ExpertReport r = cli::expert_report(
          *model, std::filesystem::path(model->file().path()).filename().string(), "requests served");
      return svg ? cli::heatmap_svg(r) : cli::report_json(r);
    };
  return {.phase = assist::ModelPhase::Ready,
          .id = id,
          .n_ctx = st.n_ctx,
          .file = st.file,
          .message = "ready",
          .status_json =
              [&host, sampling_json] {
                nlohmann::json j = host.status();
                j["samplingDefaults"] = nlohmann::json::parse(sampling_json);
                // (names and messages from files and servers: bad UTF-8 becomes U+FFFD)
                return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
              },
          .metrics_text = [&host] { return host.metrics_text(); },
          .experts = experts,
          .sampling = rec};
}

http::ModelState state_without_model(const assist::ModelHost::Snapshot& st) {
  return {.phase = st.phase,
          .id = "",
          .file = st.file,
          .message = st.message,
          .status_json = nullptr,
          .metrics_text = nullptr};
}

// The host's hooks: the API learns of the load as it goes; a failure is the
// API's error state, and the server goes on answering.
assist::ModelHost::Hooks api_hooks(http::Api& api, const assist::ModelHost& host) {
  return {.loading = [&api](const assist::ModelHost::Snapshot& st) { api.set_model(state_without_model(st)); },
          .done =
              [&api, &host](const assist::ModelHost::Snapshot& st) {
                if (st.phase == assist::ModelPhase::Ready) {
                  spdlog::info("model loaded: {}", st.file);
                  api.set_model(ready_state(host, st));
                } else {
                  spdlog::error("the model failed to load: {}", st.message);
                  api.set_model(state_without_model(st));
                }
              }};
}

// Signals go to one thread that stops the server (blocked here, before any
// thread starts, so every thread inherits the mask).
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);  // ignored (logged): closing the terminal does not stop a server
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

http::ApiOptions api_options(const ServeOptions& o, const assist::Settings& settings) {
  const bool loopback = o.host == "127.0.0.1" || o.host == "::1" || o.host == "localhost";
  if (!loopback && o.api_key.empty())
    spdlog::warn("serving on {} without --api-key: anyone who can reach this address can use the model", o.host);
  return {.api_key = o.api_key,
          .loopback_hosts_only = loopback && o.api_key.empty(),
          .chat_template = settings.chat_template.value_or(""),
          .max_queue = size_t(o.max_queue),
          .served_names = o.served_names};
}

http::ServerOptions server_options(const ServeOptions& o) {
  http::ServerOptions so;
  so.host = o.host == "localhost" ? "127.0.0.1" : o.host;
  so.port = o.port;
  so.max_body = size_t(o.max_body_mb) << 20;
  so.cors_origin = o.cors;
  so.io_timeout_s = o.timeout_s;
  return so;
}

}  // namespace

int serve(const ServeOptions& o) {
  const sigset_t signals = block_stop_signals();
  assist::Settings settings;  // the user's config file, --config FILE, then the flags
  assist::Service service;
  std::optional<http::Api> api;
  std::unique_ptr<http::HttpServer> server;  // (destroyed first: it serves through the api)
  const http::ServerOptions so = server_options(o);
  try {
    settings = assist::read_config_files(o.config);
    settings.merge_from(o.settings);
    api.emplace(service, api_options(o, settings));
    server = std::make_unique<http::HttpServer>(*api, so);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp serve: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "moelsp serve: listening on http://%s:%d (model: %s)\n", so.host.c_str(), server->port(),
               o.model.c_str());
  std::fflush(stderr);

  // The model on the plan for agents: its whole context when memory allows.
  assist::ModelHost host(service, api_hooks(*api, host));
  assist::Settings load = settings;
  load.model = o.model;
  load.backend_url.reset();  // serve runs the engine: backend.url is the editor's setting
  host.load(load, /*full_context=*/true);
  std::atomic<bool> stopped{false};
  std::thread waiter([&] {
    int sig = 0;
    while (sigwait(&signals, &sig) == 0 && sig == SIGHUP && !stopped)
      spdlog::info("SIGHUP ignored: moelsp serve stops on SIGINT or SIGTERM");
    if (!stopped) spdlog::info("signal {}: stopping", sig);
    server->stop();
  });
  server->run();
  stopped = true;
  // The waiter is blocked in sigwait unless a signal stopped us: wake it.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  host.unload();
  return 0;
}

void add_serve(CLI::App& app, std::vector<Command>& out) {
  auto sv = std::make_shared<ServeOptions>();
  auto* c = app.add_subcommand("serve",
                               "HTTP server on 127.0.0.1: OpenAI-compatible /v1/completions and "
                               "/v1/chat/completions, llama.cpp's /infill and /completion, /health, /metrics");
  c->add_option("--host", sv->host, "Address to listen on; anything but loopback wants --api-key")
      ->capture_default_str();
  c->add_option("--port", sv->port, "Port (0: any free one, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  c->add_option("--api-key", sv->api_key, "Require 'Authorization: Bearer KEY' (not for /health)");
  c->add_option("--cors", sv->cors, "Allow browser pages from this origin (default: no CORS headers)");
  c->add_option("--max-body-mb", sv->max_body_mb, "Largest request body in MiB (413 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  c->add_option("--timeout", sv->timeout_s, "Seconds a client may take to send a request or read an answer")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  c->add_option("--max-queue", sv->max_queue, "Requests waiting for the engine at most (429 with Retry-After beyond)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  c->add_option("--served-model-name", sv->served_names,
                "A name the model answers to in requests' \"model\" (repeatable). Without any, every name is "
                "answered by the loaded model and echoed (agents ask for their vendor's models); with some, only "
                "they, the model's id, file name and \"\" are, and other names get 404");
  c->add_option("--config", sv->config,
                "Config file (JSON, or TOML when it ends in .toml) with the setting names of "
                "`moelsp settings`; read after ~/.config/moelsp/config.toml or config.json");
  auto flags = std::make_shared<SettingFlags>(c, assist::kServeFlag);
  c->footer(
      "Examples:\n"
      "  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
      "       -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Write fizzbuzz\"}], \"stream\": true}'\n"
      "  llama.vim / llama.vscode: point their endpoint at http://127.0.0.1:8080/infill");
  out.push_back({c, [sv, c, flags] {
                   if (!apply_flags(*flags, sv->settings)) return 2;
                   sv->model = sv->settings.model.value_or("");
                   return default_model(sv->model, c) ? serve(*sv) : 2;
                 }});
}

}  // namespace moelsp::cli

// The server's state, shared by server.cpp (transport loop, lifecycle,
// documents, settings) and the feature handlers (handlers_completion.cpp,
// handlers_chat.cpp: thin adapters from the protocol to assist::Service, which
// holds the completion pipeline and chat). Internal to lsp/.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "assist/remote_backend.h"
#include "assist/service.h"
#include "documents.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "server.h"
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

Settings settings_from(const json& j);

// A request in flight: $/cancelRequest (or, for completions, a newer one for
// the same document) cancels it.
using Pending = assist::Ticket;

struct Server::Impl {
  Transport& t;
  ServerOptions opt;
  Settings init_options;
  std::mutex settings_mu;

  enum class Phase { Uninitialized, Running, ShutDown } phase = Phase::Uninitialized;
  bool exiting = false, shutdown_received = false;
  bool client_inline = false, client_completion = false, client_progress = false;
  bool client_execute = false, client_dyn_config = false, client_dyn_completion = false, client_dyn_inline = false;

  DocumentStore docs;
  assist::Service service;  // the completion pipeline, chat, telemetry

  std::mutex model_mu;
  std::shared_ptr<Model> model;
  std::shared_ptr<assist::EngineBackend> backend;  // the engine, once loaded (also in `service`)
  std::shared_ptr<assist::RemoteBackend> remote;   // or a remote server (backend.url)
  json plan_json, hw_json;  // the plan the engine runs with, and the machine it was made for
  std::string state = "loading", state_message;
  // The model and plan overrides the engine was built with: a configuration
  // change asks for a restart only when it changes one of these.
  std::optional<std::string> loaded_model, loaded_backend_url;
  PlanOverrides loaded_plan;

  std::mutex pending_mu;
  std::unordered_map<std::string, std::shared_ptr<Pending>> pending;  // by id.dump()

  std::mutex q_mu;
  std::condition_variable q_cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  std::vector<std::thread> workers;
  std::thread loader;
  std::atomic<int> next_server_request_id{1};

  using Handler = void (Impl::*)(const json& id, const json& params);
  using NotificationHandler = void (Impl::*)(const json& params);
  std::unordered_map<std::string, Handler> requests;
  std::unordered_map<std::string, NotificationHandler> notifications;

  Impl(Transport& tr, ServerOptions o);
  ~Impl();

  Settings effective();

  // output
  void send(const json& j);
  void reply(const json& id, json result);
  void reply_error(const json& id, int code, const std::string& message);
  void notify(const std::string& method, json params);
  void log_message(int type, const std::string& text);
  json status_json();
  static json completion_options();
  // Every command workspace/executeCommand handles, the inline items'
  // moelsp.accepted among them: initialize advertises exactly this list
  // (vscode-languageclient registers only advertised commands).
  static const std::vector<std::string>& commands();
  void send_status();
  void progress(const json& token, json value);

  // requests and notifications
  void handle(const std::string& body);
  void enqueue(std::function<void()> job);
  std::shared_ptr<Pending> track(const json& id);
  void untrack(const json& id);
  void start_loading();
  void start_remote(const Settings& s);

  void on_initialize(const json& id, const json& params);
  void on_shutdown(const json& id, const json& params);
  void on_status(const json& id, const json& params);
  void on_completion(const json& id, const json& params);
  void on_inline_completion(const json& id, const json& params);
  void on_execute_command(const json& id, const json& params);
  void on_chat(const json& id, const json& params);

  void on_initialized(const json& params);
  void on_cancel(const json& params);
  void on_did_open(const json& params);
  void on_did_change(const json& params);
  void on_did_close(const json& params);
  void on_did_save(const json& params);
  void on_did_change_configuration(const json& params);
  void on_did_show(const json& params);
  void on_did_accept(const json& params);
  void on_did_partially_accept(const json& params);

  // features
  void complete(const json& id, const json& params, bool inline_kind);
  void chat(const json& id, const std::string& command, const json& args, const json& work_token,
            const json& partial_token);
};

}  // namespace moelsp::lsp

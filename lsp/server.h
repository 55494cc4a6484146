// The LSP server: reads JSON-RPC messages from a Transport, answers requests
// on worker threads (so a slow completion never blocks the reader), and
// drives the engine. Settings come from initializationOptions, command-line
// flags, a config file and defaults, in that order of precedence.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "engine/plan.h"

namespace moelsp::lsp {

class Transport;

// Every setting is optional so that the layers can be merged.
struct Settings {
  std::optional<std::string> model;
  std::optional<int> completion_max_tokens;
  std::optional<int> completion_time_budget_ms;
  std::optional<int> completion_debounce_ms;
  std::optional<int> chat_max_tokens;
  std::optional<std::string> chat_template;  // when the model's is missing or unknown
  // A remote server instead of the embedded engine (backend.url set):
  // backend.url, backend.apiKey, backend.model, backend.api, backend.fimTemplate.
  std::optional<std::string> backend_url, backend_api_key, backend_model, backend_api, backend_fim_template;
  // What shapes the engine: threads, contextSize, kvCache.*, weights,
  // experts.*, batch.max, gpu.* — overrides of the automatic plan.
  PlanOverrides plan;

  // Fields set in `over` replace ours.
  void merge_from(const Settings& over);
  // Parses the JSON object (names as in the README: model, threads,
  // contextSize, completion.maxTokens, …); throws std::runtime_error on a
  // wrong type. Accepts nested ("completion": {"maxTokens": …}) and dotted keys.
  static Settings from_json_text(const std::string& json_text);
};

struct ServerOptions {
  Settings flags;        // from the command line
  Settings config_file;  // from --config FILE
};

class Server {
 public:
  Server(Transport& t, ServerOptions opt);
  ~Server();
  // Serves until `exit` or end of input. Returns the process exit code:
  // 0 after shutdown + exit, 1 otherwise.
  int run();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace moelsp::lsp

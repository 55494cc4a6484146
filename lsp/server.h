// The LSP server: reads JSON-RPC messages from a Transport, answers requests
// on worker threads (so a slow completion never blocks the reader), and
// drives the engine. Settings come from initializationOptions, command-line
// flags, a config file and defaults, in that order of precedence.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "assist/settings.h"

namespace moelsp::lsp {

class Transport;

// The settings (assist/settings.h: one table for the LSP options, the
// config file, the flags and the README).
using Settings = assist::Settings;

struct ServerOptions {
  Settings flags;        // from the command line
  Settings config_file;  // from ~/.config/moelsp/config.* and --config FILE
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

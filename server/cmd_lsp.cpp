// `moelsp lsp`: the language server on stdin/stdout. Only protocol messages
// go to stdout; logs go to stderr (and window/logMessage).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "lsp/server.h"
#include "lsp/transport.h"

namespace moelsp::cli {

int lsp(const LspOptions& o) {
  lsp::ServerOptions so;
  try {
    if (!o.config.empty()) so.config_file = lsp::Settings::from_json_text(read_text(o.config));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp lsp: config file: %s\n", e.what());
    return 1;
  }
  so.flags = o.flags;
  lsp::Transport t(STDIN_FILENO, STDOUT_FILENO);
  lsp::Server server(t, so);
  return server.run();
}

}  // namespace moelsp::cli

// `moelsp lsp`: the language server on stdin/stdout. Only protocol messages
// go to stdout; logs go to stderr (and window/logMessage).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "engine/plan.h"
#include "lsp/server.h"
#include "lsp/transport.h"

namespace moelsp::cli {

int lsp(const LspOptions& o) {
  lsp::ServerOptions so;
  // ~/.config/moelsp/config.{toml,json} first, then --config FILE over it.
  for (const std::string& path : {user_config_path(), o.config}) {
    if (path.empty()) continue;
    try {
      const std::string text = read_text(path);
      so.config_file.merge_from(lsp::Settings::from_json_text(path.ends_with(".toml") ? toml_to_json(text) : text));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moelsp lsp: config file %s: %s\n", path.c_str(), e.what());
      return 1;
    }
  }
  so.flags = o.flags;
  lsp::Transport t(STDIN_FILENO, STDOUT_FILENO);
  lsp::Server server(t, so);
  return server.run();
}

}  // namespace moelsp::cli

// `moelsp lsp`: the language server on stdin/stdout. Only protocol messages
// go to stdout; logs go to stderr (and window/logMessage).
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli_util.h"
#include "commands.h"
#include "engine/plan.h"
#include "lsp/server.h"
#include "lsp/transport.h"
#include "options.h"

namespace moelsp::cli {

int lsp(const LspOptions& o) {
  // A client that closes our stdout must not kill us with SIGPIPE before we
  // can say so: a failed write is reported and the server exits.
  std::signal(SIGPIPE, SIG_IGN);
  lsp::ServerOptions so;
  // ~/.config/moelsp/config.{toml,json} first, then --config FILE over it.
  for (const std::string& path : {assist::user_config_path(), o.config}) {
    if (path.empty()) continue;
    try {
      so.config_file.merge_from(assist::read_config_file(path));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moelsp lsp: config file %s\n", e.what());
      return 1;
    }
  }
  so.flags = o.flags;
  lsp::Transport t(STDIN_FILENO, STDOUT_FILENO);
  lsp::Server server(t, so);
  return server.run();
}

}  // namespace moelsp::cli

namespace moelsp::cli {

int settings(const std::string& format) {
  if (format == "markdown") {
    std::fputs(assist::settings_markdown().c_str(), stdout);
  } else if (format == "json") {
    std::printf("%s\n", assist::settings_json().c_str());
  } else {
    for (const auto& s : assist::setting_specs()) {
      std::string flag(s.flag.empty() ? "" : s.flag);
      std::printf("%-26s %-28s default: %s\n", std::string(s.key).c_str(), flag.c_str(),
                  std::string(s.default_text).c_str());
      std::printf("%-26s %s\n", "", std::string(s.help).c_str());
    }
    std::printf(
        "\nSet them in initializationOptions / workspace settings (nested or dotted names), in\n"
        "~/.config/moelsp/config.toml or config.json, or with the flags; later layers win: defaults, config\n"
        "file, --config FILE, flags, the editor.\n");
  }
  return 0;
}

void add_lsp(CLI::App& app, std::vector<Command>& out) {
  auto format = std::make_shared<std::string>("text");
  auto* s = app.add_subcommand("settings",
                               "List every setting: its name (LSP initializationOptions and config file key), "
                               "flag, default and meaning");
  s->add_flag_callback(
      "--markdown", [format] { *format = "markdown"; }, "As the README's Markdown table");
  s->add_flag_callback(
      "--json", [format] { *format = "json"; }, "As JSON (key, type, flag, default, range, choices)");
  out.push_back({s, [format] { return settings(*format); }});

  auto ls = std::make_shared<LspOptions>();
  auto* c = app.add_subcommand("lsp", "Language server over stdin/stdout (the default when stdin is not a terminal)");
  auto flags = std::make_shared<SettingFlags>(c, assist::kLspFlag);
  c->add_option("--config", ls->config,
                "Config file (JSON, or TOML when it ends in .toml) with the same setting names; "
                "read after ~/.config/moelsp/config.toml or config.json");
  c->footer(
      "Editors start it through the clients in the sources' editor-clients/ folder: a VS Code extension,\n"
      "Neovim and Vim 9 plugins, an Emacs package, a Helix languages.toml (README: Use it in your editor).\n"
      "More log on stderr: moelsp --log-level debug lsp");
  out.push_back({c, [ls, flags] { return apply_flags(*flags, ls->flags) ? lsp(*ls) : 2; }});
}

}  // namespace moelsp::cli

// moelsp: one executable, several subcommands (README: Commands). Logs go to
// stderr; stdout carries only each command's output. Each subcommand's
// options live beside its code (cmd_*.cpp, add_* in commands.h); this file
// holds the program's own options and runs the subcommand that was parsed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "engine/hw.h"
#include "kernels/cuda.h"

int main(int argc, char** argv) {
  namespace cli = moelsp::cli;
  if (const char* probe = std::getenv("MOELSP_BANDWIDTH_PROBE"))  // moelsp bench's probe process
    return cli::bandwidth_probe_child(probe);
  moelsp::keep_freed_memory();  // before any thread allocates (engine/hw.h says why)
  spdlog::set_default_logger(spdlog::stderr_color_mt("moelsp"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");

  CLI::App app{"moelsp: a local coding assistant with an embedded Mixture-of-Experts inference engine"};
  app.set_version_flag(
      "--version", std::string("moelsp 0.1.0") + (moelsp::kernels::cuda::compiled_in() ? " (CUDA)" : " (CPU only)"));
  app.require_subcommand(0, 1);
  std::string log_level = "warn", log_file;
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app.add_option("--log-file", log_file, "Also write the log to this file (appended)");

  std::vector<cli::Command> commands;  // in `moelsp --help`'s order
  for (auto add : {cli::add_inspect, cli::add_tokenize, cli::add_generate, cli::add_bench, cli::add_quantize,
                   cli::add_profile, cli::add_lsp, cli::add_serve, cli::add_pull})
    add(app, commands);

  CLI11_PARSE(app, argc, argv);
  if (!log_file.empty()) {
    try {
      spdlog::default_logger()->sinks().push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "moelsp: --log-file %s: %s\n", log_file.c_str(), e.what());
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::from_str(log_level));

  for (const cli::Command& c : commands)
    if (c.app->parsed()) return c.run();
  // No subcommand: an editor that starts `moelsp` with a pipe gets the language server.
  if (!isatty(STDIN_FILENO))
    for (const cli::Command& c : commands)
      if (c.app->get_name() == "lsp") return c.run();
  std::fputs(app.help().c_str(), stderr);
  return 2;
}

// What the subcommands share on the command line: each cmd_*.cpp registers
// its own subcommand and options (add_* in commands.h) with these checks and
// option groups, and main.cpp runs the one that was parsed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "assist/settings.h"
#include "commands.h"
#include "settings_flags.h"

namespace moelsp::cli {

// A number within [lo, hi] (NaN is outside every range; CLI::Range lets it through).
CLI::Validator within(double lo, double hi);

// An existing regular file (a directory would read as empty).
extern const CLI::Validator kFile;

// An executable file (a missing --peer must not read as "exit 32512").
extern const CLI::Validator kExecutable;

inline constexpr const char* kQuietHelp =
    "No progress on stderr (a bar on a terminal, else a line every 10 s; results and errors still print)";
inline constexpr const char* kModelHelp =
    "GGUF model file, or a hub reference (hf://owner/repo:QUANT; pulled into the cache first when it is not there) "
    "(default: the embedded model, models/moelsp-default.gguf)";
inline constexpr const char* kThreadsHelp = "Threads (default: physical cores)";

// Model loading options shared by the engine commands: -m, -t, -c, --kv-type, -q.
void add_model_options(CLI::App* c, ModelOptions& m);

// The embedded default model where a command was given none; false (with
// the message on stderr) when there is none either.
bool default_model(std::string& model, const CLI::App* c);

// Stores the setting flags that were given; false (with the message on
// stderr) when one does not apply.
bool apply_flags(const SettingFlags& flags, assist::Settings& s);

}  // namespace moelsp::cli

#include "options.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "assist/hub.h"
#include "commands.h"
#include "engine/default_model.h"

namespace moelsp::cli {

CLI::Validator within(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0' || !(v >= lo && v <= hi))
          return fmt::format("'{}' is not a number in [{}, {}]", text, lo, hi);
        return "";
      },
      fmt::format("[{} - {}]", lo, hi));
}

const CLI::Validator kFile = CLI::Validator(
    [](std::string& path) -> std::string {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec)) return path + ": not a readable file";
      return "";
    },
    "FILE");

const CLI::Validator kExecutable = CLI::Validator(
    [](std::string& path) -> std::string {
      if (access(path.c_str(), X_OK) != 0) return path + ": not an executable file";
      return "";
    },
    "PATH");

void add_model_options(CLI::App* c, ModelOptions& m) {
  c->add_option("-m,--model", m.model, kModelHelp);
  c->add_option("-t,--threads", m.threads, kThreadsHelp);
  c->add_option("-c,--ctx-size", m.ctx, "Context size in tokens")->capture_default_str();
  c->add_option("--kv-type", m.kv_type, "KV cache type: f16, bf16, f32 or q8_0")->capture_default_str();
  c->add_flag("-q,--quiet", m.quiet, kQuietHelp);
}

bool default_model(std::string& model, const CLI::App* c) {
  if (!model.empty() && assist::looks_like_model_ref(model)) return model_from_ref(model, c->get_name());
  if (!model.empty()) return true;
  model = default_model_path();
  if (!model.empty() && assist::looks_like_model_ref(model))
    return model_from_ref(model, c->get_name());  // $MOELSP_MODEL
  if (!model.empty()) return true;
  std::fprintf(stderr,
               "moelsp %s: no model given and the default model (models/moelsp-default.gguf) is not found: "
               "give -m FILE or set MOELSP_MODEL\n",
               c->get_name().c_str());
  return false;
}

bool apply_flags(const SettingFlags& flags, assist::Settings& s) {
  try {  // values were checked while parsing; this stores them
    flags.apply(s);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp: %s\n", e.what());
    return false;
  }
}

}  // namespace moelsp::cli

// moelsp: one executable, several subcommands (DESIGN.md §1). Logs go to
// stderr; stdout carries only each command's output.
#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "kernels/cuda.h"

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("moelsp"));
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");

  CLI::App app{"moelsp: a local coding assistant with an embedded Mixture-of-Experts inference engine"};
  app.set_version_flag("--version", std::string("moelsp 0.1.0") +
                                        (moelsp::kernels::cuda::compiled_in() ? " (CUDA)" : " (CPU only)"));
  app.require_subcommand(1);
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off")->capture_default_str();

  moelsp::cli::InspectOptions ins;
  auto* c_ins = app.add_subcommand("inspect", "Print a GGUF file's metadata, tensors and whether moelsp supports it");
  c_ins->add_option("file", ins.path, "GGUF file")->required();
  c_ins->add_flag("--json", ins.json, "Machine-readable output");
  c_ins->add_flag("--all-tensors", ins.all_tensors, "List every tensor (default: first 40 and a summary)");

  moelsp::cli::TokenizeOptions tk;
  auto* c_tk = app.add_subcommand("tokenize", "Print the tokens of a text");
  c_tk->add_option("-m,--model", tk.model, "GGUF file with a tokenizer")->required();
  auto* p = c_tk->add_option("-p,--prompt", tk.prompt, "Text to tokenize");
  auto* fo = c_tk->add_option("-f,--file", tk.file, "File whose contents to tokenize");
  p->excludes(fo);
  c_tk->add_flag("--ids", tk.ids_only, "Print only the ids, space-separated, on one line");
  c_tk->add_flag("--add-special", tk.add_special, "Add BOS/EOS where the model asks for them");
  c_tk->add_flag("--no-parse-special", tk.no_parse_special,
                 "Treat special-token text (e.g. <|im_end|>) as plain text");

  moelsp::cli::DetokenizeOptions dt;
  auto* c_dt = app.add_subcommand("detokenize", "Print the text of token ids");
  c_dt->add_option("-m,--model", dt.model, "GGUF file with a tokenizer")->required();
  c_dt->add_option("ids", dt.ids, "Token ids (separate arguments or one space-separated string)")->required();
  c_dt->add_flag("--render-special", dt.render_special, "Print control tokens' text");

  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));

  if (c_tk->parsed() && p->count() == 0 && fo->count() == 0) {
    std::fprintf(stderr, "moelsp tokenize: give the text with -p TEXT or -f FILE\n");
    return 2;
  }
  if (c_ins->parsed()) return moelsp::cli::inspect(ins);
  if (c_tk->parsed()) return moelsp::cli::tokenize(tk);
  if (c_dt->parsed()) return moelsp::cli::detokenize(dt);
  return 2;
}

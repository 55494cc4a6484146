// moelsp: one executable, several subcommands (README: Commands). Logs go to
// stderr; stdout carries only each command's output.
#include <cstdlib>
#include <unistd.h>

#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "engine/default_model.h"
#include "engine/hw.h"
#include "kernels/cuda.h"
#include "settings_flags.h"

namespace {

// A number within [lo, hi] (NaN is outside every range; CLI::Range lets it through).
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

constexpr const char* kQuietHelp =
    "No progress on stderr (a bar on a terminal, else a line every 10 s; results and errors still print)";

// An existing regular file (a directory would read as empty).
const CLI::Validator kFile = CLI::Validator(
    [](std::string& path) -> std::string {
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec)) return path + ": not a readable file";
      return "";
    },
    "FILE");

// An executable file (a missing --peer must not read as "exit 32512").
const CLI::Validator kExecutable = CLI::Validator(
    [](std::string& path) -> std::string {
      if (access(path.c_str(), X_OK) != 0) return path + ": not an executable file";
      return "";
    },
    "PATH");

}  // namespace

int main(int argc, char** argv) {
  if (const char* probe = std::getenv("MOELSP_BANDWIDTH_PROBE"))  // moelsp bench's probe process
    return moelsp::cli::bandwidth_probe_child(probe);
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

  moelsp::cli::InspectOptions ins;
  auto* c_ins = app.add_subcommand("inspect", "Print a GGUF file's metadata, tensors and whether moelsp supports it");
  c_ins->add_option("file", ins.path, "GGUF file")->required();
  c_ins->add_flag("--json", ins.json, "Machine-readable output");
  c_ins->add_flag("--all-tensors", ins.all_tensors, "List every tensor (default: first 40 and a summary)");

  moelsp::cli::TokenizeOptions tk;
  auto* c_tk = app.add_subcommand("tokenize", "Print the tokens of a text");
  c_tk->add_option("-m,--model", tk.model, "GGUF file with a tokenizer (default: the embedded model)");
  auto* p = c_tk->add_option("-p,--prompt", tk.prompt, "Text to tokenize");
  auto* fo = c_tk->add_option("-f,--file", tk.file, "File whose contents to tokenize")->check(kFile);
  p->excludes(fo);
  c_tk->add_flag("--ids", tk.ids_only, "Print only the ids, space-separated, on one line");
  c_tk->add_flag("--add-special", tk.add_special, "Add BOS/EOS where the model asks for them");
  c_tk->add_flag("--no-parse-special", tk.no_parse_special, "Treat special-token text (e.g. <|im_end|>) as plain text");

  moelsp::cli::DetokenizeOptions dt;
  auto* c_dt = app.add_subcommand("detokenize", "Print the text of token ids");
  c_dt->add_option("-m,--model", dt.model, "GGUF file with a tokenizer (default: the embedded model)");
  c_dt->add_option("ids", dt.ids, "Token ids (separate arguments or one space-separated string)")->required();
  c_dt->add_flag("--render-special", dt.render_special, "Print control tokens' text");

  // Model loading options shared by the engine commands.
  const auto add_model_opts = [](CLI::App* c, moelsp::cli::ModelOptions& m) {
    c->add_option("-m,--model", m.model, "GGUF model file (default: the embedded model, models/moelsp-default.gguf)");
    c->add_option("-t,--threads", m.threads, "Threads (default: physical cores)");
    c->add_option("-c,--ctx-size", m.ctx, "Context size in tokens")->capture_default_str();
    c->add_option("--kv-type", m.kv_type, "KV cache type: f16, bf16, f32 or q8_0")->capture_default_str();
    c->add_flag("-q,--quiet", m.quiet, kQuietHelp);
  };

  moelsp::cli::GenerateOptions gen;
  auto* c_gen = app.add_subcommand("generate", "Generate text from a prompt, streamed to stdout (timings to stderr)");
  add_model_opts(c_gen, gen.m);
  auto* gp =
      c_gen->add_option("-p,--prompt", gen.prompt, "Prompt text (BOS added as the model asks; special tokens parsed)");
  auto* gf = c_gen->add_option("-f,--file", gen.file, "Read the prompt from a file")->check(kFile);
  auto* gt = c_gen->add_option("--tokens", gen.tokens, "Prompt as token ids (\"ID ID ...\"), used as given");
  gp->excludes(gf)->excludes(gt);
  gf->excludes(gt);
  c_gen->add_option("-n,--n-predict", gen.n_predict, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c_gen->add_option("--temp", gen.temp, "Temperature (0: greedy)")->capture_default_str()->check(within(0, 10));
  c_gen->add_option("--top-k", gen.top_k, "Top-k (0: off)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  c_gen->add_option("--top-p", gen.top_p, "Top-p (1: off)")->capture_default_str()->check(within(1e-6, 1));
  c_gen->add_option("--min-p", gen.min_p, "Min-p (0: off)")->capture_default_str()->check(within(0, 1));
  c_gen->add_option("--repeat-penalty", gen.repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str()
      ->check(within(0.01, 10));
  c_gen->add_option("--presence-penalty", gen.presence_penalty, "Presence penalty")
      ->capture_default_str()
      ->check(within(-10, 10));
  c_gen->add_option("--frequency-penalty", gen.frequency_penalty, "Frequency penalty")
      ->capture_default_str()
      ->check(within(-10, 10));
  c_gen->add_option("-s,--seed", gen.seed, "Random seed (-1: random)")->capture_default_str();
  c_gen->add_flag("--greedy", gen.greedy, "Greedy decoding (same as --temp 0)");
  c_gen->add_flag("--ids", gen.ids, "Print the generated token ids on one line instead of the text");
  c_gen->add_flag("--ignore-eos", gen.ignore_eos, "Do not stop at end-of-generation tokens");
  c_gen->add_option("--stop", gen.stop, "Stop before this string (repeatable)");
  auto* gg =
      c_gen->add_option("--grammar", gen.grammar, "Constrain the output to this GBNF grammar (llama.cpp's syntax)");
  auto* ggf = c_gen->add_option("--grammar-file", gen.grammar_file, "Constrain the output to the GBNF grammar in FILE")
                  ->check(kFile);
  auto* gj = c_gen->add_option("-j,--json-schema", gen.json_schema,
                               "Constrain the output to JSON of this schema (e.g. '{\"type\": \"object\"}')");
  auto* gjf =
      c_gen
          ->add_option("--json-schema-file", gen.json_schema_file, "Constrain the output to JSON of the schema in FILE")
          ->check(kFile);
  for (auto* a : {gg, ggf, gj, gjf})
    for (auto* b : {gg, ggf, gj, gjf})
      if (a != b) a->excludes(b);

  moelsp::cli::SettingFlags gen_flags(c_gen, moelsp::assist::kPlanFlag);

  moelsp::cli::LogitsOptions lg;
  lg.m.kv_type = "f32";  // for comparisons with other implementations: exact attention inputs
  auto* c_lg =
      app.add_subcommand("logits", "Write the logits of every position of a token sequence as raw float32 rows");
  add_model_opts(c_lg, lg.m);
  c_lg->add_option("--tokens", lg.tokens, "Token ids (\"ID ID ...\")")->required();
  c_lg->add_option("-o,--out", lg.out, "Output file (n_tokens rows of n_vocab little-endian float32)")->required();
  c_lg->add_flag("--incremental", lg.incremental,
                 "Run one token at a time through the KV cache instead of one prefill");

  moelsp::cli::PerplexityOptions px;
  auto* c_px = app.add_subcommand("perplexity", "Perplexity of a model on a text file");
  c_px->add_option("-m,--model", px.m.model,
                   "GGUF model file (default: the embedded model, models/moelsp-default.gguf)");
  c_px->add_option("-t,--threads", px.m.threads, "Threads (default: physical cores)");
  c_px->add_option("-f,--file", px.file, "Text file")->required()->check(kFile);
  c_px->add_option("-c,--ctx-size", px.ctx, "Window in tokens (at most the model's training context)")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 22));
  c_px->add_option("--stride", px.stride, "Tokens scored per window after the first (default: ctx/2)")
      ->check(CLI::Range(0, 1 << 22));
  c_px->add_option("--chunks", px.max_chunks, "Stop after this many windows (0: whole file)")
      ->check(CLI::Range(0, 1 << 30));
  c_px->add_option("--kv-type", px.m.kv_type,
                   "KV cache type: f16, bf16, f32 or q8_0 (what each costs in quality: compare their perplexities)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "bf16", "f32", "q8_0"}));

  c_px->add_flag("-q,--quiet", px.m.quiet, kQuietHelp);

  moelsp::cli::ExpertsOptions ex;
  auto* c_ex = app.add_subcommand("experts",
                                  "Run a text through a MoE model and draw each layer's expert usage: an SVG heatmap "
                                  "(layers × experts), CSV, JSON");
  c_ex->add_option("-m,--model", ex.px.m.model,
                   "GGUF model file (default: the embedded model, models/moelsp-default.gguf)");
  c_ex->add_option("-t,--threads", ex.px.m.threads, "Threads (default: physical cores)");
  c_ex->add_option("-f,--file", ex.px.file, "Text file to run")->required()->check(kFile);
  c_ex->add_option("-c,--ctx-size", ex.px.ctx, "Window in tokens")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 22));
  c_ex->add_option("--chunks", ex.px.max_chunks, "Stop after this many windows (0: whole file)")
      ->check(CLI::Range(0, 1 << 30));
  c_ex->add_option("--svg", ex.svg, "Heatmap file (empty: none)")->capture_default_str();
  c_ex->add_option("--csv", ex.csv, "The counts as CSV: layer,expert,tokens,share");
  c_ex->add_option("--json", ex.json, "The counts and per-layer figures as JSON");
  c_ex->add_flag("-q,--quiet", ex.px.m.quiet, kQuietHelp);

  moelsp::cli::ChatOptions ch;
  auto* c_ch = app.add_subcommand("chat", "Interactive chat in the terminal, using the model's chat template");
  add_model_opts(c_ch, ch.m);
  c_ch->add_option(
      "--chat-template", ch.chat_template,
      "Instead of the model's own Jinja template: a built-in one (chatml, deepseek2, deepseek3, mistral, llama2, "
      "chatglm4) or a Jinja file, FILE.jinja");
  c_ch->add_option("--system", ch.system, "System message");
  c_ch->add_option("-n,--n-predict", ch.n_predict, "Tokens per answer at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c_ch->add_option("--temp", ch.temp, "Temperature")->capture_default_str()->check(within(0, 10));
  c_ch->add_option("-s,--seed", ch.seed, "Random seed (-1: random)")->capture_default_str();
  moelsp::cli::SettingFlags ch_flags(c_ch, moelsp::assist::kPlanFlag);

  moelsp::cli::BenchOptions bo;
  auto* c_bo = app.add_subcommand(
      "bench", "Prompt-processing and decode tokens/s, memory, bandwidth roofline; optionally vs llama-bench");
  c_bo->add_option("-m,--model", bo.model, "GGUF model file (default: the embedded model, models/moelsp-default.gguf)");
  c_bo->add_option("-t,--threads", bo.threads, "Threads (default: physical cores)");
  c_bo->add_option("-p,--n-prompt", bo.n_prompt, "Prompt tokens (0: skip; with -n, within the model's context)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  c_bo->add_option("-n,--n-gen", bo.n_gen, "Generated tokens (0: skip)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  c_bo->add_option("-d,--n-depth", bo.n_depth,
                   "Context depth: pp and tg measured after this many tokens are already in the KV cache "
                   "(llama-bench's -d); the roofline then counts the KV bytes each decode step reads")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  c_bo->add_option("--kv-type", bo.kv_type,
                   "KV cache type: f16, bf16, f32 or q8_0 (the peer gets the same as -ctk/-ctv); q8_0 halves the KV "
                   "bytes a decode step at depth reads")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "bf16", "f32", "q8_0"}));
  c_bo->add_option("-r,--repetitions", bo.reps, "Repetitions (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  c_bo->add_option("--peer", bo.peer, "Path to llama.cpp's llama-bench: run it with the same settings and print ratios")
      ->check(kExecutable);
  c_bo->add_option("--background-load", bo.background,
                   "Then measure again (and the peer) while this many other processes each keep a core busy")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  c_bo->add_option("--streams", bo.streams,
                   "Also decode this many sequences together (e.g. 1,2,4,8): aggregate tokens/s per count, and the "
                   "ratio to one stream")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  c_bo->add_option("--backend", bo.backend,
                   "Where the forward pass runs: cpu, cuda, or emulated (the GPU's forward pass on a host emulation: "
                   "slow, for checking it without a GPU)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda", "emulated"}));
  c_bo->add_option("--gpu", bo.gpu, "CUDA device index (--backend cuda)")
      ->capture_default_str()
      ->check(CLI::Range(0, 255));
  c_bo->add_option("--gpu-experts", bo.gpu_experts,
                   "Routed experts per layer resident on the device, the rest computed on the CPU (default: all)")
      ->check(CLI::Range(0, 1 << 20));
  c_bo->add_flag("-q,--quiet", bo.quiet, kQuietHelp);

  moelsp::cli::QuantizeOptions qo;
  auto* c_qo = app.add_subcommand("quantize",
                                  "Rewrite a model's weight matrices in another type (F16, BF16, Q8_0, Q4_0, Q4_1, "
                                  "Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, MXFP4) or one of llama.cpp's mixes: Q3_K_M, "
                                  "Q4_K_M, Q5_K_M, Q6_K, MXFP4_MOE (MXFP4 experts, Q8_0 for the other matrices)");
  c_qo->add_option("input", qo.input, "Input GGUF")->required();
  c_qo->add_option("output", qo.output, "Output GGUF")->required();
  c_qo->add_option("type", qo.type,
                   "Target type for weight matrices, or a mix: Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, MXFP4_MOE")
      ->required();
  c_qo->add_flag("-q,--quiet", qo.quiet, kQuietHelp);

  moelsp::cli::ProfileOptions pf;
  auto* c_pf = app.add_subcommand(
      "profile", "Detect the hardware, measure it (cached), and print the plan for a model with reasons");
  c_pf->add_option("-m,--model", pf.model, "GGUF model file (default: the embedded model)");
  c_pf->add_option("-c,--ctx", pf.ctx, "Context size (default: min(4096, training context))");
  c_pf->add_option("--concurrency", pf.concurrency, "Sequences expected at once")->capture_default_str();
  c_pf->add_flag("--json", pf.json, "Machine-readable output");
  c_pf->add_flag("--recalibrate", pf.recalibrate, "Measure again instead of reading ~/.cache/moelsp/profile.json");
  c_pf->add_flag("--no-calibrate", pf.no_calibrate, "Detection only, no measurements");
  c_pf->add_option(
      "--config", pf.config,
      "Config file (JSON, or TOML when it ends in .toml), read over ~/.config/moelsp/config.toml or config.json");
  moelsp::cli::SettingFlags pf_flags(c_pf, moelsp::assist::kProfileFlag);

  std::string settings_format = "text";
  auto* c_set = app.add_subcommand("settings",
                                   "List every setting: its name (LSP initializationOptions and config file key), "
                                   "flag, default and meaning");
  c_set->add_flag_callback(
      "--markdown", [&] { settings_format = "markdown"; }, "As the README's Markdown table");
  c_set->add_flag_callback(
      "--json", [&] { settings_format = "json"; }, "As JSON (key, type, flag, default, range, choices)");

  moelsp::cli::LspOptions ls;
  auto* c_ls =
      app.add_subcommand("lsp", "Language server over stdin/stdout (the default when stdin is not a terminal)");
  moelsp::cli::SettingFlags ls_flags(c_ls, moelsp::assist::kLspFlag);
  c_ls->add_option("--config", ls.config,
                   "Config file (JSON, or TOML when it ends in .toml) with the same setting names; "
                   "read after ~/.config/moelsp/config.toml or config.json");
  c_ls->footer(
      "Editors start it through the clients in the sources' editor-clients/ folder: a VS Code extension,\n"
      "Neovim and Vim 9 plugins, an Emacs package, a Helix languages.toml (README: Use it in your editor).\n"
      "More log on stderr: moelsp --log-level debug lsp");

  moelsp::cli::ServeOptions sv;
  auto* c_sv = app.add_subcommand("serve",
                                  "HTTP server on 127.0.0.1: OpenAI-compatible /v1/completions and "
                                  "/v1/chat/completions, llama.cpp's /infill and /completion, /health, /metrics");
  c_sv->add_option("--host", sv.host, "Address to listen on; anything but loopback wants --api-key")
      ->capture_default_str();
  c_sv->add_option("--port", sv.port, "Port (0: any free one, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  c_sv->add_option("--api-key", sv.api_key, "Require 'Authorization: Bearer KEY' (not for /health)");
  c_sv->add_option("--cors", sv.cors, "Allow browser pages from this origin (default: no CORS headers)");
  c_sv->add_option("--max-body-mb", sv.max_body_mb, "Largest request body in MiB (413 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  c_sv->add_option("--timeout", sv.timeout_s, "Seconds a client may take to send a request or read an answer")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  c_sv->add_option("--max-queue", sv.max_queue, "Requests waiting for the engine at most (429 with Retry-After beyond)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  c_sv->add_option("--served-model-name", sv.served_names,
                   "A name the model answers to in requests' \"model\" (repeatable). Without any, every name is "
                   "answered by the loaded model and echoed (agents ask for their vendor's models); with some, only "
                   "they, the model's id, file name and \"\" are, and other names get 404");
  c_sv->add_option("--config", sv.config,
                   "Config file (JSON, or TOML when it ends in .toml) with the setting names of "
                   "`moelsp settings`; read after ~/.config/moelsp/config.toml or config.json");
  moelsp::cli::SettingFlags sv_flags(c_sv, moelsp::assist::kServeFlag);
  c_sv->footer(
      "Examples:\n"
      "  curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\\n"
      "       -d '{\"messages\": [{\"role\": \"user\", \"content\": \"Write fizzbuzz\"}], \"stream\": true}'\n"
      "  llama.vim / llama.vscode: point their endpoint at http://127.0.0.1:8080/infill");

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
  try {  // values were checked while parsing; this stores them
    moelsp::assist::Settings gen_s, ch_s, pf_s;
    gen_flags.apply(gen_s);
    gen.m.plan = gen_s.plan;
    ch_flags.apply(ch_s);
    ch.m.plan = ch_s.plan;
    pf_flags.apply(pf_s);
    pf.over = pf_s.plan;
    ls_flags.apply(ls.flags);
    sv_flags.apply(sv.settings);
    sv.model = sv.settings.model.value_or("");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp: %s\n", e.what());
    return 2;
  }

  // Commands that read a model use the embedded default when none is given.
  for (auto [cmd, model] : {std::pair{c_tk, &tk.model},
                            {c_dt, &dt.model},
                            {c_gen, &gen.m.model},
                            {c_lg, &lg.m.model},
                            {c_px, &px.m.model},
                            {c_ex, &ex.px.m.model},
                            {c_ch, &ch.m.model},
                            {c_bo, &bo.model},
                            {c_pf, &pf.model},
                            {c_sv, &sv.model}}) {
    if (!cmd->parsed() || !model->empty()) continue;
    *model = moelsp::default_model_path();
    if (model->empty()) {
      std::fprintf(stderr,
                   "moelsp %s: no model given and the default model (models/moelsp-default.gguf) is not found: "
                   "give -m FILE or set MOELSP_MODEL\n",
                   cmd->get_name().c_str());
      return 2;
    }
  }

  if (c_tk->parsed() && p->count() == 0 && fo->count() == 0) {
    std::fprintf(stderr, "moelsp tokenize: give the text with -p TEXT or -f FILE\n");
    return 2;
  }
  if (c_gen->parsed() && gp->count() + gf->count() + gt->count() == 0) {
    std::fprintf(stderr, "moelsp generate: give the prompt with -p TEXT, -f FILE or --tokens \"ID ...\"\n");
    return 2;
  }
  if (c_ls->parsed() || (app.get_subcommands().empty() && !isatty(STDIN_FILENO))) return moelsp::cli::lsp(ls);
  if (app.get_subcommands().empty()) {
    std::fputs(app.help().c_str(), stderr);
    return 2;
  }
  if (c_set->parsed()) return moelsp::cli::settings(settings_format);
  if (c_ins->parsed()) return moelsp::cli::inspect(ins);
  if (c_sv->parsed()) return moelsp::cli::serve(sv);
  if (c_bo->parsed()) return moelsp::cli::bench(bo);
  if (c_pf->parsed()) return moelsp::cli::profile(pf);
  if (c_qo->parsed()) return moelsp::cli::quantize(qo);
  if (c_gen->parsed()) return moelsp::cli::generate(gen);
  if (c_lg->parsed()) return moelsp::cli::logits(lg);
  if (c_px->parsed()) return moelsp::cli::perplexity(px);
  if (c_ex->parsed()) return moelsp::cli::experts(ex);
  if (c_ch->parsed()) return moelsp::cli::chat(ch);
  if (c_tk->parsed()) return moelsp::cli::tokenize(tk);
  if (c_dt->parsed()) return moelsp::cli::detokenize(dt);
  return 2;
}

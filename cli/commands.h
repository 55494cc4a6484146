// Subcommands of the moelsp executable. Each returns the process exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "assist/settings.h"
#include "engine/plan.h"
#include "lsp/server.h"

namespace CLI {
class App;
}

namespace moelsp::cli {

// One subcommand: its CLI11 node, and what runs once it was parsed (the exit code).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// Each cmd_*.cpp registers its subcommands and their options beside the
// code that runs them; main.cpp calls these in `moelsp --help`'s order.
void add_inspect(CLI::App& app, std::vector<Command>& out);   // inspect
void add_tokenize(CLI::App& app, std::vector<Command>& out);  // tokenize, detokenize
void add_generate(CLI::App& app, std::vector<Command>& out);  // generate, logits, perplexity, experts, chat
void add_bench(CLI::App& app, std::vector<Command>& out);     // bench
void add_quantize(CLI::App& app, std::vector<Command>& out);  // quantize
void add_profile(CLI::App& app, std::vector<Command>& out);   // profile
void add_lsp(CLI::App& app, std::vector<Command>& out);       // settings, lsp
void add_serve(CLI::App& app, std::vector<Command>& out);     // serve
void add_pull(CLI::App& app, std::vector<Command>& out);      // pull, models, rm
// `model` names a hub reference (hf://owner/repo:QUANT): the cached file, or
// pulled now with progress on stderr; `model` becomes its path. False (and
// a message naming `command`) when it cannot be had.
bool model_from_ref(std::string& model, const std::string& command);
// moelsp models --suggest (model_guide.cpp).
struct SuggestOptions {
  bool as_json = false, markdown = false, offline = false;
  std::vector<std::string> machines;  // described machines ("32G,8G"); none: this one
  double bandwidth_gbs = 60;          // theirs
};
int models_suggest(const SuggestOptions& o);

struct InspectOptions {
  std::string path;
  bool json = false;
  bool all_tensors = false;
};
int inspect(const InspectOptions& o);

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string file;
  bool ids_only = false;
  bool add_special = false;
  bool no_parse_special = false;
};
int tokenize(const TokenizeOptions& o);

struct DetokenizeOptions {
  std::string model;
  std::vector<std::string> ids;
  bool render_special = false;
};
int detokenize(const DetokenizeOptions& o);

}  // namespace moelsp::cli

namespace moelsp::cli {

struct ModelOptions {
  std::string model;
  int threads = 0;
  int ctx = 4096;
  std::string kv_type = "f16";  // KV cache rows: f16, bf16, f32, q8_0
  PlanOverrides plan;           // generate and chat run on the automatic plan, with these overrides
  bool quiet = false;           // no progress on stderr (loading the model, perplexity's windows)
};

struct GenerateOptions {
  ModelOptions m;
  std::string prompt;
  std::string file;
  std::vector<std::string> tokens;
  int n_predict = 128;
  float temp = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;
  bool greedy = false;
  bool ids = false;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  // The output's constraint, as llama-cli spells it: GBNF text or file, or a
  // JSON Schema (text or file).
  std::string grammar, grammar_file, json_schema, json_schema_file;
};
int generate(const GenerateOptions& o);

struct LogitsOptions {
  ModelOptions m;
  std::vector<std::string> tokens;
  std::string out;
  bool incremental = false;
};
int logits(const LogitsOptions& o);

struct PerplexityOptions {
  ModelOptions m;
  std::string file;
  int ctx = 512;
  int stride = 0;  // 0: ctx / 2
  int max_chunks = 0;
};
int perplexity(const PerplexityOptions& o);

// moelsp experts: runs a text (as perplexity does) and writes each MoE
// layer's expert usage as an SVG heatmap, CSV and JSON (expert_report.h).
struct ExpertsOptions {
  PerplexityOptions px;
  std::string svg = "experts.svg", csv, json;
};
int experts(const ExpertsOptions& o);

struct ChatOptions {
  ModelOptions m;
  std::string chat_template;
  std::string system;
  int n_predict = 512;
  float temp = 0.7f;
  int64_t seed = -1;
};
int chat(const ChatOptions& o);

}  // namespace moelsp::cli

namespace moelsp::cli {

// moelsp settings: the settings table as text, markdown or json.
int settings(const std::string& format);

struct LspOptions {
  lsp::Settings flags;
  std::string config;
};
int lsp(const LspOptions& o);

}  // namespace moelsp::cli

namespace moelsp::cli {

struct BenchOptions {
  std::string model;
  int threads = 0;
  int n_prompt = 512;
  int n_gen = 128;
  int n_depth = 0;              // tokens already in the context when pp and tg are measured (llama-bench's -d)
  std::string kv_type = "f16";  // the KV cache's type (llama-bench's -ctk/-ctv)
  int reps = 3;
  std::string peer;             // path to llama.cpp's llama-bench
  int background = 0;           // > 0: measure again (both engines) with this many busy processes running
  std::vector<int> streams;     // also: aggregate decode tokens/s with this many sequences per step
  bool quiet = false;           // no progress on stderr
  std::string backend = "cpu";  // cpu, cuda or emulated (the device pass on the host emulation)
  int gpu = 0;
  int gpu_experts = -1;  // routed experts per layer on the device; −1: all
};
int bench(const BenchOptions& o);
// The child side of bench's bandwidth probe: main() calls it when started with
// MOELSP_BANDWIDTH_PROBE=<threads> in the environment; prints GB/s.
int bandwidth_probe_child(const char* threads);

}  // namespace moelsp::cli

namespace moelsp::cli {

struct QuantizeOptions {
  std::string input, output, type;
  bool quiet = false;  // no progress on stderr
};
int quantize(const QuantizeOptions& o);

}  // namespace moelsp::cli

namespace moelsp::cli {

struct ProfileOptions {
  std::string model;
  int ctx = 0;
  int concurrency = 4;
  bool json = false;
  bool recalibrate = false;
  bool no_calibrate = false;
  std::string config;  // default: ~/.config/moelsp/config.toml or .json
  PlanOverrides over;  // from flags
};
int profile(const ProfileOptions& o);

struct ServeOptions {
  std::string model;          // settings.model, or the embedded default
  assist::Settings settings;  // from the flags (serve() reads the config files under them)
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  std::string cors;
  int max_body_mb = 8;
  int timeout_s = 30;
  int max_queue = 64;                     // requests waiting for the engine beyond this get 429
  std::vector<std::string> served_names;  // --served-model-name
  std::string config;                     // --config FILE, over ~/.config/moelsp/config.*
};
int serve(const ServeOptions& o);

}  // namespace moelsp::cli

// The settings table and what is generated from it: JSON/TOML parsing with
// range checks, merging, the README table. The command-line flags are added
// from the same table in cli/settings_flags.h (CLI11 lives there).
#include "assist/settings.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "assist/completion_gate.h"
#include "assist/exclude.h"
#include "util/json_limits.h"

namespace moelsp::assist {

using json = nlohmann::json;

namespace {

// ---- field access, generated per member ------------------------------------------

template <class T>
void assign(std::optional<T>& dst, const SettingValue& v) {
  if constexpr (std::is_same_v<T, std::string>) dst = std::get<std::string>(v);
  else if constexpr (std::is_same_v<T, bool>) dst = std::get<bool>(v);
  else dst = T(std::get<int64_t>(v));
}

template <auto M>
void set_top(Settings& s, const SettingValue& v) {
  assign(s.*M, v);
}
template <auto M>
void merge_top(Settings& d, const Settings& o) {
  if (o.*M) d.*M = o.*M;
}
template <auto M>
bool set_in_top(const Settings& s) {
  return (s.*M).has_value();
}

template <auto M>
void set_plan(Settings& s, const SettingValue& v) {
  assign(s.plan.*M, v);
}
template <auto M>
void merge_plan(Settings& d, const Settings& o) {
  if (o.plan.*M) d.plan.*M = o.plan.*M;
}
template <auto M>
bool set_in_plan(const Settings& s) {
  return (s.plan.*M).has_value();
}

// 0 threads means "automatic", as on the command line: nothing overridden.
void set_threads(Settings& s, const SettingValue& v) {
  const int64_t n = std::get<int64_t>(v);
  s.plan.threads = n == 0 ? std::nullopt : std::optional<int>(int(n));
}

#define TOP(m) .set = &set_top<&Settings::m>, .merge = &merge_top<&Settings::m>, .is_set = &set_in_top<&Settings::m>
#define PLAN(m)                                                                 \
  .set = &set_plan<&PlanOverrides::m>, .merge = &merge_plan<&PlanOverrides::m>, \
  .is_set = &set_in_plan<&PlanOverrides::m>

constexpr unsigned kEngineFlags =
    kLspFlag | kServeFlag | kPlanFlag | kProfileFlag;  // plan overrides: every engine command
constexpr int64_t kBig = int64_t(1) << 40;
using K = SettingKind;

// The order is the README's. Fields left out take SettingSpec's defaults
// (GCC 12 warns about designated initializers that skip members regardless).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// One setting per paragraph reads better than one field per line.
// clang-format off
const std::vector<SettingSpec> kSpecs = {
    {.key = "model", .kind = K::String, .flag = "-m,--model", .commands = kLspFlag | kServeFlag,
     .default_text = "the embedded default model", .help = "GGUF model file, or a hub reference (hf://owner/repo:QUANT): its file in the cache, else pulled there (the language server serves the embedded model meanwhile)", TOP(model)},
    {.key = "completion.model", .kind = K::String, .flag = "--completion-model", .commands = kLspFlag,
     .default_text = "`model`", .help = "a second, smaller model for completions only (a GGUF file, or a hub reference in the cache), loaded after `model` in what memory it leaves, while `model` answers chats; naming the same file as `model` keeps one copy for both", TOP(completion_model)},
    {.key = "threads", .kind = K::Int, .flag = "-t,--threads", .commands = kLspFlag | kServeFlag | kProfileFlag, .min = 0, .max = 1024,
     .default_text = "physical cores", .help = "engine threads (0: automatic)", .set = &set_threads,
     .merge = &merge_plan<&PlanOverrides::threads>, .is_set = &set_in_plan<&PlanOverrides::threads>},
    {.key = "contextSize", .kind = K::Int, .flag = "-c,--context-size", .commands = kLspFlag | kServeFlag, .min = 32,
     .max = 1 << 22, .default_text = "min(4096, the model's training context); serve: the whole training context while it fits in memory",
     .help = "tokens per sequence (never more than the training context); completion prompts are fitted to it",
     PLAN(n_ctx)},
    {.key = "kvCache.type", .kind = K::String, .flag = "--kv-type", .commands = kLspFlag | kServeFlag | kProfileFlag,
     .choices = {"f16", "bf16", "f32", "q8_0"}, .default_text = "`f16`; `bf16` from a context of 8,192 on AVX512-BF16 CPUs",
     .help = "KV cache rows (Q8_0 needs head sizes that are multiples of 32)", PLAN(kv_type)},
    {.key = "kvCache.tokens", .kind = K::Int, .flag = "--kv-tokens", .commands = kLspFlag | kServeFlag | kProfileFlag, .min = 16,
     .max = kBig, .default_text = "4 × contextSize",
     .help = "KV pool capacity in tokens, all requests and the prefix cache together", PLAN(kv_tokens)},
    {.key = "completion.maxTokens", .kind = K::Int, .flag = "--completion-max-tokens", .commands = kLspFlag, .min = 1,
     .max = 65536, .default_int = 64, .default_text = "64", .help = "tokens per suggestion", TOP(completion_max_tokens)},
    {.key = "completion.timeBudgetMs", .kind = K::Int, .flag = "--completion-time-budget-ms", .commands = kLspFlag,
     .min = 1, .max = 600000, .default_int = 1500, .default_text = "1500",
     .help = "generation time per suggestion (the prompt gets 10×; past that it still fills the cache in the background)", TOP(completion_time_budget_ms)},
    {.key = "completion.debounceMs", .kind = K::Int, .flag = "--completion-debounce-ms", .commands = kLspFlag, .min = 0,
     .max = 600000, .default_int = 0, .default_text = "0",
     .help = "wait before starting; a newer keystroke cancels the wait", TOP(completion_debounce_ms)},
    {.key = "completion.draftTokens", .kind = K::Int, .flag = "--completion-draft-tokens", .commands = kLspFlag,
     .min = 0, .max = 64, .default_int = 8, .default_text = "8",
     .help = "prompt lookup: draft tokens per decode step copied from the text (greedy suggestions only; the "
             "suggestion is the same, faster where the code repeats); 0: off",
     TOP(completion_draft_tokens)},
    {.key = "completion.fimOrder", .kind = K::String, .flag = "--completion-fim-order", .commands = kLspFlag,
     .choices = {"psm", "spm"}, .default_text = "from the model",
     .help = "the order of the fill-in-the-middle prompt: prefix-suffix-middle, or suffix-prefix-middle (which "
             "the embedded default model is trained for and says so in its file; other FIM models know PSM)",
     TOP(completion_fim_order)},
    {.key = "completion.contextTokens", .kind = K::Int, .flag = "--completion-context-tokens", .commands = kLspFlag,
     .min = 0, .max = 1 << 20, .default_int = 1024, .default_text = "1024",
     .help = "tokens of other files' code ahead of each completion prompt (definitions of the names near the cursor, "
             "then code like the text around it, from the workspace index and open documents); never more than "
             "half the prompt; 0: none",
     TOP(completion_context_tokens)},
    {.key = "completion.languages", .kind = K::String, .flag = "--completion-languages", .commands = kLspFlag,
     .default_text = kDefaultLanguages,
     .help = "where suggestions come as you type, by LSP languageId: comma-separated rules, `*` every language, `id` "
             "one, `!` before either turns it off (an id's own rule wins over `*`); an inline suggestion asked "
             "for explicitly is still answered (the classic list is not); setting it replaces the defaults",
     TOP(completion_languages)},
    {.key = "completion.trigger", .kind = K::String, .flag = "--completion-trigger", .commands = kLspFlag,
     .choices = {"automatic", "manual"}, .default_text = "`automatic`",
     .help = "`manual`: inline suggestions only when asked for (the client's suggest key: triggerKind Invoked), "
             "none as you type; the classic completion list is the client's to schedule",
     TOP(completion_trigger)},
    {.key = "workspace.index", .kind = K::Bool, .flag = "--workspace-index", .commands = kLspFlag,
     .default_text = "on",
     .help = "read the workspace folders' source files for completion context, in the background (skipping what "
             ".gitignore hides, `exclude`, hidden and vendor folders, binary, generated and files over 1 MiB); off: "
             "open documents only",
     TOP(workspace_index)},
    {.key = "workspace.maxFiles", .kind = K::Int, .flag = "--workspace-max-files", .commands = kLspFlag, .min = 0,
     .max = 1 << 24, .default_int = 20000, .default_text = "20000",
     .help = "files the workspace index reads at most (a larger tree is indexed in walk order up to it)",
     TOP(workspace_max_files)},
    {.key = "exclude", .kind = K::String, .flag = "--exclude", .commands = kLspFlag, .default_text = kDefaultExclude,
     .help = "comma-separated globs of files whose text never reaches a model: never read by the workspace index, no "
             "completion inside them, left out of "
             "other files' context, refused as chat context (a glob without `/` matches the file name, one with `/` "
             "the whole path); setting it replaces the defaults",
     TOP(exclude)},
    {.key = "chat.maxTokens", .kind = K::Int, .flag = "--chat-max-tokens", .commands = kLspFlag, .min = 1,
     .max = 1 << 20, .default_int = 1024, .default_text = "1024", .help = "tokens per chat answer",
     TOP(chat_max_tokens)},
    {.key = "chat.template", .kind = K::String, .flag = "--chat-template", .commands = kLspFlag | kServeFlag,
     .default_text = "from the model",
     .help = "instead of the model's own template (tokenizer.chat_template): a built-in one (chatml, deepseek2, "
             "deepseek3, mistral, llama2, chatglm4; they show no tools) or a Jinja file, FILE.jinja (tool calls "
             "parsed in the syntax it teaches)",
     TOP(chat_template)},
    {.key = "weights", .kind = K::String, .flag = "--weights", .commands = kEngineFlags, .choices = {"ram", "stream"},
     .default_text = "plan: `ram` when weights + KV fit the memory budget, else `stream`",
     .help = "`ram`: the file's pages are requested at load and stay; `stream`: dense parts resident, experts read "
             "from the file as routed",
     PLAN(weights)},
    {.key = "kvCache.blockSize", .kind = K::Int, .flag = "--block-size", .commands = kEngineFlags, .min = 1,
     .max = 4096, .default_text = "16", .help = "tokens per KV block", PLAN(block_size)},
    {.key = "kvCache.paged", .kind = K::Bool, .flag = "--kv-paged", .commands = kEngineFlags, .default_text = "on",
     .help = "off: one block per sequence (a contiguous cache)", PLAN(paged)},
    {.key = "experts.prefetch", .kind = K::Bool, .flag = "--prefetch", .commands = kEngineFlags,
     .default_text = "plan: on when streaming",
     .help = "predict each token's experts layers ahead and request their pages on a helper thread", PLAN(prefetch)},
    {.key = "experts.prefetchDistance", .kind = K::Int, .flag = "--prefetch-distance", .commands = kEngineFlags,
     .min = 1, .max = 16, .default_text = "plan: from disk rate vs per-layer compute, 1–2", .help = "layers ahead",
     PLAN(prefetch_distance)},
    {.key = "experts.cacheMb", .kind = K::Int, .flag = "--expert-cache-mb", .commands = kEngineFlags, .min = 0,
     .max = kBig, .default_text = "plan: when streaming, half of the memory left after dense weights and KV",
     .help = "RAM holding the most-routed experts (their file pages locked; copies where the lock limit refuses)",
     PLAN(expert_cache_mb)},
    {.key = "batch.max", .kind = K::Int, .flag = "--max-batch", .commands = kEngineFlags, .min = 1, .max = 4096,
     .default_text = "plan: 8 on a CPU, 32 on a GPU", .help = "sequences per scheduler step", PLAN(max_batch)},
    {.key = "gpu.device", .kind = K::Int, .flag = "--gpu", .commands = kEngineFlags, .min = -1, .max = 255,
     .default_text = "the largest GPU", .help = "−1: CPU only", PLAN(gpu)},
    {.key = "gpu.expertsPerLayer", .kind = K::Int, .flag = "--gpu-experts", .commands = kEngineFlags, .min = 0,
     .max = 1 << 20, .default_text = "plan: as many as fit in VRAM",
     .help = "routed experts per layer kept on the GPU; the rest compute on the CPU",
     PLAN(gpu_experts_per_layer)},
    {.key = "promptCache.dir", .kind = K::String, .flag = "--prompt-cache", .commands = kLspFlag | kServeFlag,
     .default_text = "none: off",
     .help = "a directory for the KV cache of long prompts (an agent's system prompt and tools): a later session or "
             "process computes only what follows the stored prefix; shared by servers of the same model",
     TOP(prompt_cache_dir)},
    {.key = "promptCache.maxMiB", .kind = K::Int, .flag = "--prompt-cache-max-mib", .commands = kLspFlag | kServeFlag,
     .min = 16, .max = kBig, .default_int = 8192, .default_text = "8192",
     .help = "the directory's size bound, least recently used files deleted first", TOP(prompt_cache_max_mib)},
    {.key = "promptCache.minTokens", .kind = K::Int, .flag = "--prompt-cache-min-tokens",
     .commands = kLspFlag | kServeFlag, .min = 1, .max = 1 << 22, .default_int = 1024, .default_text = "1024",
     .help = "prompts shorter than this are not stored (chat and agent prompts only; completions never are)",
     TOP(prompt_cache_min_tokens)},
    {.key = "backend.url", .kind = K::String, .flag = "--backend-url", .commands = kLspFlag,
     .default_text = "none: the embedded engine",
     .help = "a remote server generates instead: `http://` or `https://host:port` (see *A remote backend*)",
     TOP(backend_url)},
    {.key = "backend.api", .kind = K::String, .flag = "--backend-api", .commands = kLspFlag,
     .choices = {"openai", "llama.cpp"}, .default_text = "`openai`",
     .help = "`openai`: /v1/completions and /v1/chat/completions (vLLM, SGLang, Ollama, LM Studio, llama-server, "
             "moelsp serve); `llama.cpp`: /infill",
     TOP(backend_api)},
    {.key = "backend.apiKey", .kind = K::String, .flag = "--backend-api-key", .commands = kLspFlag,
     .default_text = "none", .help = "sent as `Authorization: Bearer`", TOP(backend_api_key)},
    {.key = "backend.model", .kind = K::String, .flag = "--backend-model", .commands = kLspFlag,
     .default_text = "none", .help = "the `model` field of OpenAI requests", TOP(backend_model)},
    {.key = "backend.fimTemplate", .kind = K::String, .flag = "--backend-fim-template", .commands = kLspFlag,
     .default_text = "`qwen`",
     .help = "how completions send fill-in-the-middle with `openai`: `suffix` (the server's FIM), a preset (`qwen`, "
             "`deepseek`, `codellama`, `starcoder`, `codestral`) or a template with `{prefix}` and `{suffix}`",
     TOP(backend_fim_template)},
    {.key = "backend.caFile", .kind = K::String, .flag = "--backend-ca-file", .commands = kLspFlag,
     .default_text = "the system's CAs", .help = "PEM file of certificate authorities to trust for `https://`",
     TOP(backend_ca_file)},
    {.key = "backend.verifyTls", .kind = K::Bool, .flag = "--backend-verify-tls", .commands = kLspFlag,
     .default_text = "on", .help = "off: accept any certificate (a test server; never across a network you do not trust)",
     TOP(backend_verify_tls)},
};
// clang-format on
#pragma GCC diagnostic pop

#undef TOP
#undef PLAN

std::string kind_name(const SettingSpec& s) {
  switch (s.kind) {
    case SettingKind::Int: return "an integer";
    case SettingKind::Bool: return "true or false";
    case SettingKind::String: return "a string";
  }
  return "";
}

std::string choices_text(const SettingSpec& s) {
  std::string out;
  for (size_t i = 0; i < s.choices.size(); ++i) out += (i ? ", " : "") + std::string(s.choices[i]);
  return out;
}

std::string trim(std::string s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

// Strips a # comment that is not inside a string.
std::string strip_comment(const std::string& line) {
  bool in_str = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '"' && (i == 0 || line[i - 1] != '\\')) in_str = !in_str;
    if (line[i] == '#' && !in_str) return line.substr(0, i);
  }
  return line;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

const std::vector<SettingSpec>& setting_specs() { return kSpecs; }

const SettingSpec* find_setting(std::string_view key) {
  for (const auto& s : kSpecs)
    if (s.key == key) return &s;
  return nullptr;
}

void Settings::merge_from(const Settings& o) {
  for (const auto& s : kSpecs) s.merge(*this, o);
}

PromptCacheOptions prompt_cache_options(const Settings& s) {
  PromptCacheOptions o;
  o.dir = s.prompt_cache_dir.value_or("");
  if (o.dir.starts_with("~/"))
    if (const char* home = std::getenv("HOME"); home && *home) o.dir = std::string(home) + o.dir.substr(1);
  if (s.prompt_cache_max_mib) o.max_bytes = uint64_t(*s.prompt_cache_max_mib) << 20;
  if (s.prompt_cache_min_tokens) o.min_tokens = *s.prompt_cache_min_tokens;
  return o;
}

Settings default_settings() {
  Settings s;
  for (const auto& spec : kSpecs)
    if (spec.default_int) spec.set(s, *spec.default_int);
  return s;
}

void set_setting(Settings& s, const SettingSpec& spec, const SettingValue& v) {
  const std::string name(spec.key);
  switch (spec.kind) {
    case SettingKind::Int: {
      if (!std::holds_alternative<int64_t>(v)) throw std::runtime_error("setting " + name + " must be an integer");
      const int64_t n = std::get<int64_t>(v);
      if (n < spec.min || n > spec.max)
        throw std::runtime_error(fmt::format("setting {} must be in {}..{}, not {}", name, spec.min, spec.max, n));
      break;
    }
    case SettingKind::Bool:
      if (!std::holds_alternative<bool>(v)) throw std::runtime_error("setting " + name + " must be true or false");
      break;
    case SettingKind::String: {
      if (!std::holds_alternative<std::string>(v)) throw std::runtime_error("setting " + name + " must be a string");
      const std::string& str = std::get<std::string>(v);
      if (!spec.choices.empty() && std::find(spec.choices.begin(), spec.choices.end(), str) == spec.choices.end())
        throw std::runtime_error("setting " + name + " must be one of " + choices_text(spec) + ", not \"" + str + "\"");
      break;
    }
  }
  spec.set(s, v);
}

SettingValue parse_setting_text(const SettingSpec& spec, const std::string& text) {
  switch (spec.kind) {
    case SettingKind::Int: {
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || !end || *end != '\0' || errno == ERANGE)
        throw std::runtime_error(fmt::format("{} must be an integer, not \"{}\"", spec.key, text));
      return int64_t(n);
    }
    case SettingKind::Bool:
      if (text == "on" || text == "true" || text == "1" || text == "yes") return true;
      if (text == "off" || text == "false" || text == "0" || text == "no") return false;
      throw std::runtime_error(fmt::format("{} must be on or off, not \"{}\"", spec.key, text));
    case SettingKind::String: return text;
  }
  return text;
}

Settings settings_from_json_text(const std::string& text, std::vector<std::string>* errors) {
  check_json_limits(text, "settings");
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error("settings must be a JSON object");
  Settings s;
  for (const auto& spec : kSpecs) {
    // "completion": {"maxTokens": 8} and "completion.maxTokens": 8 are the same setting.
    const std::string key(spec.key);
    const json* v = nullptr;
    if (const size_t dot = key.find('.'); dot != std::string::npos) {
      if (auto g = j.find(key.substr(0, dot)); g != j.end() && g->is_object())
        if (auto f = g->find(key.substr(dot + 1)); f != g->end()) v = &*f;
    }
    if (!v)
      if (auto f = j.find(key); f != j.end()) v = &*f;
    if (!v) continue;
    try {
      SettingValue value;
      if (v->is_number_integer()) value = v->get<int64_t>();
      else if (v->is_boolean()) value = v->get<bool>();
      else if (v->is_string()) value = v->get<std::string>();
      else throw std::runtime_error("setting " + key + " must be " + kind_name(spec));
      set_setting(s, spec, value);  // a value of the wrong type is refused there, naming the type wanted
    } catch (const std::exception& e) {
      if (!errors) throw;
      errors->push_back(e.what());
    }
  }
  return s;
}

std::string toml_to_json(const std::string& toml) {
  json root = json::object();
  json* section = &root;
  std::istringstream in(toml);
  int n = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++n;
    const std::string line = trim(strip_comment(raw));
    if (line.empty()) continue;
    if (line.front() == '[') {
      if (line.back() != ']' || line.size() < 3)
        throw std::runtime_error(fmt::format("config line {}: bad section header", n));
      section = &root;
      std::istringstream parts(trim(line.substr(1, line.size() - 2)));
      for (std::string part; std::getline(parts, part, '.');) {
        part = trim(part);
        if (part.empty()) throw std::runtime_error(fmt::format("config line {}: empty section name", n));
        json& next = (*section)[part];
        if (next.is_null()) next = json::object();
        if (!next.is_object()) throw std::runtime_error(fmt::format("config line {}: '{}' is not a section", n, part));
        section = &next;
      }
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw std::runtime_error(fmt::format("config line {}: expected key = value", n));
    std::string key = trim(line.substr(0, eq));
    const std::string val = trim(line.substr(eq + 1));
    if (key.size() >= 2 && key.front() == '"' && key.back() == '"') key = key.substr(1, key.size() - 2);
    if (key.empty() || val.empty()) throw std::runtime_error(fmt::format("config line {}: expected key = value", n));
    json v;
    if (val.front() == '"') {
      if (val.size() < 2 || val.back() != '"')
        throw std::runtime_error(fmt::format("config line {}: unterminated string", n));
      v = json::parse(val, nullptr, false);  // TOML basic strings escape like JSON's
      if (v.is_discarded()) throw std::runtime_error(fmt::format("config line {}: bad string", n));
    } else if (val == "true" || val == "false") {
      v = val == "true";
    } else {
      std::string digits = val;
      std::erase(digits, '_');
      char* end = nullptr;
      const long long i = std::strtoll(digits.c_str(), &end, 10);
      if (end && *end == '\0' && !digits.empty()) {
        v = i;
      } else {
        const double d = std::strtod(digits.c_str(), &end);
        if (!end || *end != '\0')
          throw std::runtime_error(fmt::format("config line {}: unsupported value '{}'", n, val));
        v = d;
      }
    }
    (*section)[key] = v;
  }
  return root.dump();
}

Settings settings_from_config(const std::string& text, bool toml) {
  return settings_from_json_text(toml ? toml_to_json(text) : text);
}

std::string user_config_path() {
  std::string dir;
  if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) dir = std::string(x) + "/moelsp";
  else if (const char* h = std::getenv("HOME"); h && *h) dir = std::string(h) + "/.config/moelsp";
  if (dir.empty()) return "";
  for (const char* f : {"/config.toml", "/config.json"})
    if (std::filesystem::exists(dir + f)) return dir + f;
  return "";
}

Settings read_config_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return settings_from_config(text, path.ends_with(".toml"));
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

Settings read_config_files(const std::string& extra) {
  Settings s;
  for (const std::string& path : {user_config_path(), extra})
    if (!path.empty()) s.merge_from(read_config_file(path));
  return s;
}

// ---- documentation -----------------------------------------------------------------

namespace {

// "-c,--context-size" → "`-c, --context-size`"; a bool flag shows its values.
std::string flag_text(const SettingSpec& s) {
  if (s.flag.empty()) return "(config/initializationOptions)";
  std::string f;
  for (char c : s.flag) f += c == ',' ? std::string(", ") : std::string(1, c);
  if (s.kind == SettingKind::Bool) f += " on\\|off";
  return "`" + f + "`";
}

}  // namespace

std::string setting_range_text(const SettingSpec& s) {
  if (s.kind != SettingKind::Int) return "";
  if (s.max >= kBig) return fmt::format("[≥ {}]", s.min);
  return fmt::format("[{}..{}]", s.min, s.max);
}

std::string settings_markdown() {
  std::string out = "| setting | flag | default | meaning |\n|---|---|---|---|\n";
  for (const auto& s : kSpecs) {
    std::string meaning(s.help);
    for (size_t i = 0; i < s.choices.size(); ++i) {
      meaning += i ? ", `" : ": `";
      meaning += s.choices[i];
      meaning += '`';
    }
    out += fmt::format("| `{}` | {} | {} | {}{}{} |\n", s.key, flag_text(s), s.default_text, meaning,
                       s.kind == SettingKind::Int ? " " : "", setting_range_text(s));
  }
  return out;
}

std::string settings_json() {
  json a = json::array();
  for (const auto& s : kSpecs) {
    json e = {{"key", s.key},
              {"type", s.kind == SettingKind::Int    ? "integer"
                       : s.kind == SettingKind::Bool ? "boolean"
                                                     : "string"},
              {"flag", s.flag},
              {"default", s.default_text},
              {"description", s.help}};
    if (s.kind == SettingKind::Int) e["range"] = {s.min, s.max};
    if (!s.choices.empty()) e["choices"] = s.choices;
    a.push_back(e);
  }
  return a.dump(2);
}

}  // namespace moelsp::assist

// Every user setting, in one table: its name (the LSP initializationOptions
// key, the config file key and the README's), its command-line flag, type,
// range, default and meaning. The LSP options, the config files, the flags of
// `moelsp lsp|serve|generate|chat|profile`, `moelsp settings` and the README's
// settings table all come from it, so a setting is spelled in one place
// (tests check the README and the VS Code extension against it).
//
// Layers merge in this order, each over the one before: the table's
// defaults, ~/.config/moelsp/config.{toml,json}, --config FILE, the flags,
// the editor's initializationOptions / didChangeConfiguration.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/kv.h"
#include "engine/plan.h"

namespace moelsp::assist {

// Every setting is optional so that the layers can be merged.
struct Settings {
  std::optional<std::string> model;
  std::optional<std::string> completion_model;  // a second model for completions only; unset: `model`
  std::optional<int> completion_max_tokens;
  std::optional<int> completion_time_budget_ms;
  std::optional<int> completion_debounce_ms;
  std::optional<int> completion_draft_tokens;
  std::optional<std::string> completion_fim_order;  // "psm" / "spm"; unset: the model's own
  std::optional<int> completion_context_tokens;     // other files' code per prompt (workspace index)
  std::optional<std::string>
      completion_languages;                       // per-language rules (assist/completion_gate.h); unset: the defaults
  std::optional<std::string> completion_trigger;  // "automatic" / "manual"
  std::optional<bool> workspace_index;            // read the workspace folders for it
  std::optional<int> workspace_max_files;
  std::optional<std::string> exclude;  // globs of files never sent to a model (assist/exclude.h); unset: the defaults
  std::optional<int> chat_max_tokens;
  std::optional<std::string> chat_template;  // when the model's is missing or unknown
  // The prompt cache on disk (engine/prompt_cache.h): off unless a directory is given.
  std::optional<std::string> prompt_cache_dir;
  std::optional<int64_t> prompt_cache_max_mib;
  std::optional<int> prompt_cache_min_tokens;
  // A remote server instead of the embedded engine (backend.url set).
  std::optional<std::string> backend_url, backend_api_key, backend_model, backend_api, backend_fim_template,
      backend_ca_file;
  std::optional<bool> backend_verify_tls;
  // What shapes the engine: threads, contextSize, kvCache.*, weights,
  // experts.*, batch.max, gpu.* — overrides of the automatic plan.
  PlanOverrides plan;

  // Fields set in `over` replace ours (every field of the table).
  void merge_from(const Settings& over);
  bool operator==(const Settings&) const = default;
};

using SettingValue = std::variant<int64_t, bool, std::string>;
enum class SettingKind { Int, Bool, String };

// Which subcommands take a setting as a flag.
enum SettingCommands : unsigned {
  kLspFlag = 1,      // moelsp lsp
  kServeFlag = 2,    // moelsp serve
  kPlanFlag = 4,     // generate, chat, profile: what shapes the plan
  kProfileFlag = 8,  // profile: also threads and the KV cache (generate and chat have their own -t, --kv-type)
};

struct SettingSpec {
  std::string_view key;  // "completion.maxTokens"; nested or dotted in JSON, [section] key in TOML
  SettingKind kind;
  std::string_view flag;                  // CLI11 option names ("-c,--context-size"); empty: none
  unsigned commands = 0;                  // SettingCommands
  int64_t min = 0, max = 0;               // Int: the accepted range
  std::vector<std::string_view> choices;  // String: the accepted values (empty: any)
  std::optional<int64_t> default_int;     // Int defaults the assistant applies (others: the plan decides)
  std::string_view default_text;          // for people: help, README
  std::string_view help;
  void (*set)(Settings&, const SettingValue&);
  void (*merge)(Settings&, const Settings&);
  bool (*is_set)(const Settings&);
};

const std::vector<SettingSpec>& setting_specs();
const SettingSpec* find_setting(std::string_view key);

// The table's defaults (completion.*, chat.maxTokens); the plan decides the rest.
Settings default_settings();
// promptCache.* as the engine takes them (dir empty: off).
PromptCacheOptions prompt_cache_options(const Settings& s);

// Checks a value against a spec (type, range, choices) and stores it; throws
// std::runtime_error naming the setting, the value and what is accepted.
void set_setting(Settings& s, const SettingSpec& spec, const SettingValue& v);
// A value as typed on a command line: integers, on/off/true/false, strings.
SettingValue parse_setting_text(const SettingSpec& spec, const std::string& text);

// The settings in a JSON object (nested {"completion": {"maxTokens": 8}} or
// dotted {"completion.maxTokens": 8}). Unknown keys are ignored (editors send
// their own, e.g. VS Code's trace.server); a known key with a wrong type or
// out of range throws, naming it. With `errors`, a bad value is skipped and
// its message appended instead, so the other settings still apply.
Settings settings_from_json_text(const std::string& json_text, std::vector<std::string>* errors = nullptr);
// A config file's text: JSON, or the TOML subset (see toml_to_json).
Settings settings_from_config(const std::string& text, bool toml);
// TOML subset → JSON text: [section] headers, key = string/integer/boolean,
// # comments. Anything else is an error naming the line.
std::string toml_to_json(const std::string& toml);
// ~/.config/moelsp/config.toml, else config.json (XDG_CONFIG_HOME honoured); empty when neither exists.
std::string user_config_path();
// Reads `path` (TOML when it ends in .toml, else JSON); throws naming the file.
Settings read_config_file(const std::string& path);
// The user's config file, then `extra` (a --config FILE) over it.
Settings read_config_files(const std::string& extra = "");

// "[1..65536]", or "[≥ 16]" where the range has no practical top; "" for non-integers.
std::string setting_range_text(const SettingSpec& spec);
// The README's settings table (Markdown), generated from the specs.
std::string settings_markdown();
// Every spec as JSON (moelsp settings --json).
std::string settings_json();

}  // namespace moelsp::assist

// The settings table (assist/settings.h): parsing from JSON and TOML, range
// and type checks naming the setting, merging every field, and the README and
// the VS Code extension agreeing with it.
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "assist/completion_gate.h"
#include "assist/exclude.h"
#include "assist/settings.h"
#include "util/json_limits.h"

using namespace moelsp;
using namespace moelsp::assist;

namespace {

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A valid value for a spec, different from its default.
SettingValue sample(const SettingSpec& s) {
  switch (s.kind) {
    case SettingKind::Int: return std::max<int64_t>(s.min, 1) == s.max ? s.max : std::max<int64_t>(s.min, 1) + 1;
    case SettingKind::Bool: return false;
    case SettingKind::String: return s.choices.empty() ? std::string("x") : std::string(s.choices.back());
  }
  return int64_t(0);
}

nlohmann::json to_json(const SettingValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b;
  return std::get<std::string>(v);
}

}  // namespace

TEST_CASE("settings: precedence and names") {
  Settings defaults = settings_from_json_text(R"({"threads": 1, "completion": {"maxTokens": 10}})");
  Settings flags = settings_from_json_text(R"({"threads": 2, "completion.timeBudgetMs": 300})");
  Settings init = settings_from_json_text(R"({"model": "/m.gguf", "completion": {"maxTokens": 20}})");
  defaults.merge_from(flags);
  defaults.merge_from(init);
  CHECK(*defaults.plan.threads == 2);
  CHECK(*defaults.completion_max_tokens == 20);
  CHECK(*defaults.completion_time_budget_ms == 300);
  CHECK(*defaults.model == "/m.gguf");
  CHECK(*default_settings().completion_max_tokens == 64);
  CHECK(*default_settings().chat_max_tokens == 1024);
  CHECK(settings_from_json_text(R"({"threads": 0})").plan.threads == std::nullopt);  // 0: automatic
}

TEST_CASE("settings: every table entry parses, merges and is distinct") {
  for (const auto& spec : setting_specs()) {
    INFO(spec.key);
    nlohmann::json j;
    const std::string key(spec.key);
    j[key] = to_json(sample(spec));  // dotted
    const Settings one = settings_from_json_text(j.dump());
    CHECK(spec.is_set(one));
    CHECK_FALSE(one == Settings{});
    // nested, where the name has a group
    if (const size_t dot = key.find('.'); dot != std::string::npos) {
      nlohmann::json n;
      n[key.substr(0, dot)][key.substr(dot + 1)] = to_json(sample(spec));
      CHECK(settings_from_json_text(n.dump()) == one);
    }
    // merge_from carries it
    Settings merged;
    merged.merge_from(one);
    CHECK(merged == one);
    // one field per setting: no other spec sees it set
    for (const auto& other : setting_specs())
      if (other.key != spec.key) CHECK_FALSE(other.is_set(one));
  }
}

TEST_CASE("settings: wrong types and out-of-range values are errors naming the setting") {
  CHECK_THROWS_WITH(settings_from_json_text(R"({"threads": "many"})"),
                    Catch::Contains("threads") && Catch::Contains("integer"));
  CHECK_THROWS_WITH(settings_from_json_text(R"({"threads": 5000})"),
                    Catch::Contains("threads") && Catch::Contains("5000"));
  CHECK_THROWS_WITH(settings_from_json_text(R"({"completion": {"maxTokens": 0}})"),
                    Catch::Contains("completion.maxTokens"));
  CHECK_THROWS_WITH(settings_from_json_text(R"({"weights": "disk"})"), Catch::Contains("ram, stream"));
  CHECK_THROWS_WITH(settings_from_json_text(R"({"kvCache": {"type": "q3"}})"), Catch::Contains("q3"));
  CHECK_THROWS_WITH(settings_from_json_text(R"({"experts.prefetch": "yes"})"), Catch::Contains("true or false"));
  CHECK_THROWS_WITH(settings_from_json_text(R"({"backend": {"api": "grpc"}})"), Catch::Contains("backend.api"));
  CHECK_THROWS_WITH(settings_from_json_text("[1]"), Catch::Contains("JSON object"));
  // Collected instead of thrown: the good settings still apply.
  std::vector<std::string> errors;
  const Settings s =
      settings_from_json_text(R"({"threads": -3, "chat.maxTokens": 99, "trace.server": "verbose"})", &errors);
  REQUIRE(errors.size() == 1);
  CHECK_THAT(errors[0], Catch::Contains("threads"));
  CHECK(s.chat_max_tokens == 99);
  CHECK_FALSE(s.plan.threads.has_value());
}

TEST_CASE("settings: the command line's text forms") {
  const SettingSpec& prefetch = *find_setting("experts.prefetch");
  CHECK(std::get<bool>(parse_setting_text(prefetch, "on")));
  CHECK_FALSE(std::get<bool>(parse_setting_text(prefetch, "off")));
  CHECK_THROWS_WITH(parse_setting_text(prefetch, "maybe"), Catch::Contains("on or off"));
  const SettingSpec& threads = *find_setting("threads");
  CHECK(std::get<int64_t>(parse_setting_text(threads, "8")) == 8);
  CHECK_THROWS(parse_setting_text(threads, "8x"));
  Settings s;
  CHECK_THROWS_WITH(set_setting(s, threads, parse_setting_text(threads, "1000000")), Catch::Contains("0..1024"));
}

TEST_CASE("config: TOML subset and JSON give the same settings, errors name the line") {
  const std::string toml = R"(# moelsp config
threads = 6
weights = "stream"   # a comment
[kvCache]
type = "q8_0"
tokens = 32_768
[experts]
prefetch = true
prefetchDistance = 2
cacheMb = 4096
[completion]
maxTokens = 32
)";
  const Settings a = settings_from_config(toml, true);
  const Settings b = settings_from_config(
      R"({"threads": 6, "weights": "stream", "kvCache": {"type": "q8_0", "tokens": 32768},
          "experts.prefetch": true, "experts": {"prefetchDistance": 2, "cacheMb": 4096}, "completion.maxTokens": 32})",
      false);
  CHECK(a == b);
  CHECK(a.plan.threads == 6);
  CHECK(a.plan.weights == "stream");
  CHECK(a.plan.kv_type == "q8_0");
  CHECK(a.plan.kv_tokens == 32768);
  CHECK(a.plan.prefetch == true);
  CHECK(a.plan.prefetch_distance == 2);
  CHECK(a.plan.expert_cache_mb == 4096);
  CHECK(a.completion_max_tokens == 32);
  CHECK_FALSE(a.plan.gpu.has_value());
  CHECK_THROWS_WITH(settings_from_config("threads = 2\nthis is not toml\n", true), Catch::Contains("line 2"));
  CHECK_THROWS_WITH(settings_from_config("weights = \"disk\"", true), Catch::Contains("weights"));
  CHECK_THROWS_WITH(settings_from_config("[kvCache]\ntype = \"q3\"", true), Catch::Contains("q3"));
  CHECK_THROWS_WITH(settings_from_config("{\"threads\": \"two\"}", false), Catch::Contains("threads"));
}

TEST_CASE("completion.languages: an id's own rule wins over *, a later rule over an earlier, explicit asks pass") {
  const LanguageRules d(kDefaultLanguages);
  CHECK(d.enabled("python"));
  CHECK(d.enabled(""));  // a client that names no language
  CHECK_FALSE(d.enabled("markdown"));
  CHECK_FALSE(d.enabled("plaintext"));
  CHECK_FALSE(d.enabled("gitcommit"));
  const LanguageRules off(" !* , python ,, rust");
  CHECK(off.enabled("python"));
  CHECK(off.enabled("rust"));
  CHECK_FALSE(off.enabled("go"));
  CHECK_FALSE(off.enabled(""));
  CHECK_FALSE(LanguageRules("python,!python").enabled("python"));
  CHECK(LanguageRules("").enabled("markdown"));  // no rules: everywhere
  // The gate: languages and a snooze for both kinds, manual mode for inline
  // requests as the user types; a request the user made always passes.
  CHECK_THAT(gate(d, {.language_id = "markdown"}),
             Catch::Contains("markdown") && Catch::Contains("completion.languages"));
  CHECK(gate(d, {.language_id = "markdown", .invoked = true}).empty());
  CHECK(gate(d, {.language_id = "python"}).empty());
  CHECK_THAT(gate(d, {.language_id = "python", .inline_kind = false, .snooze_left_ms = 61001}),
             Catch::Contains("62 s") && Catch::Contains("moelsp.snooze"));
  CHECK_THAT(gate(d, {.language_id = "python", .manual_only = true}), Catch::Contains("completion.trigger"));
  CHECK(gate(d, {.language_id = "python", .inline_kind = false, .manual_only = true}).empty());
  CHECK(gate(d, {.language_id = "python", .invoked = true, .manual_only = true, .snooze_left_ms = 5}).empty());
}

TEST_CASE("settings: the README's table is the one the table generates") {
  const std::string readme = read(MOELSP_SOURCE_DIR "/README.md");
  const std::string begin = "<!-- settings table: generated by `moelsp settings --markdown` -->\n";
  const std::string end = "<!-- end of settings table -->";
  const size_t a = readme.find(begin), b = readme.find(end);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  CHECK(readme.substr(a + begin.size(), b - a - begin.size()) == settings_markdown());
}

TEST_CASE("settings: the VS Code extension contributes every setting with the table's type") {
  const auto pkg = nlohmann::json::parse(read(MOELSP_SOURCE_DIR "/editor-clients/vscode/package.json"));
  const auto& props = pkg["contributes"]["configuration"]["properties"];
  for (const auto& spec : setting_specs()) {
    // completion.languages is moelsp.enable's object form there (Copilot's
    // shape: {"*": true, "markdown": false}); its default says the same.
    if (spec.key == "completion.languages") {
      const auto& enable = props["moelsp.enable"];
      CHECK(std::find(enable["type"].begin(), enable["type"].end(), "object") != enable["type"].end());
      for (const auto& [lang, on] : enable["default"].items())
        CHECK(LanguageRules(kDefaultLanguages).enabled(lang == "*" ? "some-language" : lang) == on.get<bool>());
      continue;
    }
    const std::string key = "moelsp." + std::string(spec.key);
    INFO(key);
    REQUIRE(props.contains(key));
    const auto& type = props[key]["type"];
    const std::string want = spec.kind == SettingKind::Int    ? "integer"
                             : spec.kind == SettingKind::Bool ? "boolean"
                                                              : "string";
    // Unset is null in VS Code (the server's default applies): ["integer", "null"].
    const bool ok = type == want || (type.is_array() && std::find(type.begin(), type.end(), want) != type.end());
    CHECK(ok);
    if (spec.kind == SettingKind::Int && props[key].contains("minimum")) CHECK(props[key]["minimum"] >= spec.min);
    if (spec.kind == SettingKind::Int && props[key].contains("maximum")) CHECK(props[key]["maximum"] <= spec.max);
    if (props[key].contains("enum"))
      for (const auto& e : props[key]["enum"])
        if (!e.is_null())
          CHECK(std::find(spec.choices.begin(), spec.choices.end(), e.get<std::string>()) != spec.choices.end());
  }
  // ...and sends every one of them to the server.
  const std::string ts = read(MOELSP_SOURCE_DIR "/editor-clients/vscode/src/settings.ts");
  const std::string list = ts.substr(ts.find("SERVER_KEYS"), ts.find("] as const") - ts.find("SERVER_KEYS"));
  for (const auto& spec : setting_specs()) {
    std::string quoted = "'";
    quoted += spec.key;
    quoted += "'";
    CHECK_THAT(list, Catch::Contains(quoted));
  }
}

TEST_CASE("JSON nested beyond the limit is refused before parsing, brackets in strings do not count") {
  using moelsp::json_limit_problem;
  const std::string at_limit = std::string(128, '[') + std::string(128, ']');
  CHECK(json_limit_problem(at_limit).empty());
  const std::string over = std::string(129, '[') + std::string(129, ']');
  CHECK(json_limit_problem(over).find("deeper than 128 levels (at byte 128)") != std::string::npos);
  CHECK(json_limit_problem("{\"a\": \"" + std::string(1000, '[') + "\"}").empty());
  CHECK(json_limit_problem("{\"a\": \"\\\"" + std::string(1000, '{') + "\"}").empty());  // an escaped quote
  CHECK(json_limit_problem(std::string(1000000, '[')).find("128") != std::string::npos);
  CHECK(json_limit_problem("[1, 2]", {.max_depth = 128, .max_bytes = 4}).find("more than the limit of 4") !=
        std::string::npos);
  // Settings (LSP initializationOptions, config files) go through it too.
  CHECK_THROWS_WITH(moelsp::assist::settings_from_json_text("{\"a\":" + over + "}"),
                    Catch::Contains("deeper than 128 levels"));
}

TEST_CASE("exclude: the default globs hide secrets' files by name or by path and nothing else") {
  using moelsp::assist::ExcludeList;
  const ExcludeList d{moelsp::assist::kDefaultExclude};
  for (const char* secret : {"file:///home/u/proj/.env", "file:///home/u/proj/.env.local", "/srv/app/.envrc",
                             "file:///home/u/proj/certs/server.pem", "file:///home/u/.ssh/id_ed25519",
                             "file:///home/u/.ssh/id_rsa.pub", "file:///home/u/proj/tls.key", "secrets.yaml",
                             "file:///home/u/vault.kdbx", "file:///home/u/.netrc", "file:///home/u/my%20proj/.env"}) {
    INFO(secret);
    CHECK(d.excluded(secret));
  }
  for (const char* code : {"file:///home/u/proj/app.py", "file:///home/u/proj/id_map.py",
                           "file:///home/u/proj/environment.py", "file:///home/u/proj/keys.py",
                           "file:///home/u/.env/src/main.py", "untitled:Untitled-1", "file:///home/u/proj/key.c"}) {
    INFO(code);
    CHECK_FALSE(d.excluded(code));
  }
  // A glob with '/' matches the whole path ('*' crossing '/'); blanks around globs and empty ones are ignored.
  const ExcludeList custom{" */private/* , ,*.secret "};
  CHECK(custom.globs() == std::vector<std::string>{"*/private/*", "*.secret"});
  CHECK(custom.excluded("file:///home/u/proj/private/notes.py"));
  CHECK(custom.excluded("file:///home/u/proj/a.secret"));
  CHECK_FALSE(custom.excluded("file:///home/u/proj/.env"));  // the setting replaces the defaults
  CHECK_FALSE(ExcludeList{""}.excluded("file:///home/u/proj/.env"));
  CHECK(moelsp::assist::path_of_uri("file:///a%20b/c%2Ed") == "/a b/c.d");
  CHECK(moelsp::assist::path_of_uri("file://host/share/x") == "/share/x");
  CHECK(moelsp::assist::path_of_uri("file:///bad%zz") == "/bad%zz");
}

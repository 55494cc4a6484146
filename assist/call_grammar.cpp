// Tool-call grammars per family (call_grammar.h). Each family's call is
// written as its template renders it (tests/test_call_grammar.cpp checks
// the real templates' renders against these grammars), with the whitespace
// the templates vary in left optional.
//
// The XML families write a string parameter raw up to its closing tag, so
// its value is "any text that does not contain the closing tag": a rule per
// state of the tag's KMP automaton (until()), all right-recursive, so the
// matcher's stacks stay flat however long the value.
#include "assist/call_grammar.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "assist/json_schema.h"

namespace moelsp::assist {

using ojson = nlohmann::ordered_json;

namespace {

struct Tool {
  std::string name, parameters;  // parameters: the schema as JSON text
};

std::vector<Tool> read_tools(const std::string& tools_json, const std::string& only) {
  std::vector<Tool> out;
  ojson tools;
  try {
    tools = ojson::parse(tools_json);
  } catch (const ojson::exception&) {
    return out;
  }
  if (!tools.is_array()) return out;
  for (const ojson& t : tools) {
    const ojson& f = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) continue;
    const std::string name = f["name"];
    if (!only.empty() && name != only) continue;
    const ojson params = f.contains("parameters") && !f["parameters"].is_null() ? f["parameters"]
                         : f.contains("input_schema")                           ? f["input_schema"]
                                                                                : ojson::object();
    out.push_back({name, params.dump()});
  }
  return out;
}

// Any text up to and including the first occurrence of `stop` (ASCII).
std::string until(GbnfBuilder& b, const std::string& name, const std::string& stop) {
  const size_t k = stop.size();
  std::vector<size_t> fail(k, 0);  // KMP failure function
  for (size_t i = 1, j = 0; i < k; ++i) {
    while (j > 0 && stop[i] != stop[j]) j = fail[j - 1];
    if (stop[i] == stop[j]) ++j;
    fail[i] = j;
  }
  const auto delta = [&](size_t i, char c) {
    while (i > 0 && stop[i] != c) i = fail[i - 1];
    return stop[i] == c ? i + 1 : 0;
  };
  std::string chars;
  for (char c : stop)
    if (chars.find(c) == std::string::npos) chars += c;
  std::string others = "[^";
  for (char c : chars) others += fmt::format("\\x{:02X}", unsigned(uint8_t(c)));
  others += "]";
  const auto state = [&](size_t i) { return fmt::format("{}-{}", name, i); };
  for (size_t i = 0; i < k; ++i) {
    std::string body;
    for (char c : chars) {
      const size_t next = delta(i, c);
      body += fmt::format("{} {} | ", gbnf_literal(std::string(1, c)), next == k ? std::string() : state(next));
    }
    b.add_rule(state(i), body + others + " " + state(0));
  }
  return state(0);
}

// The arguments' rule: the tool's schema, or any object when it cannot be compiled.
std::string args_rule(GbnfBuilder& b, const Tool& t, const std::string& name) {
  try {
    return b.add_schema(name, t.parameters);
  } catch (const SchemaError& e) {
    spdlog::warn("tool '{}': its parameters' schema is not enforced ({}); any JSON object is allowed", t.name,
                 e.what());
    return b.add_schema(name, R"({"type":"object"})");
  }
}

std::vector<GbnfBuilder::Param> params_of(GbnfBuilder& b, const Tool& t, const std::string& name) {
  try {
    return b.add_params(name, t.parameters);
  } catch (const SchemaError& e) {
    spdlog::warn("tool '{}': its parameters' schema is not enforced ({})", t.name, e.what());
    return {};
  }
}

// The XML families' parameters, in schema order, the optional ones
// skippable: `open` (a format of the key) and `mid` (GBNF) before the
// value, `close` after it.
std::string xml_params(GbnfBuilder& b, const Tool& t, const std::string& name, const std::string& open,
                       const std::string& mid, const std::string& close) {
  std::string seq;
  const std::string raw_text = until(b, name + "-text", close);
  for (const auto& p : params_of(b, t, name)) {
    const std::string head = gbnf_literal(fmt::format(fmt::runtime(open), p.key)) + " " + mid;
    const std::string value = p.raw && p.rule.empty() ? raw_text : p.rule + " " + gbnf_literal(close);
    const std::string one = b.add_rule(name + "-p", head + " " + value + " \"\\n\"?");
    seq += fmt::format(" {}{}", one, p.required ? "" : "?");
  }
  return seq.empty() ? std::string("\"\"") : seq.substr(1);
}

std::string one_call(GbnfBuilder& b, ToolSyntax s, const Tool& t, size_t i) {
  const std::string n = fmt::format("call-{}", i);
  const std::string jname = gbnf_literal(ojson(t.name).dump());  // the name as a JSON string
  const std::string name = gbnf_literal(t.name);
  switch (s) {
    case ToolSyntax::Hermes:
      return fmt::format(
          R"("<tool_call>" "\n"? "{{" space "\"name\"" space ":" space {} space "," space "\"arguments\"" space ":" space {} "}}" space "</tool_call>")",
          jname, args_rule(b, t, n + "-args"));
    case ToolSyntax::Llama3:
      return fmt::format(
          R"("<|python_tag|>"? "{{" space "\"name\"" space ":" space {} space "," space "\"parameters\"" space ":" space {} "}}" space)",
          jname, args_rule(b, t, n + "-args"));
    case ToolSyntax::Qwen3Coder:
      return fmt::format(R"("<tool_call>\n<function=" {} ">\n" {} "</function>\n</tool_call>")", name,
                         xml_params(b, t, n, "<parameter={}>\n", "", "\n</parameter>"));
    case ToolSyntax::Glm:
      return fmt::format(R"("<tool_call>" {} "\n"? {} "</tool_call>")", name,
                         xml_params(b, t, n, "<arg_key>{}</arg_key>", R"("\n"? "<arg_value>")", "</arg_value>"));
    case ToolSyntax::DeepSeek: {  // V3.1's form, or V3/R1's fenced one
      const std::string a = args_rule(b, t, n + "-args");
      return fmt::format(
          R"("<｜tool▁call▁begin｜>" ({} "<｜tool▁sep｜>" {} | "function" "\n"? "<｜tool▁sep｜>" {} "\n```json\n" {} "\n"? "```") "<｜tool▁call▁end｜>")",
          name, a, name, a);
    }
    case ToolSyntax::Mistral:  // Devstral; Mistral Small 3.2 adds a call id
      return fmt::format(R"("[TOOL_CALLS]" {} ("[CALL_ID]" [a-zA-Z0-9]{{1,40}})? "[ARGS]" {})", name,
                         args_rule(b, t, n + "-args"));
    case ToolSyntax::Harmony:  // the header may go on (a channel, <|constrain|>json) up to the message
      return fmt::format(R"("to=functions." {} {} {})", name, until(b, n + "-header", "<|message|>"),
                         args_rule(b, t, n + "-args"));
    case ToolSyntax::None: break;
  }
  return "";
}

// Mistral Nemo's form: [TOOL_CALLS][{"name", "arguments", "id"}, …].
std::string mistral_list(GbnfBuilder& b, const std::vector<Tool>& tools, bool many) {
  std::string items;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string item = fmt::format(
        R"("{{" space "\"name\"" space ":" space {} space "," space "\"arguments\"" space ":" space {} ("," space "\"id\"" space ":" space string)? "}}" space)",
        gbnf_literal(ojson(tools[i].name).dump()), args_rule(b, tools[i], fmt::format("call-{}-args", i)));
    items += (i ? " | " : "") + item;
  }
  b.add_schema("string", R"({"type":"string"})");
  const std::string item = b.add_rule("list-item", items);
  return fmt::format(R"("[TOOL_CALLS]" "[" space {} {}"]")", item, many ? fmt::format("(\",\" space {})* ", item) : "");
}

std::vector<std::string> triggers(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::Hermes:
    case ToolSyntax::Qwen3Coder:
    case ToolSyntax::Glm: return {"<tool_call>"};
    case ToolSyntax::DeepSeek: return {"<｜tool▁calls▁begin｜>"};
    case ToolSyntax::Mistral: return {"[TOOL_CALLS]"};
    case ToolSyntax::Llama3: return {"<|python_tag|>", "{\"name\""};
    case ToolSyntax::Harmony: return {"to=functions."};
    case ToolSyntax::None: break;
  }
  return {};
}

}  // namespace

std::optional<CallGrammar> call_grammar(const CallGrammarInput& in) {
  if (in.syntax == ToolSyntax::None) return std::nullopt;
  const std::vector<Tool> tools = read_tools(in.tools_json, in.only);
  if (tools.empty()) return std::nullopt;
  GbnfBuilder b;
  std::string calls;
  for (size_t i = 0; i < tools.size(); ++i)
    calls += (i ? " | " : "") + b.add_rule(fmt::format("call-{}", i), one_call(b, in.syntax, tools[i], i));
  const std::string call = b.add_rule("call", calls);
  // One call, or several where the family writes several in one answer (a
  // harmony call ends the message; Llama 3 answers with one JSON object).
  const bool many = in.parallel && in.syntax != ToolSyntax::Harmony && in.syntax != ToolSyntax::Llama3;
  std::string root = many ? fmt::format("{} (\"\\n\"{{0,2}} {})*", call, call) : call;
  if (in.syntax == ToolSyntax::DeepSeek) root = "\"<｜tool▁calls▁begin｜>\" " + root + " \"<｜tool▁calls▁end｜>\"";
  if (in.syntax == ToolSyntax::Harmony) root = "\"<|channel|>commentary \"? " + root;
  if (in.syntax == ToolSyntax::Mistral) root += " | " + mistral_list(b, tools, many);
  b.add_rule("space", R"(| " " | "\n"{1,2} [ \t]{0,20})");
  b.add_rule("root", root);
  return CallGrammar{b.gbnf(), triggers(in.syntax)};
}

bool reasons_in_think(ToolSyntax s) {
  return s == ToolSyntax::Hermes || s == ToolSyntax::Qwen3Coder || s == ToolSyntax::Glm || s == ToolSyntax::DeepSeek;
}

std::string with_reasoning(ToolSyntax syntax, const std::string& gbnf, bool opened) {
  GbnfBuilder b;
  if (!reasons_in_think(syntax)) {
    b.add_rule("answer-root", "root");
    return gbnf + "\n" + b.gbnf();
  }
  const std::string thought = until(b, "answer-thought", "</think>");
  b.add_rule("answer-root", opened ? fmt::format(R"({} [ \t\n]{{0,4}} root)", thought)
                                   : fmt::format(R"(("<think>" {} [ \t\n]{{0,4}})? root)", thought));
  return gbnf + "\n" + b.gbnf();
}

}  // namespace moelsp::assist

// The output parser of tool_calls.h: a small state machine over the text not
// yet given out (pending_), in three states — text, reasoning, a call — each
// looking for the tag that ends it. Only a tag's possible beginning at the
// end of what arrived is held back, so text streams as it comes.
#include "assist/tool_calls.h"

#include <algorithm>
#include <functional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/json_limits.h"

namespace moelsp::assist {

using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";

// The length of the longest end of `text` that is the start of `tag` (a tag
// that may be arriving): that much is held back.
size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

// A JSON value parsed within the limits every outside JSON keeps to, or discarded.
ojson parse_limited(std::string_view text) {
  if (!json_limit_problem(text).empty()) return ojson(ojson::value_t::discarded);
  return ojson::parse(text, nullptr, false);
}

// Between `open` and `close` from `at`; advances `at` past `close`. False when absent.
bool between(std::string_view s, size_t& at, std::string_view open, std::string_view close, std::string_view& out) {
  const size_t a = s.find(open, at);
  if (a == std::string_view::npos) return false;
  const size_t b = s.find(close, a + open.size());
  if (b == std::string_view::npos) return false;
  out = s.substr(a + open.size(), b - a - open.size());
  at = b + close.size();
  return true;
}

// Each family's call block (between <tool_call> and </tool_call>): the
// name, and the arguments through `add` (XML families) or as JSON.
using AddArg = std::function<void(std::string_view key, std::string_view value)>;

// {"name": N, "arguments": {...}} (arguments may come as a JSON string).
bool parse_hermes(std::string_view block, std::string& name, ojson& args) {
  const ojson j = parse_limited(trim(block));
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  name = j["name"];
  ojson a = j.contains("arguments") ? j["arguments"] : ojson::object();
  if (a.is_string()) a = parse_limited(a.get<std::string>());
  if (!a.is_object()) return false;
  args = std::move(a);
  return true;
}

// <function=N>\n<parameter=K>\nV\n</parameter>…</function>
bool parse_qwen3_coder(std::string_view block, std::string& name, const AddArg& add) {
  size_t at = 0;
  std::string_view fn;
  if (!between(block, at, "<function=", "</function>", fn)) return false;
  const size_t gt = fn.find('>');
  if (gt == std::string_view::npos) return false;
  name = std::string(trim(fn.substr(0, gt)));
  const std::string_view body = fn.substr(gt + 1);
  for (size_t pos = 0;;) {
    const size_t open = body.find("<parameter=", pos);
    if (open == std::string_view::npos) break;
    const size_t name_end = body.find('>', open), close = body.find("</parameter>", open);
    if (name_end == std::string_view::npos || close == std::string_view::npos || close < name_end) return false;
    std::string_view value = body.substr(name_end + 1, close - name_end - 1);
    if (value.starts_with('\n')) value.remove_prefix(1);  // the template's own line breaks
    if (value.ends_with('\n')) value.remove_suffix(1);
    add(trim(body.substr(open + 11, name_end - open - 11)), value);
    pos = close + 12;
  }
  return !name.empty();
}

// N<arg_key>K</arg_key><arg_value>V</arg_value>…
bool parse_glm(std::string_view block, std::string& name, const AddArg& add) {
  const size_t first = block.find("<arg_key>");
  name = std::string(trim(block.substr(0, first)));
  if (name.empty()) return false;
  size_t at = first == std::string_view::npos ? block.size() : first;
  std::string_view key, value;
  while (at < block.size() && between(block, at, "<arg_key>", "</arg_key>", key)) {
    if (!between(block, at, "<arg_value>", "</arg_value>", value)) return false;
    add(trim(key), value);
  }
  return trim(block.substr(std::min(at, block.size()))).empty();
}
}  // namespace

const char* to_string(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::Hermes: return "hermes";
    case ToolSyntax::Qwen3Coder: return "qwen3-coder";
    case ToolSyntax::Glm: return "glm";
    case ToolSyntax::None: break;
  }
  return "none";
}

std::string call_opening(ToolSyntax syntax, std::string_view name) {
  const std::string n(name);
  switch (syntax) {
    case ToolSyntax::Hermes:
      return n.empty() ? "<tool_call>\n{\"name\": \""
                       : "<tool_call>\n{\"name\": " + ojson(n).dump() + ", \"arguments\": ";
    case ToolSyntax::Qwen3Coder: return n.empty() ? "<tool_call>\n<function=" : "<tool_call>\n<function=" + n + ">\n";
    case ToolSyntax::Glm: return n.empty() ? "<tool_call>" : "<tool_call>" + n + "\n";
    case ToolSyntax::None: break;
  }
  return "";
}

ToolSyntax tool_syntax_for_template(std::string_view t) {
  if (t.find("<function=") != std::string_view::npos && t.find("<parameter=") != std::string_view::npos)
    return ToolSyntax::Qwen3Coder;
  if (t.find("<arg_key>") != std::string_view::npos) return ToolSyntax::Glm;
  if (t.find("<tool_call>") != std::string_view::npos) return ToolSyntax::Hermes;
  return ToolSyntax::None;
}

OutputParser::OutputParser(ToolSyntax syntax, const std::string& tools_json, bool in_reasoning)
    : syntax_(syntax), state_(in_reasoning ? State::Reasoning : State::Text) {
  if (tools_json.empty()) return;
  const ojson tools = parse_limited(tools_json);
  if (!tools.is_array()) return;
  for (const auto& t : tools) {
    const ojson& f = t.is_object() && t.contains("function") ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) continue;
    if (!f.contains("parameters") || !f["parameters"].is_object()) continue;
    const ojson& params = f["parameters"];
    if (!params.contains("properties") || !params["properties"].is_object()) continue;
    for (const auto& [key, schema] : params["properties"].items()) {
      std::string type;
      if (schema.is_object() && schema.contains("type")) {
        const ojson& ty = schema["type"];
        if (ty.is_string()) type = ty;
        else if (ty.is_array() && std::find(ty.begin(), ty.end(), "string") != ty.end()) type = "string";
        else if (ty.is_array() && !ty.empty() && ty[0].is_string()) type = ty[0];
      }
      param_types_.emplace_back(f["name"].get<std::string>() + "\n" + key, type);
    }
  }
}

OutputDelta OutputParser::push(std::string_view text) {
  pending_.append(text);
  OutputDelta out;
  step(out, false);
  return out;
}

OutputDelta OutputParser::finish() {
  OutputDelta out;
  step(out, true);
  return out;
}

void OutputParser::step(OutputDelta& out, bool at_end) {
  for (;;) {
    const std::string_view p = pending_;
    if (state_ == State::Text) {
      const size_t think = p.find(kThinkOpen);
      const size_t call = syntax_ == ToolSyntax::None ? std::string_view::npos : p.find(kCallOpen);
      const size_t at = std::min(think, call);
      if (at != std::string_view::npos) {
        out.content.append(p.substr(0, at));
        state_ = at == think ? State::Reasoning : State::Call;
        pending_.erase(0, at + (at == think ? kThinkOpen.size() : kCallOpen.size()));
        continue;
      }
      size_t hold = at_end ? 0 : partial_tag(p, kThinkOpen);
      if (!at_end && syntax_ != ToolSyntax::None) hold = std::max(hold, partial_tag(p, kCallOpen));
      out.content.append(p.substr(0, p.size() - hold));
      pending_.erase(0, p.size() - hold);
      return;
    }
    if (state_ == State::Reasoning) {
      const size_t end = p.find(kThinkClose);
      if (end != std::string_view::npos) {
        out.reasoning.append(p.substr(0, end));
        pending_.erase(0, end + kThinkClose.size());
        state_ = State::Text;
        continue;
      }
      const size_t hold = at_end ? 0 : partial_tag(p, kThinkClose);
      out.reasoning.append(p.substr(0, p.size() - hold));
      pending_.erase(0, p.size() - hold);
      return;
    }
    // A call: all of it is needed before it can be parsed.
    const size_t end = p.find(kCallClose);
    if (end != std::string_view::npos) {
      close_call(out, p.substr(0, end));
      pending_.erase(0, end + kCallClose.size());
      state_ = State::Text;
      continue;
    }
    if (at_end) {
      spdlog::warn("tool call ({}): the output ended inside a call; it is returned as text", to_string(syntax_));
      out.content.append(kCallOpen).append(p);
      pending_.clear();
    }
    return;
  }
}

void OutputParser::close_call(OutputDelta& out, std::string_view block) {
  ToolCall call;
  ojson args = ojson::object();
  // An XML family's value: a string on the wire, typed by the tool's schema.
  const AddArg add = [&](std::string_view key, std::string_view value) {
    const std::string k = call.name + "\n" + std::string(key);
    std::string type;
    for (const auto& [name, t] : param_types_)
      if (name == k) type = t;
    ojson parsed;
    if (!type.empty() && type != "string") parsed = parse_limited(trim(value));
    args[std::string(key)] = parsed.is_discarded() || parsed.is_null() ? ojson(std::string(value)) : parsed;
  };
  const bool ok = syntax_ == ToolSyntax::Hermes       ? parse_hermes(block, call.name, args)
                  : syntax_ == ToolSyntax::Qwen3Coder ? parse_qwen3_coder(block, call.name, add)
                  : syntax_ == ToolSyntax::Glm        ? parse_glm(block, call.name, add)
                                                      : false;
  if (!ok) {
    spdlog::warn("tool call ({}): cannot parse '{}'; it is returned as text", to_string(syntax_),
                 std::string(block.substr(0, 200)));
    out.content.append(kCallOpen).append(block).append(kCallClose);
    return;
  }
  call.arguments = args.dump(-1, ' ', false, ojson::error_handler_t::replace);
  out.calls.push_back(std::move(call));
}

}  // namespace moelsp::assist

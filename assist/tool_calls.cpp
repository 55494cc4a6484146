// The output parser of tool_calls.h: a small state machine over the text not
// yet given out (pending_), in three states — text, reasoning, a call — each
// looking for the tag that ends it. Only a tag's possible beginning at the
// end of what arrived is held back, so text streams as it comes.
#include "assist/tool_calls.h"

#include <algorithm>
#include <functional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "util/json_limits.h"

namespace moelsp::assist {

using ojson = nlohmann::ordered_json;

namespace {

constexpr std::string_view kThinkOpen = "<think>", kThinkClose = "</think>";

// Where a family's call starts and ends in the text, and markers around a
// group of calls that are only dropped. An empty `close`: the call ends
// where its JSON does (Mistral and Llama 3 write no closing tag).
struct Markers {
  std::string_view open, close;
  std::vector<std::string_view> dropped;
};
Markers markers(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::DeepSeek:
      return {"<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", {"<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"}};
    case ToolSyntax::Mistral: return {"[TOOL_CALLS]", "", {}};
    case ToolSyntax::Llama3: return {"<|python_tag|>", "", {}};
    case ToolSyntax::None: return {"", "", {}};
    default: return {"<tool_call>", "</tool_call>", {}};
  }
}

// gpt-oss's message markers (engine/harmony.h).
constexpr std::string_view kChannel = "<|channel|>", kMessage = "<|message|>";
constexpr std::string_view kEnds[] = {"<|end|>", "<|call|>", "<|return|>"};

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

// An XML family's call as far as it has arrived: its name once that is
// complete, and its complete parameters (values as written: strings).
struct XmlCall {
  std::string name;  // empty until complete
  std::vector<std::pair<std::string, std::string>> params;
  bool complete = false;  // its closing tag seen, nothing malformed
};

// <function=N>\n<parameter=K>\nV\n</parameter>…</function>
XmlCall read_qwen3_coder(std::string_view block) {
  XmlCall x;
  const size_t fn = block.find("<function=");
  const size_t gt = fn == std::string_view::npos ? fn : block.find('>', fn);
  if (gt == std::string_view::npos) return x;
  x.name = std::string(trim(block.substr(fn + 10, gt - fn - 10)));
  const size_t fn_end = block.find("</function>", gt);
  const std::string_view body = block.substr(gt + 1, fn_end == std::string_view::npos ? fn_end : fn_end - gt - 1);
  size_t pos = 0;
  for (;;) {
    const size_t open = body.find("<parameter=", pos);
    if (open == std::string_view::npos) break;
    const size_t name_end = body.find('>', open), close = body.find("</parameter>", open);
    if (name_end == std::string_view::npos || close == std::string_view::npos || close < name_end) return x;
    std::string_view value = body.substr(name_end + 1, close - name_end - 1);
    if (value.starts_with('\n')) value.remove_prefix(1);  // the template's own line breaks
    if (value.ends_with('\n')) value.remove_suffix(1);
    x.params.emplace_back(trim(body.substr(open + 11, name_end - open - 11)), value);
    pos = close + 12;
  }
  x.complete = fn_end != std::string_view::npos && trim(body.substr(pos)).empty();
  return x;
}

// N<arg_key>K</arg_key><arg_value>V</arg_value>… (the name is complete at
// its first <arg_key>, or with the block).
XmlCall read_glm(std::string_view block, bool whole) {
  XmlCall x;
  const size_t first = block.find("<arg_key>");
  if (first == std::string_view::npos && !whole) return x;
  x.name = std::string(trim(block.substr(0, first)));
  size_t at = first == std::string_view::npos ? block.size() : first;
  std::string_view key, value;
  while (at < block.size()) {
    size_t next = at;
    if (!between(block, next, "<arg_key>", "</arg_key>", key)) break;
    if (!between(block, next, "<arg_value>", "</arg_value>", value)) break;
    x.params.emplace_back(trim(key), value);
    at = next;
  }
  x.complete = whole && trim(block.substr(std::min(at, block.size()))).empty();
  return x;
}

// A JSON text in a code fence, or bare: the fence dropped.
std::string_view unfenced(std::string_view s) {
  s = trim(s);
  if (s.starts_with("```")) {
    s.remove_prefix(std::min(s.size(), s.find('\n') == std::string_view::npos ? s.size() : s.find('\n') + 1));
    if (s.ends_with("```")) s.remove_suffix(3);
  }
  return trim(s);
}

// N<｜tool▁sep｜>{args} (V3.1) or function<｜tool▁sep｜>N\n```json\n{args}\n``` (V3, R1).
bool parse_deepseek(std::string_view block, std::string& name, ojson& args) {
  constexpr std::string_view kSep = "<｜tool▁sep｜>";
  const size_t sep = block.find(kSep);
  if (sep == std::string_view::npos) return false;
  std::string_view left = trim(block.substr(0, sep)), right = block.substr(sep + kSep.size());
  if (left == "function") {
    const size_t nl = right.find('\n');
    left = trim(right.substr(0, nl));
    right = nl == std::string_view::npos ? std::string_view() : right.substr(nl + 1);
  }
  name = std::string(left);
  args = parse_limited(unfenced(right));
  if (args.is_string()) args = parse_limited(args.get<std::string>());
  return !name.empty() && args.is_object();
}

// Where the JSON value in `s` ends (one past it), or npos while it is not
// complete: an array when `s` opens with one, else the first object.
size_t json_end(std::string_view s) {
  const size_t first = s.find_first_not_of(" \n\r\t");
  const size_t start = first != std::string_view::npos && s[first] == '[' ? first : s.find('{');
  if (start == std::string_view::npos) return std::string_view::npos;
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::string_view::npos;
}

// {"name": N, "arguments" | "parameters": {...}}: one call of a JSON family.
bool json_call(const ojson& j, std::string& name, ojson& args) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  name = j["name"];
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  args = j.contains(key) ? j[key] : ojson::object();
  if (args.is_string()) args = parse_limited(args.get<std::string>());
  return args.is_object();
}

// N[ARGS]{...} (Devstral), N[CALL_ID]ID[ARGS]{...} (Mistral Small 3.2), or [{"name", "arguments"}, …]
// (Mistral Nemo): one call or several.
bool parse_mistral(std::string_view block, std::vector<std::pair<std::string, ojson>>& calls) {
  block = trim(block);
  if (block.starts_with('[')) {
    const ojson list = parse_limited(block);
    if (!list.is_array() || list.empty()) return false;
    calls.clear();
    for (const auto& j : list) {
      calls.emplace_back("", ojson::object());
      if (!json_call(j, calls.back().first, calls.back().second)) return false;
    }
    return true;
  }
  const size_t brace = block.find('{');
  const size_t name_end = std::min(block.find('['), brace);  // [ARGS], or [CALL_ID]ID[ARGS] (Mistral Small 3.2)
  if (name_end == std::string_view::npos) return false;
  calls[0].first = std::string(trim(block.substr(0, name_end)));
  calls[0].second = parse_limited(block.substr(brace == std::string_view::npos ? block.size() : brace));
  return !calls[0].first.empty() && calls[0].second.is_object();
}
}  // namespace

const char* to_string(ToolSyntax s) {
  switch (s) {
    case ToolSyntax::Hermes: return "hermes";
    case ToolSyntax::Qwen3Coder: return "qwen3-coder";
    case ToolSyntax::Glm: return "glm";
    case ToolSyntax::DeepSeek: return "deepseek";
    case ToolSyntax::Harmony: return "harmony";
    case ToolSyntax::Mistral: return "mistral";
    case ToolSyntax::Llama3: return "llama3";
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
    case ToolSyntax::DeepSeek:
      return "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + (n.empty() ? "" : n + "<｜tool▁sep｜>");
    case ToolSyntax::Harmony:
      return "<|channel|>commentary to=functions." + (n.empty() ? "" : n + " <|constrain|>json<|message|>");
    case ToolSyntax::Mistral: return "[TOOL_CALLS]" + (n.empty() ? "" : n + "[ARGS]");
    case ToolSyntax::Llama3:
      return n.empty() ? "{\"name\": \"" : "{\"name\": " + ojson(n).dump() + ", \"parameters\": ";
    case ToolSyntax::None: break;
  }
  return "";
}

ToolSyntax tool_syntax_for_template(std::string_view t) {
  const auto has = [&](std::string_view s) { return t.find(s) != std::string_view::npos; };
  if (has("<｜tool▁call▁begin｜>")) return ToolSyntax::DeepSeek;
  if (has("<|channel|>") && has("functions.")) return ToolSyntax::Harmony;
  if (has("[TOOL_CALLS]")) return ToolSyntax::Mistral;
  if (has("<|python_tag|>") || (has("<|start_header_id|>") && has("\"parameters\""))) return ToolSyntax::Llama3;
  if (t.find("<function=") != std::string_view::npos && t.find("<parameter=") != std::string_view::npos)
    return ToolSyntax::Qwen3Coder;
  if (t.find("<arg_key>") != std::string_view::npos) return ToolSyntax::Glm;
  if (t.find("<tool_call>") != std::string_view::npos) return ToolSyntax::Hermes;
  return ToolSyntax::None;
}

OutputParser::OutputParser(ToolSyntax syntax, const std::string& tools_json, bool in_reasoning)
    : syntax_(syntax),
      state_(syntax == ToolSyntax::Harmony ? State::Header
             : in_reasoning                ? State::Reasoning
                                           : State::Text) {
  if (tools_json.empty()) return;
  const ojson tools = parse_limited(tools_json);
  if (!tools.is_array()) return;
  for (const auto& t : tools) {
    const ojson& f = t.is_object() && t.contains("function") ? t["function"] : t;
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string()) continue;
    tool_names_.push_back(f["name"]);
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

void OutputDelta::add_text(std::string_view s) {
  if (s.empty()) return;
  content.append(s);
  if (!pieces.empty() && pieces.back().kind == OutputPiece::Kind::Text) pieces.back().text.append(s);
  else pieces.push_back({OutputPiece::Kind::Text, std::string(s)});
}

void OutputDelta::add_reasoning(std::string_view s) {
  if (s.empty()) return;
  reasoning.append(s);
  if (!pieces.empty() && pieces.back().kind == OutputPiece::Kind::Reasoning) pieces.back().text.append(s);
  else pieces.push_back({OutputPiece::Kind::Reasoning, std::string(s)});
}

void OutputDelta::append(const OutputDelta& more) {
  for (const auto& p : more.pieces) {
    if (p.kind == OutputPiece::Kind::Text) add_text(p.text);
    else if (p.kind == OutputPiece::Kind::Reasoning) add_reasoning(p.text);
    else add(p);
  }
  calls.insert(calls.end(), more.calls.begin(), more.calls.end());
}

void OutputParser::start_in_reasoning() {
  if (state_ == State::Text && pending_.empty() && at_start_) state_ = State::Reasoning;
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
    const bool more = syntax_ == ToolSyntax::Harmony ? step_harmony(out, at_end)
                      : state_ == State::Call        ? step_call(out, at_end)
                                                     : step_text(out, at_end);
    if (!more) return;
  }
}

// Text and reasoning: each looks for the tag that ends it (and text for a
// call's opening); only a tag's possible beginning is held back. True when
// the state changed and there is more to look at.
bool OutputParser::step_text(OutputDelta& out, bool at_end) {
  const std::string_view p = pending_;
  const auto give = [&](size_t n) {
    out.add_text(p.substr(0, n));
    if (p.substr(0, n).find_first_not_of(" \n\r\t") != std::string_view::npos) at_start_ = false;
  };
  if (state_ == State::Reasoning) {
    const size_t end = p.find(kThinkClose);
    if (end != std::string_view::npos) {
      out.add_reasoning(p.substr(0, end));
      pending_.erase(0, end + kThinkClose.size());
      state_ = State::Text;
      return true;
    }
    const size_t n = p.size() - (at_end ? 0 : partial_tag(p, kThinkClose));
    out.add_reasoning(p.substr(0, n));
    pending_.erase(0, n);
    return false;
  }
  if (syntax_ == ToolSyntax::Llama3 && at_start_) {  // a JSON object first in the answer is a call
    const size_t first = p.find_first_not_of(" \n\r\t;");
    if (first == std::string_view::npos && !at_end) return false;  // only whitespace yet
    if (first != std::string_view::npos && p[first] == '{') {
      pending_.erase(0, first);
      state_ = State::Call;
      opener_.clear();
      return true;
    }
  }
  const Markers m = markers(syntax_);
  std::vector<std::string_view> tags = {kThinkOpen};
  if (!m.open.empty()) tags.push_back(m.open);
  tags.insert(tags.end(), m.dropped.begin(), m.dropped.end());
  size_t at = std::string_view::npos, hold = 0;
  std::string_view tag;
  for (const auto t : tags) {
    if (const size_t i = p.find(t); i < at) at = i, tag = t;
    hold = std::max(hold, partial_tag(p, t));
  }
  if (at == std::string_view::npos) {
    give(p.size() - (at_end ? 0 : hold));
    pending_.erase(0, p.size() - (at_end ? 0 : hold));
    return false;
  }
  give(at);
  pending_.erase(0, at + tag.size());
  if (tag == kThinkOpen) state_ = State::Reasoning;
  else if (tag == m.open) state_ = State::Call, opener_ = std::string(tag);
  return true;  // a dropped marker: text goes on
}

// A call: all of it is needed before it can be parsed (its closing tag, or
// the end of its JSON where the family writes none).
bool OutputParser::step_call(OutputDelta& out, bool at_end) {
  const std::string_view p = pending_;
  const Markers m = markers(syntax_);
  const size_t end = m.close.empty() ? json_end(p) : p.find(m.close);
  const bool closed = end != std::string_view::npos;
  if ((syntax_ == ToolSyntax::Qwen3Coder || syntax_ == ToolSyntax::Glm) &&
      stream_xml(out, closed ? p.substr(0, end) : p, closed || at_end)) {
    if (!closed && !at_end) return false;  // more parameters to come
    pending_.erase(0, closed ? end + m.close.size() : p.size());
    state_ = State::Text;
    return closed;
  }
  if (closed) {
    const std::string block(p.substr(0, end));
    pending_.erase(0, end + m.close.size());
    state_ = State::Text;
    at_start_ = true;  // llama3: calls may follow one another
    if (!close_call(out, block)) {
      if (syntax_ != ToolSyntax::Llama3)  // a JSON answer of Llama's is just an answer
        spdlog::warn("tool call ({}): cannot parse '{}'; it is returned as text", to_string(syntax_),
                     block.substr(0, 200));
      out.add_text(opener_ + block + std::string(m.close));
      at_start_ = false;
    }
    return true;
  }
  if (at_end) {
    if (!(m.close.empty() && close_call(out, p))) {
      spdlog::warn("tool call ({}): the output ended inside a call; it is returned as text", to_string(syntax_));
      out.add_text(opener_ + std::string(p));
    }
    pending_.clear();
  }
  return false;
}

// gpt-oss: headers (`<|channel|>NAME[ to=functions.TOOL]…<|message|>`) and
// bodies ended by <|end|>, <|call|> or <|return|>; the analysis channel is
// reasoning, a body addressed to a function a call, the rest the answer.
// Text that does not open with a header is the answer as it is (plain text).
bool OutputParser::step_harmony(OutputDelta& out, bool at_end) {
  const std::string_view p = pending_;
  if (state_ == State::Header) {
    const size_t msg = p.find(kMessage);
    if (msg == std::string_view::npos) {
      const auto opens = [&](std::string_view tag) { return p.starts_with(tag) || tag.starts_with(p); };
      if (!opens(kChannel) && !opens("<|start|>") && !opens(" to=")) state_ = State::Body, channel_ = Channel::Final;
      else if (at_end) pending_.clear();  // ended in a header: nothing to show
      return state_ == State::Body;
    }
    const std::string_view header = p.substr(0, msg);
    const size_t to = header.find("to=functions.");
    channel_ = to != std::string_view::npos                        ? Channel::Call
               : header.find("analysis") != std::string_view::npos ? Channel::Analysis
                                                                   : Channel::Final;
    if (channel_ == Channel::Call) {
      const std::string_view rest = header.substr(to + 13);
      call_name_ = std::string(rest.substr(0, rest.find_first_of(" <")));
    }
    pending_.erase(0, msg + kMessage.size());
    state_ = State::Body;
    return true;
  }
  size_t end = std::string_view::npos, hold = 0, len = 0;
  for (const auto e : kEnds) {
    if (const size_t i = p.find(e); i < end) end = i, len = e.size();
    hold = std::max(hold, partial_tag(p, e));
  }
  if (channel_ == Channel::Call) {
    if (end == std::string_view::npos && !at_end) return false;
    const std::string block(p.substr(0, std::min(end, p.size())));
    pending_.erase(0, end == std::string_view::npos ? p.size() : end + len);
    state_ = State::Header;
    if (!close_call(out, block)) {
      spdlog::warn("tool call (harmony): cannot parse '{}'; it is returned as text", block.substr(0, 200));
      out.add_text(block);
    }
    return !pending_.empty();
  }
  const auto give = [&](std::string_view text) {
    if (channel_ == Channel::Analysis) out.add_reasoning(text);
    else out.add_text(text);
  };
  if (end == std::string_view::npos) {
    const size_t n = p.size() - (at_end ? 0 : hold);
    give(p.substr(0, n));
    pending_.erase(0, n);
    return false;
  }
  give(p.substr(0, end));
  pending_.erase(0, end + len);
  state_ = State::Header;
  return true;
}

bool OutputParser::close_call(OutputDelta& out, std::string_view block) {
  std::vector<std::pair<std::string, ojson>> calls(1, {"", ojson::object()});
  std::string& name = calls[0].first;
  ojson& args = calls[0].second;
  bool ok = false;
  switch (syntax_) {
    case ToolSyntax::Hermes: ok = parse_hermes(block, name, args); break;
    case ToolSyntax::Qwen3Coder:
    case ToolSyntax::Glm: break;  // stream_xml's
    case ToolSyntax::DeepSeek: ok = parse_deepseek(block, name, args); break;
    case ToolSyntax::Llama3: {
      // A bare JSON answer is a call only when it has the shape of one and
      // names one of the tools ({"name": "Alice", "age": 3} is an answer).
      const ojson j = parse_limited(trim(block));
      ok = j.is_object() && (j.contains("parameters") || j.contains("arguments")) && json_call(j, name, args) &&
           (tool_names_.empty() || std::find(tool_names_.begin(), tool_names_.end(), name) != tool_names_.end());
      break;
    }
    case ToolSyntax::Harmony:
      name = call_name_;
      args = parse_limited(unfenced(block));
      ok = !name.empty() && args.is_object();
      break;
    case ToolSyntax::Mistral: ok = parse_mistral(block, calls); break;
    case ToolSyntax::None: break;
  }
  if (!ok) return false;
  for (const auto& [n, a] : calls) {
    out.calls.push_back({n, a.dump(-1, ' ', false, ojson::error_handler_t::replace)});
    out.add({OutputPiece::Kind::Begin, n});
    out.add({OutputPiece::Kind::Args, out.calls.back().arguments});
    out.add({OutputPiece::Kind::End, ""});
  }
  return true;
}

// A value of an XML family: a string on the wire, typed by the tool's
// schema (a string where it says string, else the JSON it spells, else the
// string).
std::string OutputParser::typed(const std::string& tool, const std::string& key, std::string_view value) const {
  const std::string k = tool + "\n" + key;
  std::string type;
  for (const auto& [n, t] : param_types_)
    if (n == k) type = t;
  ojson parsed;
  if (!type.empty() && type != "string") parsed = parse_limited(trim(value));
  const ojson v = parsed.is_discarded() || parsed.is_null() ? ojson(std::string(value)) : parsed;
  return v.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

bool OutputParser::stream_xml(OutputDelta& out, std::string_view block, bool final) {
  const XmlCall x = syntax_ == ToolSyntax::Qwen3Coder ? read_qwen3_coder(block) : read_glm(block, final);
  if (x.name.empty()) return false;
  if (!call_open_) {
    out.add({OutputPiece::Kind::Begin, x.name});
    call_open_ = true;
    args_sent_ = 0;
    args_text_.clear();
  }
  for (size_t i = args_sent_; i < x.params.size(); ++i) {
    const auto& [key, value] = x.params[i];
    std::string piece(i == 0 ? "{" : ",");
    piece.append(ojson(key).dump()).append(":").append(typed(x.name, key, value));
    out.add({OutputPiece::Kind::Args, piece});
    args_text_ += piece;
  }
  args_sent_ = x.params.size();
  if (!final) return true;
  if (!x.complete)
    spdlog::warn("tool call ({}): the call of '{}' is cut off or malformed; it ends with the {} parameter(s) it has",
                 to_string(syntax_), x.name, args_sent_);
  const std::string close = args_sent_ == 0 ? "{}" : "}";
  out.add({OutputPiece::Kind::Args, close});
  out.add({OutputPiece::Kind::End, ""});
  out.calls.push_back({x.name, args_text_ + close});
  call_open_ = false;
  return true;
}

}  // namespace moelsp::assist

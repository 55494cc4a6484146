// Tool calls and reasoning parsed from model output (assist/tool_calls.h),
// per family, on each family's real chat template (tests/data/templates):
// the syntax is read off the template, a conversation with a tool call is
// rendered by it and the call parsed back, and outputs are parsed whole and
// cut at every byte as a stream would deliver them.
#include <catch2/catch.hpp>

#include "assist/tool_calls.h"
#include "engine/chat.h"
#include "test_data.h"

using namespace moelsp;
using namespace moelsp::assist;

namespace {

const std::string kTools = R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
  "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
  "units": {"type": ["string", "null"]}, "detail": {"type": "object"}}}}}])";

std::string read_template(const std::string& name) { return test::read_file(test::data_path("templates/" + name)); }

// The whole output through one parser, pushed in the given pieces.
OutputDelta parse(ToolSyntax s, const std::vector<std::string>& pieces, bool in_reasoning = false) {
  OutputParser p(s, kTools, in_reasoning);
  OutputDelta all;
  const auto add = [&](const OutputDelta& d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    all.calls.insert(all.calls.end(), d.calls.begin(), d.calls.end());
  };
  for (const auto& piece : pieces) add(p.push(piece));
  add(p.finish());
  return all;
}

// Whole, cut at every byte into two pieces, and one byte at a time: the same.
void check_every_cut(ToolSyntax s, const std::string& out, const OutputDelta& want, bool in_reasoning = false) {
  const OutputDelta whole = parse(s, {out}, in_reasoning);
  CHECK(whole.content == want.content);
  CHECK(whole.reasoning == want.reasoning);
  CHECK(whole.calls == want.calls);
  for (size_t i = 0; i <= out.size(); ++i) {
    const OutputDelta cut = parse(s, {out.substr(0, i), out.substr(i)}, in_reasoning);
    INFO("cut at byte " << i);
    REQUIRE(cut.content == want.content);
    REQUIRE(cut.reasoning == want.reasoning);
    REQUIRE(cut.calls == want.calls);
  }
  std::vector<std::string> bytes;
  for (char c : out) bytes.emplace_back(1, c);
  const OutputDelta trickle = parse(s, bytes, in_reasoning);
  CHECK(trickle.content == want.content);
  CHECK(trickle.calls == want.calls);
}

const ToolCall kCall{"get_weather", R"({"city":"Paris","days":3})"};

}  // namespace

TEST_CASE("the tool-call syntax is read off each family's real chat template") {
  CHECK(tool_syntax_for_template(read_template("Qwen3-Coder.jinja")) == ToolSyntax::Qwen3Coder);
  CHECK(tool_syntax_for_template(read_template("GLM-4.6.jinja")) == ToolSyntax::Glm);
  CHECK(tool_syntax_for_template(read_template("GLM-4.7-Flash.jinja")) == ToolSyntax::Glm);
  CHECK(tool_syntax_for_template(read_template("Qwen-Qwen2.5-7B-Instruct.jinja")) == ToolSyntax::Hermes);
  CHECK(tool_syntax_for_template(read_template("Qwen-Qwen3-0.6B.jinja")) == ToolSyntax::Hermes);
  CHECK(tool_syntax_for_template(read_template("google-gemma-2-2b-it.jinja")) == ToolSyntax::None);
}

TEST_CASE("a tool call rendered by each family's template parses back into the same call") {
  const std::string messages = R"([{"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])";
  for (const char* name : {"Qwen3-Coder.jinja", "GLM-4.6.jinja", "GLM-4.7-Flash.jinja",
                           "Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja"}) {
    INFO(name);
    const std::string text = read_template(name);
    const ChatTemplate tmpl(text, "");
    ChatOptions opt;
    opt.tools_json = kTools;
    const std::string prompt = tmpl.apply_json(messages, opt);
    // The assistant's turn as the template wrote it: from its call to the call's end.
    const size_t from = prompt.find("<tool_call>", prompt.find("Weather in Paris?"));
    REQUIRE(from != std::string::npos);
    const size_t to = prompt.find("</tool_call>", from);
    REQUIRE(to != std::string::npos);
    const OutputDelta d = parse(tool_syntax_for_template(text), {prompt.substr(from, to + 12 - from)});
    REQUIRE(d.calls.size() == 1);
    CHECK(d.calls[0] == kCall);
    CHECK(d.content.empty());
  }
}

TEST_CASE("Qwen3-Coder XML: values typed by the schema, text before the call streams, every cut parses alike") {
  const std::string out =
      "I will check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
  check_every_cut(ToolSyntax::Qwen3Coder, out, {"I will check.\n", "", {kCall}});
  // A string-typed value that looks like a number stays a string; an object parses.
  const OutputDelta d =
      parse(ToolSyntax::Qwen3Coder, {"<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
                                     "<parameter=detail>\n{\"wind\": true}\n</parameter>\n<parameter=units>\nC\n"
                                     "</parameter>\n</function>\n</tool_call>"});
  REQUIRE(d.calls.size() == 1);
  CHECK(d.calls[0].arguments == R"({"city":"42","detail":{"wind":true},"units":"C"})");
}

TEST_CASE("GLM: <arg_key>/<arg_value> pairs, two calls in a row, every cut parses alike") {
  const std::string out =
      "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
      "<arg_value>3</arg_value></tool_call><tool_call>get_weather\n<arg_key>city</arg_key>\n"
      "<arg_value>Oslo</arg_value>\n</tool_call>";
  check_every_cut(ToolSyntax::Glm, out, {"", "", {kCall, {"get_weather", R"({"city":"Oslo"})"}}});
}

TEST_CASE("Hermes JSON, with <think> reasoning split out, every cut parses alike") {
  const std::string out =
      "<think>The user wants weather.</think>\n\nLet me look.\n<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
  check_every_cut(ToolSyntax::Hermes, out, {"\n\nLet me look.\n", "The user wants weather.", {kCall}});
  // The prompt opened <think> already (the template's generation prompt ends with it).
  check_every_cut(ToolSyntax::Hermes, "Thinking.</think>Done.", {"Done.", "Thinking.", {}}, true);
}

TEST_CASE("text never waits longer than a possible opening tag, and a malformed call comes back as text") {
  OutputParser p(ToolSyntax::Hermes, kTools);
  CHECK(p.push("Hello <to").content == "Hello ");  // "<to" may open a call
  CHECK(p.push("day> is").content == "<today> is");
  CHECK(p.push(" <tool_call>{\"name\": ").content == " ");
  const OutputDelta end = p.finish();  // cut inside the call
  CHECK(end.calls.empty());
  CHECK(end.content == "<tool_call>{\"name\": ");
  const OutputDelta bad = parse(ToolSyntax::Hermes, {"<tool_call>not json</tool_call> after"});
  CHECK(bad.calls.empty());
  CHECK(bad.content == "<tool_call>not json</tool_call> after");
  const OutputDelta deep = parse(ToolSyntax::Hermes, {"<tool_call>" + std::string(100000, '[') + "</tool_call>"});
  CHECK(deep.calls.empty());  // beyond the nesting limit: text, not a crash
  // Without a tool syntax, <tool_call> is just text.
  CHECK(parse(ToolSyntax::None, {"<tool_call>{}</tool_call>"}).content == "<tool_call>{}</tool_call>");
}

// Tool calls and reasoning parsed from model output (assist/tool_calls.h),
// per family, on each family's real chat template (tests/data/templates):
// the syntax is read off the template, a conversation with a tool call is
// rendered by it and the call parsed back, and outputs are parsed whole and
// cut at every byte as a stream would deliver them.
#include <catch2/catch.hpp>

#include <cstring>

#include "assist/tool_calls.h"
#include "engine/chat.h"
#include "test_data.h"

using namespace moelsp;
using namespace moelsp::assist;

namespace {

const std::string kTools =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
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
    all.pieces.insert(all.pieces.end(), d.pieces.begin(), d.pieces.end());
    all.calls.insert(all.calls.end(), d.calls.begin(), d.calls.end());
  };
  for (const auto& piece : pieces) add(p.push(piece));
  add(p.finish());
  return all;
}

// The calls the streamed pieces make: each Begin's name with its Args joined
// (text and reasoning never inside a call).
std::vector<ToolCall> calls_of(const std::vector<OutputPiece>& pieces) {
  std::vector<ToolCall> calls;
  bool open = false;
  for (const auto& p : pieces) {
    if (p.kind == OutputPiece::Kind::Text || p.kind == OutputPiece::Kind::Reasoning) {
      CHECK(!open);  // never inside a call
    } else if (p.kind == OutputPiece::Kind::Begin) {
      REQUIRE(!open);
      calls.push_back({p.text, ""});
      open = true;
    } else if (p.kind == OutputPiece::Kind::Args) {
      REQUIRE(open);
      calls.back().arguments += p.text;
    } else {
      REQUIRE(open);
      open = false;
    }
  }
  CHECK(!open);
  return calls;
}

struct Want {
  std::string content, reasoning;
  std::vector<ToolCall> calls;
};

// Whole, cut at every byte into two pieces, and one byte at a time: the same,
// and the streamed pieces of the calls make the same calls.
void check_every_cut(ToolSyntax s, const std::string& out, const Want& want, bool in_reasoning = false) {
  const OutputDelta whole = parse(s, {out}, in_reasoning);
  CHECK(whole.content == want.content);
  CHECK(whole.reasoning == want.reasoning);
  CHECK(whole.calls == want.calls);
  CHECK(calls_of(whole.pieces) == want.calls);
  for (size_t i = 0; i <= out.size(); ++i) {
    const OutputDelta cut = parse(s, {out.substr(0, i), out.substr(i)}, in_reasoning);
    INFO("cut at byte " << i);
    REQUIRE(cut.content == want.content);
    REQUIRE(cut.reasoning == want.reasoning);
    REQUIRE(cut.calls == want.calls);
    REQUIRE(calls_of(cut.pieces) == want.calls);
  }
  std::vector<std::string> bytes;
  for (char c : out) bytes.emplace_back(1, c);
  const OutputDelta trickle = parse(s, bytes, in_reasoning);
  CHECK(trickle.content == want.content);
  CHECK(trickle.calls == want.calls);
  CHECK(calls_of(trickle.pieces) == want.calls);
}

const ToolCall kCall{"get_weather", R"({"city":"Paris","days":3})"};

}  // namespace

TEST_CASE("the tool-call syntax is read off each family's real chat template") {
  CHECK(tool_syntax_for_template(read_template("Qwen3-Coder.jinja")) == ToolSyntax::Qwen3Coder);
  CHECK(tool_syntax_for_template(read_template("GLM-4.6.jinja")) == ToolSyntax::Glm);
  CHECK(tool_syntax_for_template(read_template("GLM-4.7-Flash.jinja")) == ToolSyntax::Glm);
  CHECK(tool_syntax_for_template(read_template("Qwen-Qwen2.5-7B-Instruct.jinja")) == ToolSyntax::Hermes);
  CHECK(tool_syntax_for_template(read_template("Qwen-Qwen3-0.6B.jinja")) == ToolSyntax::Hermes);
  CHECK(tool_syntax_for_template(read_template("deepseek-ai-DeepSeek-V3.1.jinja")) == ToolSyntax::DeepSeek);
  CHECK(tool_syntax_for_template(read_template("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja")) ==
        ToolSyntax::DeepSeek);
  CHECK(tool_syntax_for_template(read_template("openai-gpt-oss-120b.jinja")) == ToolSyntax::Harmony);
  CHECK(tool_syntax_for_template(read_template("unsloth-mistral-Devstral-Small-2507.jinja")) == ToolSyntax::Mistral);
  CHECK(tool_syntax_for_template(read_template("Mistral-Small-3.2-24B-Instruct-2506.jinja")) == ToolSyntax::Mistral);
  CHECK(tool_syntax_for_template(read_template("mistralai-Mistral-Nemo-Instruct-2407.jinja")) == ToolSyntax::Mistral);
  CHECK(tool_syntax_for_template(read_template("meta-llama-Llama-3.1-8B-Instruct.jinja")) == ToolSyntax::Llama3);
  CHECK(tool_syntax_for_template(read_template("meta-llama-Llama-3.2-3B-Instruct.jinja")) == ToolSyntax::Llama3);
  CHECK(tool_syntax_for_template(read_template("google-gemma-2-2b-it.jinja")) == ToolSyntax::None);
}

TEST_CASE("a tool call rendered by each family's template parses back into the same call") {
  const std::string messages = R"([{"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
    {"role": "tool", "tool_call_id": "call00001", "content": "sunny"}])";
  // Each template's assistant turn, from where the model's output starts to the call's end.
  struct Family {
    const char* name;
    const char* from;  // the first text of the call as the model writes it
    const char* to;    // just past the call
  };
  const Family families[] = {
      {"Qwen3-Coder.jinja", "<tool_call>", "</tool_call>"},
      {"GLM-4.6.jinja", "<tool_call>", "</tool_call>"},
      {"GLM-4.7-Flash.jinja", "<tool_call>", "</tool_call>"},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", "<tool_call>", "</tool_call>"},
      {"Qwen-Qwen3-0.6B.jinja", "<tool_call>", "</tool_call>"},
      {"deepseek-ai-DeepSeek-V3.1.jinja", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"},
      {"openai-gpt-oss-120b.jinja", " to=functions.", "<|call|>"},
      {"unsloth-mistral-Devstral-Small-2507.jinja", "[TOOL_CALLS]", "}"},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "[TOOL_CALLS]", "}"},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "[TOOL_CALLS]", "]"},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", "{\"name\"", "}}"},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", "{\"name\"", "}}"},
  };
  for (const Family& f : families) {
    INFO(f.name);
    const std::string text = read_template(f.name);
    ChatTokens tokens;
    tokens.eos = "</s>";  // Mistral Nemo's template ends turns with it
    const ChatTemplate tmpl(text, "", tokens);
    ChatOptions opt;
    opt.tools_json = kTools;
    const std::string prompt = tmpl.apply_json(messages, opt);
    const size_t from = prompt.find(f.from, prompt.find("Weather in Paris?"));
    REQUIRE(from != std::string::npos);
    const size_t to = prompt.find(f.to, prompt.find("Paris", from));
    REQUIRE(to != std::string::npos);
    const std::string out = prompt.substr(from, to + std::strlen(f.to) - from);
    INFO(out);
    const ToolSyntax syntax = tool_syntax_for_template(text);
    const OutputDelta d = parse(syntax, {out});
    REQUIRE(d.calls.size() == 1);
    CHECK(d.calls[0] == kCall);
    CHECK(d.content.empty());
    check_every_cut(syntax, out, {"", "", {kCall}});
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

TEST_CASE("gpt-oss harmony: analysis is reasoning, a commentary message to a function a call, final the answer") {
  const std::string out =
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\", \"days\": 3}<|call|>";
  check_every_cut(ToolSyntax::Harmony, out, {"", "Need weather.", {kCall}});
  check_every_cut(ToolSyntax::Harmony,
                  "<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.",
                  {"It is sunny.", "Hm.", {}});
  // The call's end token is the end of generation: a body that ends with the output is complete.
  check_every_cut(ToolSyntax::Harmony,
                  "<|channel|>commentary to=functions.get_weather json<|message|>{\"city\": \"Paris\", \"days\": 3}",
                  {"", "", {kCall}});
  check_every_cut(ToolSyntax::Harmony, "Plain text, no channels.", {"Plain text, no channels.", "", {}});
}

TEST_CASE("Mistral: several calls in one TOOL_CALLS list, Llama 3: a JSON answer that is no call stays text") {
  check_every_cut(ToolSyntax::Mistral,
                  "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}, "
                  "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
                  {"", "", {kCall, {"get_weather", R"({"city":"Oslo"})"}}});
  check_every_cut(ToolSyntax::Mistral, "Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 3}",
                  {"Sure. ", "", {kCall}});
  check_every_cut(ToolSyntax::Llama3,
                  "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
                  {"", "", {kCall}});
  check_every_cut(ToolSyntax::Llama3, "{\"answer\": 42} is the JSON.", {"{\"answer\": 42} is the JSON.", "", {}});
  check_every_cut(ToolSyntax::Llama3, "{\"name\": \"Alice\", \"age\": 3}",
                  {"{\"name\": \"Alice\", \"age\": 3}", "", {}});
  check_every_cut(ToolSyntax::Llama3, "{\"name\": \"Alice\", \"parameters\": {}}",
                  {"{\"name\": \"Alice\", \"parameters\": {}}", "", {}});  // not one of the tools
  check_every_cut(ToolSyntax::Llama3, "It is {sunny}.", {"It is {sunny}.", "", {}});
  OutputParser p(ToolSyntax::Llama3, kTools);
  CHECK(p.push("The weather").content == "The weather");  // text that opens with no '{' is never held
}

TEST_CASE("DeepSeek: text before the calls streams, the group markers are dropped, two calls") {
  const std::string out =
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 3}"
      "<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Oslo\"}<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  check_every_cut(ToolSyntax::DeepSeek, out, {"Checking.", "", {kCall, {"get_weather", R"({"city":"Oslo"})"}}});
}

TEST_CASE("a forced call's opening puts the parser inside the call, for every family") {
  const std::pair<ToolSyntax, std::string> rest[] = {
      {ToolSyntax::Hermes, "{\"city\": \"Paris\", \"days\": 3}}\n</tool_call>"},
      {ToolSyntax::Qwen3Coder,
       "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"},
      {ToolSyntax::Glm,
       "<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>3</arg_value></"
       "tool_call>"},
      {ToolSyntax::DeepSeek, "{\"city\": \"Paris\", \"days\": 3}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolSyntax::Harmony, "{\"city\": \"Paris\", \"days\": 3}<|call|>"},
      {ToolSyntax::Mistral, "{\"city\": \"Paris\", \"days\": 3}"},
      {ToolSyntax::Llama3, "{\"city\": \"Paris\", \"days\": 3}}"},
  };
  for (const auto& [syntax, tail] : rest) {
    INFO(to_string(syntax));
    const std::string opening = call_opening(syntax, "get_weather");
    const OutputDelta d = parse(syntax, {opening, tail});
    REQUIRE(d.calls.size() == 1);
    CHECK(d.calls[0] == kCall);
    CHECK(d.content.empty());
  }
}

TEST_CASE("Qwen3-Coder and GLM: a call's arguments stream a parameter at a time, as the parameters close") {
  OutputParser p(ToolSyntax::Qwen3Coder, kTools);
  OutputDelta d = p.push("<tool_call>\n<function=get_weather>\n<parameter=city>\nPar");
  REQUIRE(d.pieces.size() == 1);
  CHECK(d.pieces[0] == OutputPiece{OutputPiece::Kind::Begin, "get_weather"});  // the name, before any argument
  d = p.push("is\n</parameter>\n<parameter=days>\n3");
  REQUIRE(d.pieces.size() == 1);
  CHECK(d.pieces[0] == OutputPiece{OutputPiece::Kind::Args, "{\"city\":\"Paris\""});
  d = p.push("\n</parameter>\n</function>\n</tool_call>Done.");  // the call's end and text after it, in one piece
  REQUIRE(d.pieces.size() == 4);
  CHECK(d.pieces[0].text == ",\"days\":3");
  CHECK(d.pieces[1].text == "}");
  CHECK(d.pieces[2].kind == OutputPiece::Kind::End);
  CHECK(d.pieces[3] == OutputPiece{OutputPiece::Kind::Text, "Done."});  // after the call, as written
  REQUIRE(d.calls.size() == 1);
  CHECK(d.calls[0] == kCall);
  // Cut off inside the call (the token limit): a call with what it has, not text.
  OutputParser cut(ToolSyntax::Glm, kTools);
  cut.push("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>da");
  const OutputDelta end = cut.finish();
  REQUIRE(end.calls.size() == 1);
  CHECK(end.calls[0] == ToolCall{"get_weather", R"({"city":"Paris"})"});
  CHECK(end.content.empty());
}

TEST_CASE("a Jinja file as the chat template (--chat-template FILE.jinja): rendered with tools, its syntax read") {
  const std::string path = test::data_path("templates/Qwen3-Coder.jinja");
  const ChatTemplate tmpl("", path);  // a GGUF without a template of its own
  ChatOptions opt;
  opt.tools_json = kTools;
  const std::string prompt = tmpl.apply_json(R"([{"role": "user", "content": "Weather?"}])", opt);
  CHECK(prompt.find("get_weather") != std::string::npos);
  CHECK(prompt.find("<function=") != std::string::npos);
  CHECK(tool_syntax_for_template(read_template_file(path)) == ToolSyntax::Qwen3Coder);
  CHECK_THROWS_WITH(ChatTemplate("", "/no/such/template.jinja"), Catch::Contains("/no/such/template.jinja"));
}

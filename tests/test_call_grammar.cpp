// Tool-call grammars (assist/call_grammar.h) against each family's real
// chat template: the call the template renders is a sentence of the
// family's grammar, a forced call's opening is a prefix of it, and calls of
// tools not offered or with arguments outside the schema are not.
#include <catch2/catch.hpp>

#include <cstring>

#include "assist/call_grammar.h"
#include "engine/chat.h"
#include "engine/grammar.h"
#include "test_data.h"

using namespace moelsp;
using namespace moelsp::assist;

namespace {

const std::string kTools =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {
  "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
  "units": {"type": ["string", "null"]}, "detail": {"type": "object"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "read", "description": "Read a file", "parameters": {"type": "object",
  "properties": {"path": {"type": "string"}}, "required": ["path"]}}}])";

std::string read_template(const std::string& name) { return test::read_file(test::data_path("templates/" + name)); }

struct Family {
  const char* name;
  const char* from;  // the first text of the call as the model writes it
  const char* to;    // just past the call
};
const Family kFamilies[] = {
    {"Qwen3-Coder.jinja", "<tool_call>", "</tool_call>"},
    {"GLM-4.6.jinja", "<tool_call>", "</tool_call>"},
    {"GLM-4.7-Flash.jinja", "<tool_call>", "</tool_call>"},
    {"Qwen-Qwen2.5-7B-Instruct.jinja", "<tool_call>", "</tool_call>"},
    {"Qwen-Qwen3-0.6B.jinja", "<tool_call>", "</tool_call>"},
    {"deepseek-ai-DeepSeek-V3.1.jinja", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"},
    {"openai-gpt-oss-120b.jinja", "to=functions.", "}"},
    {"unsloth-mistral-Devstral-Small-2507.jinja", "[TOOL_CALLS]", "}"},
    {"Mistral-Small-3.2-24B-Instruct-2506.jinja", "[TOOL_CALLS]", "}"},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", "[TOOL_CALLS]", "]"},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", "{\"name\"", "}}"},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", "{\"name\"", "}}"},
};

// The template's rendering of an assistant turn that calls `args`.
std::string rendered_call(const Family& f, const std::string& args) {
  const std::string messages = R"([{"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call00001", "type": "function",
      "function": {"name": "get_weather", "arguments": )" +
                               args + R"(}}]},
    {"role": "tool", "tool_call_id": "call00001", "content": "sunny"}])";
  ChatTokens tokens;
  tokens.eos = "</s>";
  const ChatTemplate tmpl(read_template(f.name), "", tokens);
  ChatOptions opt;
  opt.tools_json = kTools;
  const std::string prompt = tmpl.apply_json(messages, opt);
  const size_t from = prompt.find(f.from, prompt.find("Weather in Paris?"));
  REQUIRE(from != std::string::npos);
  const size_t to = prompt.find(f.to, prompt.find("Paris", from));
  REQUIRE(to != std::string::npos);
  return prompt.substr(from, to + std::strlen(f.to) - from);
}

bool sentence(const std::string& gbnf, const std::string& text) {
  GrammarMatcher m(compile_gbnf(gbnf));
  return m.accept(text) && m.accepting();
}

}  // namespace

TEST_CASE("each family's rendered call is a sentence of its call grammar, from the trigger on") {
  for (const Family& f : kFamilies) {
    INFO(f.name);
    const ToolSyntax syntax = tool_syntax_for_template(read_template(f.name));
    const auto g = call_grammar({syntax, kTools, "", true});
    REQUIRE(g);
    const std::string out = rendered_call(f, R"({"city": "Paris", "days": 3})");
    INFO(out << "\n" << g->gbnf);
    CHECK(std::find_if(g->triggers.begin(), g->triggers.end(),
                       [&](const std::string& t) { return out.rfind(t, 0) == 0; }) != g->triggers.end());
    CHECK(sentence(g->gbnf, out));
    // A forced call's opening (any tool, or this one) is a prefix of it.
    for (const std::string name : {"", "get_weather"}) {
      std::string opening = call_opening(syntax, name);
      if (syntax == ToolSyntax::Harmony) opening = opening.substr(std::strlen("<|channel|>commentary "));
      CHECK(GrammarMatcher(compile_gbnf(g->gbnf)).accept(opening));
    }
    // The arguments are the schema's: a wrong type, a tool not offered, or a
    // named tool_choice for another tool are not sentences.
    CHECK_FALSE(sentence(g->gbnf, rendered_call(f, R"({"city": "Paris", "days": "three"})")));
    CHECK_FALSE(sentence(call_grammar({syntax, kTools, "read", true})->gbnf, out));
  }
  CHECK_FALSE(call_grammar({ToolSyntax::Hermes, kTools, "nope", true}));
  CHECK_FALSE(call_grammar({ToolSyntax::None, kTools, "", true}));
}

TEST_CASE("a response_format grammar leaves a thinking model room to reason first") {
  const std::string json = R"(root ::= "{" [a-z]* "}")";
  const auto answer = [&](ToolSyntax s, bool opened, const std::string& text) {
    GrammarMatcher m(compile_gbnf(with_reasoning(s, json, opened), "answer-root"));
    return m.accept(text) && m.accepting();
  };
  CHECK(answer(ToolSyntax::Qwen3Coder, false, "{ok}"));
  CHECK(answer(ToolSyntax::Qwen3Coder, false, "<think>\nThe user wants {x}.\n</think>\n\n{ok}"));
  CHECK_FALSE(answer(ToolSyntax::Qwen3Coder, false, "Sure! {ok}"));      // prose is not reasoning
  CHECK(answer(ToolSyntax::Hermes, true, "\nthinking…</think>\n{ok}"));  // the prompt opened it
  CHECK_FALSE(answer(ToolSyntax::Hermes, true, "{ok}"));
  CHECK(answer(ToolSyntax::Llama3, false, "{ok}"));  // a family that does not think this way: the answer alone
  CHECK_FALSE(answer(ToolSyntax::Llama3, false, "<think>x</think>{ok}"));
}

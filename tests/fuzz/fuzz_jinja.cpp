// libFuzzer target: the Jinja chat-template interpreter (jinja/) through
// ChatTemplate, as a model's tokenizer.chat_template is run. The input is the
// template text, then optionally a NUL and the render's settings:
//
//   TEMPLATE [ \0 FLAGS MESSAGES_JSON [ \0 TOOLS_JSON ] ]
//
// FLAGS (one byte): bit 0 add_generation_prompt, bits 1-2 enable_thinking
// (unset, true, false), bit 3 tools (TOOLS_JSON, or a fixed tool when none is
// given), bit 4 extra variables (reasoning_effort), bit 5 bos/eos texts, bit 6
// the tokenizer adds BOS. Without settings the flags are 0x2b
// (add_generation_prompt, thinking on, tools, bos/eos); an empty
// MESSAGES_JSON is a fixed conversation with a tool call, its result,
// reasoning and content parts. Each input renders apply() on a small
// role/content conversation and apply_json() on the messages, with a fixed
// clock for strftime_now.
//
// A template that does not parse or fails while running must throw
// ChatTemplateError; a crash, hang, leak, sanitizer report or any other
// exception (the callers catch ChatTemplateError only) is a finding.
//
// Inputs over 4 KiB are ignored, to keep executions fast (the smaller real
// templates fit). The cap does not bound a render's time: the interpreter
// stops a render after 10M loop iterations and calls, about 4 s in a release
// build but over a minute under ASan + UBSan, past the 10-second timeout,
// and a one-line template reaches that (two nested range() loops). So the
// seeds hold no large loops, or the fuzzer would mutate them into such.
//
// Seeds (tests/fuzz/corpus/fuzz_jinja): five of the real templates in
// tests/data/templates (see its README for their source), snippets for
// loops, macros, namespace, set blocks, filters, tests, string methods and
// errors, and a few inputs with settings after the NUL.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <typeinfo>
#include <vector>

#include "engine/chat.h"

namespace {

constexpr size_t kMaxInput = 4096;

const char* const kMessages = R"([
  {"role": "system", "content": "You are a concise assistant."},
  {"role": "user", "content": "What is the weather in Paris?"},
  {"role": "assistant", "content": "", "reasoning_content": "Call the tool.",
   "tool_calls": [{"id": "call_1", "type": "function",
                   "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
  {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 \u00b0C"},
  {"role": "assistant", "content": "It is 18 \u00b0C."},
  {"role": "user", "content": [{"type": "text", "text": "Thanks!"}]}
])";

const char* const kTools = R"([{"type": "function", "function": {"name": "get_weather",
  "description": "Weather in a city.", "parameters": {"type": "object",
  "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

void render(const moelsp::ChatTemplate& t, const std::vector<moelsp::ChatMessage>& messages,
            const std::string& messages_json, const moelsp::ChatOptions& opt) {
  try {
    (void)t.apply(messages, opt);
  } catch (const moelsp::ChatTemplateError&) {
  }
  try {
    (void)t.apply_json(messages_json, opt);
  } catch (const moelsp::ChatTemplateError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moelsp;
  if (size > kMaxInput) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string jinja(in.substr(0, nul));
  uint8_t flags = 0x2b;  // add_generation_prompt, thinking on, tools, bos/eos
  std::string messages_json = kMessages, tools_json;
  if (nul != std::string_view::npos && nul + 1 < in.size()) {
    flags = uint8_t(in[nul + 1]);
    const std::string_view rest = in.substr(nul + 2);
    const size_t nul2 = rest.find('\0');
    if (!rest.substr(0, nul2).empty()) messages_json = std::string(rest.substr(0, nul2));
    if (nul2 != std::string_view::npos) tools_json = std::string(rest.substr(nul2 + 1));
  }

  ChatOptions opt;
  opt.now = 1700000000;  // 2023-11-14 22:13:20 UTC, for strftime_now
  opt.add_generation_prompt = flags & 1;
  if ((flags >> 1 & 3) == 1) opt.enable_thinking = true;
  if ((flags >> 1 & 3) == 2) opt.enable_thinking = false;
  if (flags & 8) opt.tools_json = tools_json.empty() ? kTools : tools_json;
  if (flags & 16) opt.extra_json = R"({"reasoning_effort": "high", "builtin_tools": ["browser"]})";
  ChatTokens tokens;
  if (flags & 32) tokens = {.bos = "<s>", .eos = "</s>", .tokenizer_adds_bos = bool(flags & 64)};

  const std::vector<ChatMessage> messages{
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello! \xe2\x9c\x93"}, {"user", "Reverse 'abc'."}};
  try {
    const ChatTemplate t(jinja, "", tokens);
    render(t, messages, messages_json, opt);
  } catch (const ChatTemplateError&) {
  } catch (const std::exception& e) {
    // The callers (chat, the HTTP API) catch ChatTemplateError only: any
    // other exception escaping is a finding too.
    std::fprintf(stderr, "fuzz_jinja: %s escaped: %s\n", typeid(e).name(), e.what());
    std::abort();
  }
  return 0;
}

// Chat templates. A model's GGUF carries its own Jinja template
// (tokenizer.chat_template); moelsp runs it with an interpreter that behaves
// as Python's Jinja2 in the environment HuggingFace transformers uses
// (docs/chat-templates.md), with the messages, add_generation_prompt, tools
// and enable_thinking. Six templates are also built in by name (chatml,
// deepseek2, deepseek3, mistral, llama2, chatglm4); they are used only when
// the user chooses one (--chat-template, setting chat.template).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace moelsp {

namespace gguf {
class File;
}
class Tokenizer;

struct ChatMessage {
  std::string role;  // system, user, assistant, tool
  std::string content;
};

class ChatTemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a template is rendered with besides the messages.
// The text of a chat template file (`--chat-template FILE.jinja`); throws
// ChatTemplateError naming the file when it cannot be read.
std::string read_template_file(const std::string& path);

struct ChatOptions {
  bool add_generation_prompt = true;    // end with the assistant's turn opener
  std::string tools_json;               // a JSON array of tool schemas; empty: none (tools is None)
  std::optional<bool> enable_thinking;  // passed to the template only when set
  std::string extra_json;               // a JSON object of further variables (e.g. reasoning_effort); empty: none
  std::optional<int64_t> now;           // strftime_now's time (seconds since 1970, shown in UTC); unset: local now
};

// The model's special-token texts, as the template sees them (bos_token,
// eos_token; empty: not defined).
struct ChatTokens {
  std::string bos, eos;
  // The tokenizer adds BOS itself: a BOS text the template starts the prompt
  // with is dropped, so the prompt does not get two (as llama.cpp does).
  bool tokenizer_adds_bos = false;
};

class ChatTemplate {
 public:
  // `override_name` set: that built-in template (throws ChatTemplateError
  // for an unknown name). Otherwise the model's Jinja text `jinja`: a
  // missing template, or one that does not parse, throws ChatTemplateError
  // naming the problem (with the template line) and how to choose a
  // built-in one.
  ChatTemplate(const std::string& jinja, const std::string& override_name, ChatTokens tokens = {});
  // The model's template (tokenizer.chat_template) with its BOS/EOS texts.
  static ChatTemplate for_model(const gguf::File& file, const Tokenizer& tok, const std::string& override_name);
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);

  // "the model's template" or "built-in template 'chatml'".
  std::string describe() const;

  // The prompt for `messages`; special-token text in it is meant to be
  // parsed as special. Throws ChatTemplateError (naming the template line)
  // when the template fails, e.g. by raise_exception.
  std::string apply(const std::vector<ChatMessage>& messages, const ChatOptions& opt = {}) const;
  // The same for messages given as a JSON array of objects carrying any
  // fields the template reads (tool_calls, reasoning_content, tool_call_id,
  // name, content as a list of parts, …). Built-in templates use only role
  // and content.
  std::string apply_json(const std::string& messages_json, const ChatOptions& opt = {}) const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

// The built-in templates: chatml (Qwen), deepseek2 (DeepSeek-V2 /
// Coder-V2), deepseek3 (DeepSeek-V3 family), mistral (Mixtral instruct,
// [INST] … [/INST]), llama2, chatglm4 (GLM-4 family).
const std::vector<std::string>& chat_template_names();

// A built-in template applied to role/content messages.
std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& messages,
                                bool add_assistant = true);

}  // namespace moelsp

// Chat templates. We implement the templates of the supported architectures'
// common models by name and recognise them from tokenizer.chat_template (the
// Jinja text) by their signatures; an unrecognised template is an error that
// names the --chat-template override and the known names.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace moelsp {

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

class ChatTemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Known names: chatml (Qwen), deepseek2 (DeepSeek-V2 / Coder-V2), deepseek3
// (DeepSeek-V3 family), mistral (Mixtral instruct, [INST] … [/INST]), llama2,
// chatglm4 (GLM-4 family).
const std::vector<std::string>& chat_template_names();

// Picks the template: `override_name` if set, else detected from `jinja`.
// Throws ChatTemplateError when neither works.
std::string resolve_chat_template(const std::string& jinja, const std::string& override_name);

// The prompt text for `messages`, ending with the assistant's turn opener
// when `add_assistant`. Special-token text in it is meant to be parsed as
// special (encode with parse_special).
std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& messages,
                                bool add_assistant = true);

}  // namespace moelsp

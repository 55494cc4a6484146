#include <algorithm>

#include <fmt/format.h>

#include "engine/chat.h"

namespace moelsp {

namespace {
const std::string kEos =
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";     // <｜end▁of▁sentence｜>
const std::string kUser3 = "<\xef\xbd\x9cUser\xef\xbd\x9c>";  // <｜User｜>
const std::string kAssistant3 =
    "<\xef\xbd\x9c"
    "Assistant\xef\xbd\x9c>";  // <｜Assistant｜>
}  // namespace

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names{"chatml", "deepseek2", "deepseek3", "mistral", "llama2", "chatglm4"};
  return names;
}

std::string resolve_chat_template(const std::string& jinja, const std::string& override_name) {
  const auto& names = chat_template_names();
  const std::string known = fmt::format("{}", fmt::join(names, ", "));
  if (!override_name.empty()) {
    if (std::find(names.begin(), names.end(), override_name) == names.end())
      throw ChatTemplateError(fmt::format("unknown chat template '{}' (known: {})", override_name, known));
    return override_name;
  }
  const auto has = [&](const std::string& s) { return jinja.find(s) != std::string::npos; };
  if (jinja.empty())
    throw ChatTemplateError(
        fmt::format("the model has no chat template (tokenizer.chat_template); "
                    "choose one with --chat-template ({})",
                    known));
  if (has("<|im_start|>")) return "chatml";
  if (has("'Assistant: ' + message['content'] + eos_token")) return "deepseek2";
  if (has(kAssistant3) && has(kUser3)) return "deepseek3";
  if (has("[gMASK]<sop>")) return "chatglm4";
  if (has("[INST]")) return has("<<SYS>>") ? "llama2" : "mistral";
  throw ChatTemplateError(
      fmt::format("the model's chat template is not one moelsp knows; "
                  "choose one with --chat-template ({})",
                  known));
}

std::string apply_chat_template(const std::string& name, const std::vector<ChatMessage>& msgs, bool add_assistant) {
  std::string s;
  if (name == "chatml") {
    for (const auto& m : msgs) s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_assistant) s += "<|im_start|>assistant\n";
  } else if (name == "deepseek2") {
    for (const auto& m : msgs) {
      if (m.role == "system") s += m.content + "\n\n";
      else if (m.role == "user") s += "User: " + m.content + "\n\n";
      else s += "Assistant: " + m.content + kEos;
    }
    if (add_assistant) s += "Assistant:";
  } else if (name == "deepseek3") {
    for (const auto& m : msgs) {
      if (m.role == "system") s += m.content + "\n\n";
      else if (m.role == "user") s += kUser3 + m.content;
      else s += kAssistant3 + m.content + kEos;
    }
    if (add_assistant) s += kAssistant3;
  } else if (name == "mistral" || name == "llama2") {
    // Mixtral-Instruct: [INST] {system}\n\n{user} [/INST] {assistant}</s>
    bool in_turn = false;
    for (const auto& m : msgs) {
      if (!in_turn) {
        s += "[INST] ";
        in_turn = true;
      }
      if (m.role == "system") s += name == "llama2" ? "<<SYS>>\n" + m.content + "\n<</SYS>>\n\n" : m.content + "\n\n";
      else if (m.role == "user") s += m.content + " [/INST]";
      else {
        s += " " + m.content + "</s>";
        in_turn = false;
      }
    }
  } else if (name == "chatglm4") {
    s += "[gMASK]<sop>";
    for (const auto& m : msgs) s += "<|" + m.role + "|>\n" + m.content;
    if (add_assistant) s += "<|assistant|>\n";
  } else {
    throw ChatTemplateError(fmt::format("unknown chat template '{}'", name));
  }
  return s;
}

}  // namespace moelsp

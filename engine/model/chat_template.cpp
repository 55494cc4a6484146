// Chat prompts: the model's own Jinja template run by jinja/, or one of
// the built-in templates when the user names it.
#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>
#include <unordered_map>

#include <fmt/format.h>

#include "engine/chat.h"
#include "engine/gguf.h"
#include "engine/tokenizer.h"
#include "jinja/jinja.h"

namespace moelsp {

namespace {
const std::string kEos =
    "<\xef\xbd\x9c"
    "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";     // <｜end▁of▁sentence｜>
const std::string kUser3 = "<\xef\xbd\x9cUser\xef\xbd\x9c>";  // <｜User｜>
const std::string kAssistant3 =
    "<\xef\xbd\x9c"
    "Assistant\xef\xbd\x9c>";  // <｜Assistant｜>

std::string known_names() { return fmt::format("{}", fmt::join(chat_template_names(), ", ")); }

}  // namespace

std::string read_template_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw ChatTemplateError(fmt::format("the chat template file '{}' cannot be read", path));
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (text.size() > (1 << 20)) throw ChatTemplateError(fmt::format("the chat template file '{}' is over 1 MiB", path));
  return text;
}

namespace {
std::string how_to_choose() {
  return fmt::format(
      "choose a built-in one with --chat-template or the setting chat.template ({}), or a Jinja file (FILE.jinja)",
      known_names());
}

// Messages given as JSON, reduced to what the built-in templates read: the
// role and the content (text parts of a list joined).
std::vector<ChatMessage> role_content(const jinja::Value& messages) {
  std::vector<ChatMessage> out;
  for (const jinja::Value& m : jinja::iterate(messages)) {
    if (!m.is_mapping()) throw ChatTemplateError("each message must be a JSON object");
    const jinja::Value* role = m.dict().find_str("role");
    const jinja::Value* content = m.dict().find_str("content");
    ChatMessage msg{role ? jinja::to_str(*role) : "", ""};
    if (content && content->is_list()) {
      for (const jinja::Value& part : content->list().items)
        if (part.is_mapping())
          if (const jinja::Value* text = part.dict().find_str("text")) msg.content += jinja::to_str(*text);
    } else if (content && !content->is_none()) {
      msg.content = jinja::to_str(*content);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

jinja::Value parse_json(const std::string& text, const char* what) {
  try {
    return jinja::from_json(text);
  } catch (const jinja::Error& e) {
    throw ChatTemplateError(fmt::format("{}: {}", what, e.what()));
  }
}
}  // namespace

struct ChatTemplate::Impl {
  std::string builtin;                   // the built-in template's name, or empty
  std::optional<jinja::Template> model;  // the model's template
  ChatTokens tokens;

  std::string render(const jinja::Value& messages, const ChatOptions& opt) const;
};

std::string ChatTemplate::Impl::render(const jinja::Value& messages, const ChatOptions& opt) const {
  if (!builtin.empty()) return apply_chat_template(builtin, role_content(messages), opt.add_generation_prompt);
  // The variables HuggingFace's apply_chat_template passes: messages, tools
  // (None without tools), documents, add_generation_prompt, the special
  // tokens, then the caller's extras.
  std::unordered_map<std::string, jinja::Value> vars;
  vars["messages"] = messages;
  vars["tools"] = opt.tools_json.empty() ? jinja::Value::none() : parse_json(opt.tools_json, "tools");
  vars["documents"] = jinja::Value::none();
  vars["add_generation_prompt"] = jinja::Value(opt.add_generation_prompt);
  if (!tokens.bos.empty()) vars["bos_token"] = jinja::Value(tokens.bos);
  if (!tokens.eos.empty()) vars["eos_token"] = jinja::Value(tokens.eos);
  if (opt.enable_thinking) vars["enable_thinking"] = jinja::Value(*opt.enable_thinking);
  if (!opt.extra_json.empty()) {
    const jinja::Value extra = parse_json(opt.extra_json, "template variables");
    if (!extra.is_mapping()) throw ChatTemplateError("template variables must be a JSON object");
    for (const auto& [k, v] : extra.dict().items) vars[jinja::to_str(k)] = v;
  }
  std::string out;
  try {
    out = model->render(std::move(vars), jinja::Clock{opt.now});
  } catch (const jinja::Error& e) {
    throw ChatTemplateError(fmt::format("chat template line {}: {}", e.line, e.what()));
  }
  if (tokens.tokenizer_adds_bos && !tokens.bos.empty() && out.starts_with(tokens.bos)) out.erase(0, tokens.bos.size());
  return out;
}

ChatTemplate::ChatTemplate(const std::string& jinja, const std::string& override_name, ChatTokens tokens) {
  auto impl = std::make_shared<Impl>();
  impl->tokens = std::move(tokens);
  const auto& names = chat_template_names();
  std::string text = jinja;
  if (override_name.ends_with(".jinja")) {
    // A Jinja file in place of the model's own (llama-server's
    // --chat-template-file): a GGUF without a template, or a fixed one.
    text = read_template_file(override_name);
  } else if (!override_name.empty()) {
    if (std::find(names.begin(), names.end(), override_name) == names.end())
      throw ChatTemplateError(
          fmt::format("unknown chat template '{}' (known: {}, or a FILE.jinja)", override_name, known_names()));
    impl->builtin = override_name;
  }
  if (!impl->builtin.empty()) {
  } else if (text.empty()) {
    throw ChatTemplateError(
        fmt::format("the model has no chat template (tokenizer.chat_template); {}", how_to_choose()));
  } else {
    try {
      impl->model.emplace(text);
    } catch (const jinja::Error& e) {
      throw ChatTemplateError(fmt::format("the model's chat template cannot be used: chat template line {}: {}; {}",
                                          e.line, e.what(), how_to_choose()));
    }
  }
  impl_ = std::move(impl);
}

ChatTemplate ChatTemplate::for_model(const gguf::File& file, const Tokenizer& tok, const std::string& override_name) {
  const SpecialTokens& sp = tok.special();
  ChatTokens tokens;
  if (sp.bos != kNoToken) tokens.bos = tok.piece(sp.bos, true);
  if (sp.eos != kNoToken) tokens.eos = tok.piece(sp.eos, true);
  tokens.tokenizer_adds_bos = sp.add_bos;
  return ChatTemplate(file.get_or<std::string>("tokenizer.chat_template", ""), override_name, std::move(tokens));
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(const ChatTemplate&) = default;
ChatTemplate& ChatTemplate::operator=(const ChatTemplate&) = default;

std::string ChatTemplate::describe() const {
  return impl_->builtin.empty() ? "the model's template" : fmt::format("built-in template '{}'", impl_->builtin);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, const ChatOptions& opt) const {
  if (!impl_->builtin.empty()) return apply_chat_template(impl_->builtin, messages, opt.add_generation_prompt);
  std::vector<jinja::Value> list;
  for (const ChatMessage& m : messages)
    list.push_back(jinja::Value::dict(
        {{jinja::Value("role"), jinja::Value(m.role)}, {jinja::Value("content"), jinja::Value(m.content)}}));
  return impl_->render(jinja::Value::list(std::move(list)), opt);
}

std::string ChatTemplate::apply_json(const std::string& messages_json, const ChatOptions& opt) const {
  const jinja::Value messages = parse_json(messages_json, "messages");
  if (!messages.is_list()) throw ChatTemplateError("messages must be a JSON array");
  return impl_->render(messages, opt);
}

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names{"chatml", "deepseek2", "deepseek3", "mistral", "llama2", "chatglm4"};
  return names;
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

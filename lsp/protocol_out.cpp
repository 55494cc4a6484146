// What moelsp writes, as the protocol spells it: the JSON-RPC envelope, and
// results and notifications from their structs.
#include "protocol.h"

namespace moelsp::lsp {

namespace jsonrpc {
json response(const json& id, json result) { return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}}; }
json error(const json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}
json notification(const std::string& method, json params) {
  return {{"jsonrpc", "2.0"}, {"method", method}, {"params", std::move(params)}};
}
json request(const json& id, const std::string& method, json params) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}
}  // namespace jsonrpc

json to_json(const CompletionOptions& o) {
  return {{"resolveProvider", o.resolve_provider}, {"triggerCharacters", o.trigger_characters}};
}

json to_json(const InitializeResult& r) {
  const ServerCapabilities& c = r.capabilities;
  json sc = {
      {"textDocumentSync", {{"openClose", true}, {"change", int(c.change)}, {"save", {{"includeText", false}}}}}};
  if (c.completion) sc["completionProvider"] = to_json(*c.completion);
  if (c.inline_completion) sc["inlineCompletionProvider"] = json::object();
  if (c.commands) sc["executeCommandProvider"] = {{"commands", *c.commands}};
  sc["workspace"] = {{"workspaceFolders", {{"supported", true}, {"changeNotifications", true}}}};
  return {{"capabilities", sc}, {"serverInfo", {{"name", r.name}, {"version", r.version}}}};
}

json to_json(const InlineCompletionList& l) {
  json items = json::array();
  for (const InlineCompletionItem& i : l.items) {
    json j = {{"insertText", i.insert_text}, {"range", to_json(i.range)}};
    if (i.command) j["command"] = {{"title", i.command->title}, {"command", i.command->command}};
    items.push_back(std::move(j));
  }
  return {{"items", std::move(items)}};
}

json to_json(const CompletionList& l) {
  json items = json::array();
  for (const CompletionItem& i : l.items)
    items.push_back({{"label", i.label},
                     {"kind", int(i.kind)},
                     {"detail", i.detail},
                     {"filterText", i.filter_text},
                     {"insertText", i.insert_text},
                     {"textEdit", {{"range", to_json(i.text_edit.range)}, {"newText", i.text_edit.new_text}}}});
  return {{"isIncomplete", l.is_incomplete}, {"items", std::move(items)}};
}

json to_json(const ChatResult& r) {
  json j{{"text", r.text}, {"finishReason", r.finish_reason}, {"tokensPerSecond", r.tokens_per_second}};
  if (r.reasoning) j["reasoning"] = *r.reasoning;
  if (r.question) j["question"] = *r.question;
  return j;
}

json to_json(const SnoozeResult& r) { return {{"snoozeLeftMs", r.snooze_left_ms}}; }

json to_json(const MessageParams& p) { return {{"type", int(p.type)}, {"message", p.message}}; }

json to_json(const WorkDoneProgressBegin& p) {
  json j = {{"kind", "begin"}, {"title", p.title}};
  if (p.message) j["message"] = *p.message;
  if (p.cancellable) j["cancellable"] = true;
  if (p.percentage) j["percentage"] = *p.percentage;
  return j;
}
json to_json(const WorkDoneProgressReport& p) {
  json j = {{"kind", "report"}, {"message", p.message}};
  if (p.percentage) j["percentage"] = *p.percentage;
  return j;
}
json to_json(const WorkDoneProgressEnd& p) {
  json j = {{"kind", "end"}};
  if (p.message) j["message"] = *p.message;
  return j;
}
json to_json(const PartialChatResult& p) { return {{"text", p.text}}; }

json to_json(const RegistrationParams& p) {
  json regs = json::array();
  for (const Registration& r : p.registrations) {
    json j = {{"id", r.id}, {"method", r.method}};
    if (!r.register_options.is_null()) j["registerOptions"] = r.register_options;
    regs.push_back(std::move(j));
  }
  return {{"registrations", std::move(regs)}};
}

}  // namespace moelsp::lsp

// Chat: workspace/executeCommand (moelsp.chat, moelsp.explain, moelsp.fix,
// moelsp.document) and the moelsp/chat request. The answer streams as
// $/progress: WorkDoneProgress reports (message = the new text) on the
// request's workDoneToken, and {"text": new text} on its partialResultToken.
// The final result is {"text", "finishReason"}.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "server_impl.h"

namespace moelsp::lsp {

namespace {

std::string selection(const Document& d, const json& range) {
  if (!range.is_object()) return d.text;
  const size_t a = offset_of(d.text, {range.at("start").at("line"), range.at("start").at("character")});
  const size_t b = offset_of(d.text, {range.at("end").at("line"), range.at("end").at("character")});
  return a < b ? d.text.substr(a, b - a) : d.text;
}

}  // namespace

const std::vector<std::string>& Server::Impl::commands() {
  static const std::vector<std::string> list{"moelsp.accepted", "moelsp.chat", "moelsp.explain", "moelsp.fix",
                                             "moelsp.document"};
  return list;
}

void Server::Impl::on_execute_command(const json& id, const json& params) {
  const std::string command = params.at("command");
  if (std::find(commands().begin(), commands().end(), command) == commands().end())
    return reply_error(id, kInvalidParams, "unknown command " + command);
  if (command == "moelsp.accepted") {  // the inline item's command: the user took the suggestion
    on_did_accept(params);
    return reply(id, nullptr);
  }
  const json args = params.contains("arguments") && params["arguments"].is_array() && !params["arguments"].empty()
                        ? params["arguments"][0]
                        : json::object();
  chat(id, command, args, params.value("workDoneToken", json()), json());
}

void Server::Impl::on_chat(const json& id, const json& params) {
  chat(id, "moelsp.chat", params, params.value("workDoneToken", json()), params.value("partialResultToken", json()));
}

void Server::Impl::chat(const json& id, const std::string& command, const json& args, const json& work_token,
                        const json& partial_token) {
  // The question (validation errors are answered here, as invalid params).
  assist::ChatQuery q;
  q.kind = command == "moelsp.explain" ? assist::ChatKind::Explain
           : command == "moelsp.fix"   ? assist::ChatKind::Fix
           : command == "moelsp.document" ? assist::ChatKind::Document
                                          : assist::ChatKind::Chat;
  if (args.contains("uri")) {
    const auto doc = docs.get(args.at("uri"));
    if (!doc) return reply_error(id, kInvalidParams, "document not open: " + args.at("uri").get<std::string>());
    q.code = selection(*doc, args.value("range", json()));
    q.language = doc->language;
  }
  if (q.kind == assist::ChatKind::Chat) {
    if (!args.contains("messages") || !args["messages"].is_array() || args["messages"].empty())
      return reply_error(id, kInvalidParams, "moelsp.chat needs messages: [{role, content}, ...]");
    for (const auto& m : args["messages"]) q.messages.push_back({m.at("role"), m.at("content")});
  } else if (q.code.empty()) {
    return reply_error(id, kInvalidParams, command + " needs uri (and range) of the code");
  }
  auto p = track(id);
  const Settings s = effective();
  q.max_tokens = *s.chat_max_tokens;
  q.template_override = s.chat_template.value_or("");
  enqueue([this, id, p, q, work_token, partial_token] {
    progress(work_token, {{"kind", "begin"}, {"title", "moelsp chat"}, {"cancellable", true}});
    const auto on_text = [this, work_token, partial_token](const std::string& text) {
      progress(work_token, {{"kind", "report"}, {"message", text}});
      progress(partial_token, {{"text", text}});
    };
    const assist::ChatAnswer a = service.chat(q, on_text, *p);
    progress(work_token, {{"kind", "end"}});
    untrack(id);
    if (p->cancelled() || a.reason == FinishReason::Cancelled) return reply_error(id, kRequestCancelled, "request cancelled");
    if (a.reason == FinishReason::Error) return reply_error(id, kInternalError, a.error);
    reply(id, {{"text", a.text}, {"finishReason", to_string(a.reason)}, {"tokensPerSecond", a.tokens_per_second}});
  });
}

}  // namespace moelsp::lsp

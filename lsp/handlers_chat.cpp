// Chat: workspace/executeCommand (moelsp.chat, moelsp.explain, moelsp.fix,
// moelsp.document) and the moelsp/chat request. The answer streams as
// $/progress: WorkDoneProgress reports (message = the new text) on the
// request's workDoneToken, and {"text": new text} on its partialResultToken.
// The final result is {"text", "finishReason"}.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "assist/exclude.h"
#include "server_impl.h"

namespace moelsp::lsp {

namespace {

std::string selection(const Document& d, const std::optional<Range>& range) {
  const std::string& text = *d.text;
  if (!range) return text;
  const size_t a = offset_of(text, range->start);
  const size_t b = offset_of(text, range->end);
  return a < b ? text.substr(a, b - a) : text;
}

}  // namespace

const std::vector<std::string>& Server::Impl::commands() {
  static const std::vector<std::string> list{"moelsp.accepted", "moelsp.chat",   "moelsp.explain", "moelsp.fix",
                                             "moelsp.document", "moelsp.reload", "moelsp.snooze",  "moelsp.resume"};
  return list;
}

void Server::Impl::on_execute_command(const ExecuteCommandParams& p, Reply reply) {
  if (std::find(commands().begin(), commands().end(), p.command) == commands().end())
    return reply.error(kInvalidParams, "unknown command " + p.command);
  if (p.command == "moelsp.reload") {  // reload the model (and its plan) without restarting the process
    reload();
    return reply(nullptr);
  }
  if (p.command == "moelsp.snooze" || p.command == "moelsp.resume") return snooze(p, std::move(reply));
  if (p.command == "moelsp.accepted") {  // the inline item's command: the user took the suggestion
    service.count_accepted();
    return reply(nullptr);
  }
  ChatParams args = p.chat;
  args.work_done_token = p.work_done_token;
  args.partial_result_token = nullptr;
  chat(p.command, args, std::move(reply));
}

void Server::Impl::on_chat(const ChatParams& p, Reply reply) { chat("moelsp.chat", p, std::move(reply)); }

void Server::Impl::chat(const std::string& command, const ChatParams& args, Reply reply) {
  // The question (validation errors are answered here, as invalid params).
  assist::ChatQuery q;
  q.kind = command == "moelsp.explain"    ? assist::ChatKind::Explain
           : command == "moelsp.fix"      ? assist::ChatKind::Fix
           : command == "moelsp.document" ? assist::ChatKind::Document
                                          : assist::ChatKind::Chat;
  const Settings s = effective();
  if (args.uri) {
    const auto doc = docs.get(*args.uri);
    if (!doc) return reply.error(kInvalidParams, "document not open: " + *args.uri);
    if (assist::exclude_list(s.exclude).excluded(*args.uri))
      return reply.error(kInvalidParams, assist::path_of_uri(*args.uri) +
                                             " is excluded (setting exclude): its text is not sent to a model");
    q.code = selection(*doc, args.range);
    q.language = doc->language;
  }
  if (q.kind == assist::ChatKind::Chat) {
    if (args.messages.empty()) return reply.error(kInvalidParams, "moelsp.chat needs messages: [{role, content}, ...]");
    for (const auto& m : args.messages) q.messages.push_back({m.role, m.content});
  } else if (q.code.empty()) {
    return reply.error(kInvalidParams, command + " needs uri (and range) of the code");
  }
  auto ticket = track(reply.id());
  q.max_tokens = *s.chat_max_tokens;
  q.template_override = s.chat_template.value_or("");
  const json work_token = args.work_done_token, partial_token = args.partial_result_token;
  enqueue(Lane::Chat, reply, [this, reply, ticket, q, work_token, partial_token] {
    progress(work_token, {{"kind", "begin"}, {"title", "moelsp chat"}, {"cancellable", true}});
    const auto on_text = [this, work_token, partial_token](const std::string& text) {
      progress(work_token, {{"kind", "report"}, {"message", text}});
      progress(partial_token, {{"text", text}});
    };
    const assist::ChatAnswer a = service.chat(q, on_text, *ticket);
    progress(work_token, {{"kind", "end"}});
    untrack(reply.id(), ticket);
    if (ticket->cancelled() || a.reason == FinishReason::Cancelled)
      return reply.error(kRequestCancelled, "request cancelled");
    if (a.reason == FinishReason::Error)  // the conversation's own fault (a template refusal) or ours
      return reply.error(a.error_kind == ErrorKind::Server ? kInternalError : kInvalidParams, a.error);
    json result{{"text", a.text}, {"finishReason", to_string(a.reason)}, {"tokensPerSecond", a.tokens_per_second}};
    if (!a.reasoning.empty()) result["reasoning"] = a.reasoning;
    reply(result);
  });
}

}  // namespace moelsp::lsp

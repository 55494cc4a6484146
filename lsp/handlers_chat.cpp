// Chat: workspace/executeCommand (moelsp.chat, moelsp.explain, moelsp.fix,
// moelsp.document) and the moelsp/chat request. The answer streams as
// $/progress: WorkDoneProgress reports (message = the new text) on the
// request's workDoneToken, and {"text": new text} on its partialResultToken.
// The final result is {"text", "finishReason", "tokensPerSecond"}, and for
// explain, fix and document "question": the turn as asked (the canned
// questions live in assist/, never in the editors).
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

std::vector<std::string> Server::Impl::command_names() const {
  std::vector<std::string> names;
  for (const auto& [name, handler] : commands) names.push_back(name);
  return names;
}

void Server::Impl::on_execute_command(const ExecuteCommandParams& p, Reply reply) {
  const auto it = std::find_if(commands.begin(), commands.end(), [&](const auto& c) { return c.first == p.command; });
  if (it == commands.end()) return reply.error(kInvalidParams, "unknown command " + p.command);
  (this->*(it->second))(p, std::move(reply));
}

void Server::Impl::reload_command(const ExecuteCommandParams&, Reply reply) {
  reload();  // the model (and its plan), without restarting the process
  reply(nullptr);
}

void Server::Impl::accepted_command(const ExecuteCommandParams&, Reply reply) {
  service.count_accepted();
  reply(nullptr);
}

void Server::Impl::chat_command(const ExecuteCommandParams& p, Reply reply) {
  ChatParams args = p.chat;
  args.work_done_token = p.work_done_token;
  args.partial_result_token = nullptr;
  chat(p.command, args, std::move(reply));
}

void Server::Impl::on_chat(const ChatParams& p, Reply reply) { chat("moelsp." + p.kind, p, std::move(reply)); }

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
  } else if (args.code) {
    q.code = *args.code;
    q.language = args.language;
  }
  if (q.kind == assist::ChatKind::Chat) {
    if (args.messages.empty()) return reply.error(kInvalidParams, "moelsp.chat needs messages: [{role, content}, ...]");
    for (const auto& m : args.messages) q.messages.push_back({m.role, m.content});
  } else if (q.code.empty()) {
    return reply.error(kInvalidParams, command + " needs the code: uri (and range), or code");
  }
  auto ticket = track(reply.id());
  q.max_tokens = *s.chat_max_tokens;
  q.template_override = s.chat_template.value_or("");
  const json work_token = args.work_done_token, partial_token = args.partial_result_token;
  const std::optional<std::string> question =
      q.kind == assist::ChatKind::Chat ? std::nullopt : std::optional(assist::command_turn(q.kind, q.code, q.language));
  enqueue(Lane::Chat, reply, [this, reply, ticket, q, work_token, partial_token, question] {
    progress(work_token, to_json(WorkDoneProgressBegin{.title = "moelsp chat", .message = {}, .cancellable = true}));
    const auto on_text = [this, work_token, partial_token](const std::string& text) {
      progress(work_token, to_json(WorkDoneProgressReport{text}));
      progress(partial_token, to_json(PartialChatResult{text}));
    };
    const assist::ChatAnswer a = service.chat(q, on_text, *ticket);
    progress(work_token, to_json(WorkDoneProgressEnd{}));
    untrack(reply.id(), ticket);
    if (ticket->cancelled() || a.reason == FinishReason::Cancelled)
      return reply.error(kRequestCancelled, "request cancelled");
    if (a.reason == FinishReason::Error)  // the conversation's own fault (a template refusal) or ours
      return reply.error(a.error_kind == ErrorKind::Server ? kInternalError : kInvalidParams, a.error);
    reply(to_json(ChatResult{.text = a.text,
                             .finish_reason = to_string(a.reason),
                             .tokens_per_second = a.tokens_per_second,
                             .reasoning = a.reasoning.empty() ? std::nullopt : std::optional(a.reasoning),
                             .question = question}));
  });
}

}  // namespace moelsp::lsp

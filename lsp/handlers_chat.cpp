// Chat: workspace/executeCommand (moelsp.chat, moelsp.explain, moelsp.fix,
// moelsp.document) and the moelsp/chat request. The answer streams as
// $/progress: WorkDoneProgress reports (message = the new text) on the
// request's workDoneToken, and {"text": new text} on its partialResultToken.
// The final result is {"text", "finishReason"}.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "engine/chat.h"
#include "engine/gguf.h"
#include "server_impl.h"

namespace moelsp::lsp {

namespace {

const char* kSystem =
    "You are moelsp, a concise coding assistant running locally in the user's editor. "
    "Answer with correct, idiomatic code and brief explanations.";

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
  // Build the conversation (validation errors are answered here, as invalid params).
  // The code context stays separate until the worker knows the model, so it
  // can be shortened to fit the context window there.
  std::string code, fence;
  if (args.contains("uri")) {
    const auto doc = docs.get(args.at("uri"));
    if (!doc) return reply_error(id, kInvalidParams, "document not open: " + args.at("uri").get<std::string>());
    code = selection(*doc, args.value("range", json()));
    fence = "```" + doc->language + "\n";
  }
  std::vector<ChatMessage> asked;
  if (command == "moelsp.chat") {
    if (!args.contains("messages") || !args["messages"].is_array() || args["messages"].empty())
      return reply_error(id, kInvalidParams, "moelsp.chat needs messages: [{role, content}, ...]");
    for (const auto& m : args["messages"]) asked.push_back({m.at("role"), m.at("content")});
  } else {
    if (code.empty()) return reply_error(id, kInvalidParams, command + " needs uri (and range) of the code");
    const char* ask = command == "moelsp.explain" ? "Explain what this code does."
                      : command == "moelsp.fix"   ? "Find the bugs in this code and give a fixed version."
                                                  : "Write documentation comments for this code.";
    asked.push_back({"user", ask});
  }
  const bool is_chat = command == "moelsp.chat", has_code = args.contains("uri");
  // The messages with `text` as the code: moelsp.chat puts it ahead of the last
  // message as context, the commands after their question.
  const auto conversation = [asked, fence, is_chat, has_code](const std::string& text) {
    std::vector<ChatMessage> m{{"system", kSystem}};
    m.insert(m.end(), asked.begin(), asked.end());
    if (has_code) {
      const std::string block = fence + text + "\n```";
      m.back().content = is_chat ? "Context:\n" + block + "\n\n" + m.back().content : m.back().content + "\n\n" + block;
    }
    return m;
  };
  auto p = track(id);
  const Settings s = effective();
  enqueue([this, id, p, s, code, conversation, work_token, partial_token] {
    Engine* eng = current_engine();
    if (!eng) {
      untrack(id);
      return reply_error(id, kInternalError, "the model is not loaded (see moelsp/status)");
    }
    std::string tmpl;
    try {
      const std::string jinja = eng->model().file().get_or<std::string>("tokenizer.chat_template", "");
      tmpl = resolve_chat_template(jinja, s.chat_template.value_or(""));
    } catch (const std::exception& e) {
      untrack(id);
      return reply_error(id, kInternalError, std::string(e.what()) + " (LSP setting: chat.template)");
    }
    // Fit the prompt to the context, keeping a quarter (or chat.maxTokens, if
    // less) for the answer: the code loses whole lines from its end first.
    const Tokenizer& tok = eng->model().tokenizer();
    const int budget = eng->n_ctx() - std::min(*s.chat_max_tokens, eng->n_ctx() / 4);
    const auto fits = [&](const std::string& text) {
      const auto ids = tok.encode(apply_chat_template(tmpl, conversation(text)), {.add_special = true, .parse_special = true});
      return int(ids.size()) <= budget;
    };
    std::string shown = code;
    if (!code.empty() && !fits(code)) {
      std::vector<size_t> ends;  // line ends: candidate cut points
      for (size_t i = code.find('\n'); i != std::string::npos; i = code.find('\n', i + 1)) ends.push_back(i);
      size_t lo = 0, hi = ends.size();  // keep ends[k-1] lines: the largest k that fits
      while (lo < hi) {
        const size_t mid = (lo + hi + 1) / 2;
        if (fits(code.substr(0, ends[mid - 1]) + "\n...")) lo = mid;
        else hi = mid - 1;
      }
      shown = lo > 0 ? code.substr(0, ends[lo - 1]) + "\n..." : "...";
      spdlog::info("chat: code context cut to {} of {} bytes to fit the context of {} tokens", shown.size(), code.size(),
                   eng->n_ctx());
    }
    Request req;
    req.prompt = apply_chat_template(tmpl, conversation(shown));
    req.max_tokens = *s.chat_max_tokens;
    req.sampling.temperature = 0.3f;
    req.sampling.repeat_penalty = 1.1f;
    req.priority = Priority::kChat;  // completions go first for prompt budget and KV blocks
    progress(work_token, {{"kind", "begin"}, {"title", "moelsp chat"}, {"cancellable", true}});
    Callbacks cb;
    cb.on_token = [this, work_token, partial_token](TokenId, const std::string& text) {
      progress(work_token, {{"kind", "report"}, {"message", text}});
      progress(partial_token, {{"text", text}});
    };
    begin_busy();
    auto h = p->submit(*eng, std::move(req), std::move(cb));
    Result r;
    if (h) r = h->wait();
    else r.reason = FinishReason::Cancelled;
    end_busy(r.timings.generate_tps());
    progress(work_token, {{"kind", "end"}});
    untrack(id);
    if (p->cancelled || r.reason == FinishReason::Cancelled) return reply_error(id, kRequestCancelled, "request cancelled");
    if (r.reason == FinishReason::Error) return reply_error(id, kInternalError, r.error);
    reply(id, {{"text", r.text}, {"finishReason", to_string(r.reason)}, {"tokensPerSecond", r.timings.generate_tps()}});
  });
}

}  // namespace moelsp::lsp
